"""Apply a compile config through the plain collector surface, and record what took effect.

This is the only code that applies a :class:`~workbench.compile_config.CompileConfig` (which is data).
``Collector(path, compile_config=...)`` builds a :class:`ConfigApplier`; it never raises into training. What it
does, setting by setting (``docs/compile-config.md``, "How the collector applies a config"):

- ``[env]``: set in ``os.environ`` when the collector is created.
- ``[dynamo]`` / ``[inductor]`` / ``[compiler]``, guard collectives, the stance without ``after_step``, the cache
  load: set in every thread that runs steps (torch config is per thread), key by key. These are read when Dynamo
  traces, so they take effect even for a model compiled before the collector existed.
- ``[compile]`` and ``[mark_dynamic]``: from construction to close, ``torch.compile`` is wrapped. A call made then
  gets the config's keyword arguments (the config wins over the call's own, e.g. ``dynamic=False``), and the
  compiled module or function marks its inputs dynamic before every call. A bad backend, bad ``options`` or a
  mark whose ``min``/``max`` excludes the input's size is refused and recorded, and the call compiles as the user
  wrote it. ``collector.instrument(model)`` also marks inputs (as before).
- ``[stance] after_step``, ``[distributed] barrier_after_step``, ``[cache] save``: at the end of that step.
- ``[cache] load``: once per process, the bundle read and checked (:mod:`workbench.compile_cache`) and those
  same bytes handed to ``torch.compiler.load_cache_artifacts``; ``save`` writes a bundle sealed for this user
  into the config's folder (a new file renamed over the old one, never through a symlink).

:meth:`ConfigApplier.report` lists every setting with ``applied`` (bool), ``how`` and ``reason`` (why not);
the collector writes it to ``run.json`` and each rank's ``fingerprint.json`` as ``compile_config_applied``.

"Applied" says the value was set; ``took_effect`` (beside it) says whether it acted on this torch, checked after
the first compile (:meth:`ConfigApplier.check_effect`): a setting that makes a dim dynamic (``[compiler]
dynamic_sources``, ``[mark_dynamic]``) took effect when that compile created a symbol for the dim (torch's
``create_symbol`` trace record); any other setting when it reads back in the thread that runs the steps (torch
config is per thread from 2.12) and the fix matrix says it acts on this torch (:mod:`workbench.fix_versions`).
``effect`` says how it was decided; ``took_effect`` is None where nothing could tell (no compile seen).
A setting nothing could apply (``torch.compile`` never called while the collector existed, a step never reached)
is recorded as not applied at close.
"""

from __future__ import annotations

import builtins
import functools
import importlib
import logging
import os
import sys
import tempfile
import threading
from typing import Any, Callable

from workbench.compile_config import CONFIG_MODULES, CompileConfig, MarkDynamic, read_cache_bundle, \
    torch_entry_type
from workbench.errors import InputError

Fail = Callable[[str, BaseException], None]


class ConfigApplier:
    """Applies one :class:`CompileConfig` in a training process and records each setting's outcome."""

    def __init__(self, cfg: CompileConfig, fail: Fail) -> None:
        if not cfg.unsafe_allowed:      # a config built by hand passes the allowlist here too (InputError)
            CompileConfig.from_dict(cfg.to_dict(), source=cfg.source, validate=False, base_dir=cfg.base_dir)
        self.cfg = cfg
        self._fail = fail
        self._records: dict[str, dict[str, Any]] = {}
        self._threads: set[int] = set()
        self._orig_compile: Any = None
        self._wrapper: Any = None
        self.compile_calls = 0
        self.marked_calls = 0
        self._marks_off: set[int] = set()   # indices of cfg.mark_dynamic refused for good
        self._stance_done = False
        self._cache_loaded = False
        self._previous: dict[tuple[int, str, str], Any] = {}   # (thread, module, key) -> value before the config
        self._symbols: list[str] = []      # sources torch made a symbol for (create_symbol), in order
        self._compiles_seen = 0
        self._watch: Any = None
        for key in self._keys():
            self._records[key] = {"setting": key, "value": self._value(key), "applied": False,
                                  "how": None, "reason": "not reached yet", "took_effect": None, "effect": None}

    # ------------------------------------------------------------------ records
    def _keys(self) -> list[str]:
        c = self.cfg
        keys = [f"env.{k}" for k in c.env]
        for section in CONFIG_MODULES:
            keys += [f"{section}.{k}" for k in getattr(c, section)]
        keys += [f"compile.{k}" for k in c.compile]
        keys += [f"mark_dynamic.{m.arg}:{m.dim}" for m in c.mark_dynamic]
        keys += [f"stance.{k}" for k in c.stance if k == "stance"]
        keys += [f"distributed.{k}" for k in c.distributed]
        keys += [f"cache.{k}" for k in c.cache if k in ("load", "save")]
        return keys

    def _value(self, key: str) -> Any:
        section, _, name = key.partition(".")
        if section == "mark_dynamic":
            arg, _, dim = name.rpartition(":")
            m = next(m for m in self.cfg.mark_dynamic if m.arg == arg and str(m.dim) == dim)
            return m.to_toml_value()
        body = getattr(self.cfg, section)
        return body.get(name) if isinstance(body, dict) else None

    def ok(self, key: str, how: str) -> None:
        rec = self._records.setdefault(key, {"setting": key, "value": None})
        rec.update(applied=True, how=how, reason=None)

    def refused(self, key: str, reason: str) -> None:
        rec = self._records.setdefault(key, {"setting": key, "value": None})
        if not rec.get("applied"):
            rec.update(applied=False, reason=reason)

    def report(self) -> list[dict[str, Any]]:
        """Every setting of the config: ``setting``, ``value``, ``applied``, ``how``, ``reason``."""
        return [dict(r) for r in self._records.values()]

    def not_applied(self) -> list[dict[str, Any]]:
        return [r for r in self.report() if not r["applied"]]

    # ------------------------------------------------------------------ env (at construction)
    def apply_env(self, environ: dict[str, str] | None = None) -> dict[str, str | None]:
        """Set ``[env]`` in ``os.environ`` (or ``environ``); returns the previous values (None where unset)."""
        target: Any = os.environ if environ is None else environ
        late = "torch" in sys.modules
        previous: dict[str, str | None] = {}
        for key, value in self.cfg.env.items():
            try:
                previous[key] = target.get(key)
                target[key] = value
                self.ok(f"env.{key}", "os.environ at Collector()" + (
                    " (torch was already imported: a variable torch reads only at import has no effect)"
                    if late else ""))
            except Exception as exc:  # noqa: BLE001 - never into training
                self.refused(f"env.{key}", f"{type(exc).__name__}: {exc}")
        return previous

    # ------------------------------------------------------------------ per thread
    def apply_in_thread(self) -> dict[str, Any]:
        """torch config values, guard/compiler collectives, the immediate stance and the cache load, in this
        thread (once per thread; torch config is per thread). Returns ``{"section.key": value before}``."""
        tid = threading.get_ident()
        if tid in self._threads:
            return {}
        self._threads.add(tid)
        self.watch_compiles()
        before: dict[str, Any] = {}
        where = "main thread" if threading.current_thread() is threading.main_thread() else f"thread {tid}"
        for section, modname in CONFIG_MODULES.items():
            for key, value in getattr(self.cfg, section).items():
                name = f"{section}.{key}"
                try:
                    module = importlib.import_module(modname)
                    old = _get_config(module, key)                 # unknown in this torch: AttributeError
                    _set_config(module, key, self._torch_value(module, key, value))
                    self._previous.setdefault((tid, modname, key), old)
                    before[name] = old
                    self.ok(name, f"{modname}.{key} set in the {where}")
                except Exception as exc:  # noqa: BLE001
                    self.refused(name, f"{modname}.{key} could not be set: {type(exc).__name__}: {exc}")
        dist_cfg = self.cfg.distributed
        if dist_cfg.get("compiler_collectives"):
            try:
                import torch._dynamo.config as dcfg

                self._previous.setdefault((tid, "torch._dynamo.config", "enable_compiler_collectives"),
                                          dcfg.enable_compiler_collectives)
                dcfg.enable_compiler_collectives = True
                self.ok("distributed.compiler_collectives", "torch._dynamo.config.enable_compiler_collectives")
            except Exception as exc:  # noqa: BLE001
                self.refused("distributed.compiler_collectives", f"{type(exc).__name__}: {exc}")
        if "guard_collectives" in dist_cfg:
            try:
                import torch.compiler

                torch.compiler.set_enable_guard_collectives(bool(dist_cfg["guard_collectives"]))
                self.ok("distributed.guard_collectives", "torch.compiler.set_enable_guard_collectives")
            except Exception as exc:  # noqa: BLE001
                self.refused("distributed.guard_collectives", f"{type(exc).__name__}: {exc}")
        if self.cfg.stance and self.cfg.stance.get("after_step") is None:
            self._set_stance("at start")
        if self.cfg.cache.get("load") and not self._cache_loaded:
            self._cache_loaded = True
            self._load_cache()
        return before

    def _torch_value(self, module: Any, key: str, value: Any) -> Any:
        """TOML has lists and strings; some config entries want sets or callables (builtins only, unless the
        caller allowed unsafe settings: then ``module.func`` is imported)."""
        vtype = torch_entry_type(module, key)
        origin = getattr(vtype, "__origin__", vtype)
        if key == "reorderable_logging_functions" and isinstance(value, list):
            return {self._callable(v) if isinstance(v, str) else v for v in value}
        if origin in (set, frozenset) and isinstance(value, list):
            return origin(value)
        if origin is tuple and isinstance(value, list):
            return tuple(value)
        return value

    def _callable(self, name: str) -> Any:
        if "." not in name and callable(getattr(builtins, name, None)):
            return getattr(builtins, name)
        if not self.cfg.unsafe_allowed:
            raise ValueError(f"{name!r} is not a builtin; importing it needs allow_unsafe=True")
        modname, _, attr = name.rpartition(".")
        return getattr(importlib.import_module(modname), attr)

    # ------------------------------------------------------------------ cache
    def _load_cache(self) -> None:
        """``[cache] load``: the bundle read once, checked, and those same bytes given to torch."""
        name = self.cfg.cache["load"]
        try:
            data = read_cache_bundle(self.cfg)
            if data is None:
                if self.cfg.cache.get("save") == name:
                    self.ok("cache.load", f"first run of the warm start: no {name} yet, this run saves it "
                                          f"(save_after_step={self.cfg.cache.get('save_after_step', 0)})")
                else:
                    self.refused("cache.load", f"{name} does not exist: nothing loaded")
                return
            import torch.compiler

            info = torch.compiler.load_cache_artifacts(data)
            if info is None:
                self.refused("cache.load", f"torch could not read {name}: nothing loaded")
            else:
                self.ok("cache.load", "torch.compiler.load_cache_artifacts at start "
                                      f"({sum(len(v) for v in info.artifacts.values())} artifacts)")
        except InputError as exc:   # a refused bundle is recorded, never raised into training
            self.refused("cache.load", str(exc))
        except Exception as exc:  # noqa: BLE001
            self.refused("cache.load", f"{type(exc).__name__}: {exc}")

    def _save_cache(self) -> bool:
        """``[cache] save``: torch's bundle, sealed for this user, written to a new file in the config's folder and
        renamed over the old one (a rename replaces a symlink, it never writes through one)."""
        from workbench import compile_cache

        path = self.cfg.cache_file("save")
        if path is None:
            return False
        import torch.compiler

        result = torch.compiler.save_cache_artifacts()
        if result is None:
            return False
        blob = compile_cache.seal(result[0], compile_cache.seal_key(create=True))
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
        return True

    def _set_stance(self, when: str) -> None:
        if self._stance_done:
            return
        self._stance_done = True
        try:
            import torch.compiler

            kwargs = {k: self.cfg.stance[k] for k in ("skip_guard_eval_unsafe", "force_backend")
                      if k in self.cfg.stance}
            torch.compiler.set_stance(self.cfg.stance.get("stance", "default"), **kwargs)
            self.ok("stance.stance", f"torch.compiler.set_stance {when}")
        except Exception as exc:  # noqa: BLE001
            self.refused("stance.stance", f"set_stance failed: {type(exc).__name__}: {exc}")

    # ------------------------------------------------------------------ took effect?
    def watch_compiles(self) -> None:
        """Listen to torch's trace records (symbols created, compiles finished) while the collector exists."""
        if self._watch is not None:
            return
        try:
            from torch._logging import _internal

            self._watch = _EffectWatch(self)
            _internal.trace_log.addHandler(self._watch)
        except Exception as exc:  # noqa: BLE001
            self._watch = None
            self._fail("compile_config", exc)

    def observe(self, metadata: dict[str, Any]) -> None:
        """One trace record's metadata: a symbol's source is remembered; after the first compile that finished, the
        dynamic-dim settings are decided."""
        sym = metadata.get("create_symbol")
        if isinstance(sym, dict) and isinstance(sym.get("source"), str):
            self._symbols.append(sym["source"])
        if "compilation_metrics" in metadata:
            self._compiles_seen += 1
            if self._compiles_seen == 1:
                self._decide_dynamic()

    def _dynamic_targets(self) -> dict[str, list[tuple[str | None, int | None]]]:
        """Per dynamic-dim setting, the (source, dim) pairs it should make symbolic (source None: any)."""
        out: dict[str, list[tuple[str | None, int | None]]] = {}
        ds = self.cfg.compiler.get("dynamic_sources")
        if ds:
            pairs = []
            for entry in str(ds).split(","):
                src, sep, dim = entry.strip().rpartition(":")
                pairs.append((src, int(dim)) if sep and dim.isdigit() else (entry.strip(), None))
            out["compiler.dynamic_sources"] = pairs
        for m in self.cfg.mark_dynamic:
            src = f"L['{m.arg}']" if str(m.arg).isidentifier() else None
            out[_mkey(m)] = [(src, int(m.dim))]
        return out

    def _decide_dynamic(self) -> None:
        for key, pairs in self._dynamic_targets().items():
            rec = self._records.get(key)
            if rec is None or not rec.get("applied") or rec.get("took_effect") is not None:
                continue
            hit = [s for s in self._symbols for src, dim in pairs
                   if (src is None or s.startswith(f"{src}.size()")) and (dim is None or s.endswith(f".size()[{dim}]"))]
            want = ", ".join(f"{src or 'an input'}{'' if dim is None else f' dim {dim}'}" for src, dim in pairs)
            rec["took_effect"] = bool(hit)
            rec["effect"] = (f"the first compile made {hit[0]} symbolic" if hit else
                             f"the first compile made no symbol for {want} (symbols: "
                             f"{', '.join(self._symbols[:4]) or 'none'}): the setting did not act on torch "
                             f"{_torch_version()}")

    def check_effect(self) -> None:
        """Decide ``took_effect`` of the applied settings that do not need a compile to tell, in this thread (the
        one running steps): the value reads back, and the fix matrix says it acts on this torch."""
        from workbench.fix_versions import setting_acts

        version = _torch_version()
        dynamic = self._dynamic_targets()
        for key, rec in self._records.items():
            if not rec.get("applied") or rec.get("took_effect") is not None or key in dynamic:
                continue
            section, _, name = key.partition(".")
            why = setting_acts(section, name, rec.get("value"), version)
            if why is None and section in CONFIG_MODULES:
                try:
                    module = importlib.import_module(CONFIG_MODULES[section])
                    seen = _get_config(module, name)
                    want = self._torch_value(module, name, rec.get("value"))
                    if seen != want:
                        why = f"reads back as {seen!r} in the thread that runs the steps, not {want!r}"
                except Exception as exc:  # noqa: BLE001
                    why = f"cannot be read back: {type(exc).__name__}: {exc}"
            rec["took_effect"] = why is None
            rec["effect"] = (f"acts on torch {version}" + (" (read back in the step thread)"
                                                           if section in CONFIG_MODULES else "")) if why is None else why

    # ------------------------------------------------------------------ per step
    def on_step_end(self, step: int) -> list[str]:
        """At the end of each step (outside compiled code): the stance once ``step >= after_step``, the barrier
        of ``barrier_after_step``, the cache save of ``save_after_step``. Returns what was done, in words."""
        done: list[str] = []
        try:
            self.check_effect()
        except Exception as exc:  # noqa: BLE001
            self._fail("compile_config", exc)
        after = self.cfg.stance.get("after_step")
        if self.cfg.stance and after is not None and step >= after and not self._stance_done:
            self._set_stance(f"at the end of step {step}")
            done.append(f"stance={self.cfg.stance.get('stance', 'default')}")
        if self.cfg.distributed.get("barrier_after_step") == step:
            try:
                import torch.distributed as dist

                if dist.is_available() and dist.is_initialized():
                    dist.barrier()
                    self.ok("distributed.barrier_after_step", f"dist.barrier() at the end of step {step}")
                    done.append("barrier")
                else:
                    self.refused("distributed.barrier_after_step", "torch.distributed is not initialised")
            except Exception as exc:  # noqa: BLE001
                self.refused("distributed.barrier_after_step", f"{type(exc).__name__}: {exc}")
        if self.cfg.cache.get("save") and self.cfg.cache.get("save_after_step", 0) == step:
            try:
                if self._save_cache():
                    self.ok("cache.save", f"save_cache_artifacts at the end of step {step}")
                    done.append("saved cache artifacts")
                else:
                    self.refused("cache.save", "torch had no cache artifacts to save")
            except InputError as exc:
                self.refused("cache.save", str(exc))
            except Exception as exc:  # noqa: BLE001
                self.refused("cache.save", f"{type(exc).__name__}: {exc}")
        return done

    # ------------------------------------------------------------------ torch.compile wrapper
    def install(self) -> None:
        """Wrap ``torch.compile`` (only when the config has ``[compile]`` or ``[mark_dynamic]``)."""
        if not (self.cfg.compile or self.cfg.mark_dynamic):
            return
        try:
            import torch

            self._orig_compile = torch.compile
            self._wrapper = self._make_wrapper(torch.compile)
            torch.compile = self._wrapper
        except Exception as exc:  # noqa: BLE001
            self._fail("compile_config", exc)

    def uninstall(self) -> None:
        if self._wrapper is None:
            return
        import torch

        if torch.compile is self._wrapper:
            torch.compile = self._orig_compile
        self._wrapper = None

    def _make_wrapper(self, orig: Any) -> Any:
        applier = self

        @functools.wraps(orig)
        def compile(model: Any = None, **kwargs: Any) -> Any:  # noqa: A001 - stands in for torch.compile
            if model is None:                 # @torch.compile(...) used as a decorator factory
                return lambda fn: compile(fn, **kwargs)
            return applier.compile(orig, model, kwargs)

        compile.__workbench_wrapped__ = True  # type: ignore[attr-defined]
        return compile

    def compile(self, orig: Any, model: Any, kwargs: dict[str, Any]) -> Any:
        """``orig(model, **kwargs)`` with the config's ``[compile]`` arguments; refuses what cannot work."""
        self.compile_calls += 1
        extra = self._checked_compile_kwargs(kwargs)
        compiled = None
        if extra:
            try:
                compiled = orig(model, **{**kwargs, **extra})
                for k in extra:
                    was = f" (the call had {k}={kwargs[k]!r})" if k in kwargs and kwargs[k] != extra[k] else ""
                    self.ok(f"compile.{k}", f"torch.compile(..., {k}={extra[k]!r}) by the collector{was}")
            except Exception as exc:  # noqa: BLE001 - e.g. options torch rejects: compile as written
                for k in extra:
                    self.refused(f"compile.{k}", f"torch.compile raised {type(exc).__name__}: {exc}; "
                                                 f"compiled with the call's own arguments")
                compiled = None
        if compiled is None:
            compiled = orig(model, **kwargs)
        if self.cfg.mark_dynamic:
            compiled = self._with_marks(compiled, model)
        return compiled

    def _checked_compile_kwargs(self, call: dict[str, Any]) -> dict[str, Any]:
        extra = dict(self.cfg.compile_kwargs)
        backend = extra.get("backend")
        if isinstance(backend, str):
            try:
                import torch._dynamo

                known = set(torch._dynamo.list_backends(exclude_tags=())) | {"inductor"}
                if backend not in known:
                    self.refused("compile.backend", f"backend {backend!r} is not registered in this torch "
                                                    f"(known: {', '.join(sorted(known))})")
                    extra.pop("backend")
            except Exception as exc:  # noqa: BLE001
                self.refused("compile.backend", f"cannot list backends: {exc}")
                extra.pop("backend")
        opts = extra.get("options")
        if isinstance(opts, dict):
            import torch._inductor.config as icfg

            bad = [k for k in opts if not _has_config(icfg, k)]
            if bad:
                self.refused("compile.options", f"unknown inductor option(s) {', '.join(bad)} in this torch")
                extra.pop("options")
        # torch.compile takes mode or options, not both: a config value that meets the call's other one is refused
        for key, other in (("mode", "options"), ("options", "mode")):
            if key in extra and other in call and other not in extra:
                self.refused(f"compile.{key}", f"the call passes {other}=; torch.compile accepts only one of mode "
                                               f"and options")
                extra.pop(key)
        return extra

    # ------------------------------------------------------------------ mark_dynamic
    def _with_marks(self, compiled: Any, model: Any) -> Any:
        import torch

        if isinstance(compiled, torch.nn.Module):
            inner = getattr(compiled, "_orig_mod", model)
            fwd = compiled.forward
            compiled.forward = self._marking(fwd, inner)
            return compiled
        return self._marking(compiled, model)

    def _marking(self, fn: Any, target: Any) -> Any:
        applier = self

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            marked = applier.mark(args, kwargs, target)
            if not marked:
                return fn(*args, **kwargs)
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                if not _is_constraint_violation(exc):
                    raise
                # the model specialises the dim the config marked: drop the marks, record it, run as written
                for i, t in marked:
                    applier._marks_off.add(i)
                    _unmark(t)
                    m = applier.cfg.mark_dynamic[i]
                    applier._records[_mkey(m)].update(applied=False, how=None, reason=(
                        f"Dynamo refused the dynamic dim ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})"))
                return fn(*args, **kwargs)

        return call

    def mark(self, args: tuple, kwargs: dict[str, Any], target: Any) -> list[tuple[int, Any]]:
        """Mark the configured inputs of one call dynamic; returns (mark index, tensor) for each mark made.
        A mark whose ``min``/``max`` excludes the input's size is refused (recorded), never raised."""
        import torch

        bound = _bind(target, args, kwargs)
        marked: list[tuple[int, Any]] = []
        for i, m in enumerate(self.cfg.mark_dynamic):
            if i in self._marks_off:
                continue
            key = _mkey(m)
            value = _resolve(m.arg, args, kwargs, bound)
            if not isinstance(value, torch.Tensor):
                self.refused(key, f"the compiled code has no tensor input {m.arg!r} "
                                  f"(inputs: {', '.join(bound) or len(args)})")
                continue
            if m.dim >= value.dim():
                self.refused(key, f"input {m.arg!r} has {value.dim()} dims, no dim {m.dim}")
                continue
            size = int(value.shape[m.dim])
            lo, hi = m.min, m.max
            if (lo is not None and size < lo) or (hi is not None and size > hi) or \
                    (lo is not None and hi is not None and lo > hi):
                self._marks_off.add(i)
                self._records[key].update(applied=False, how=None, reason=(
                    f"size {size} of {m.arg!r} dim {m.dim} is outside min={lo}, max={hi}: marking it would "
                    f"make the compile fail"))
                continue
            try:
                extra = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
                torch._dynamo.mark_dynamic(value, m.dim, **extra)
            except Exception as exc:  # noqa: BLE001
                self._marks_off.add(i)
                self.refused(key, f"mark_dynamic raised {type(exc).__name__}: {exc}")
                continue
            marked.append((i, value))
            self.ok(key, "torch._dynamo.mark_dynamic before each call of the compiled code")
        if marked:
            self.marked_calls += 1
        return marked

    def hook_module(self, module: Any) -> Any:
        """``collector.instrument(model)``: a forward pre-hook that marks the model's inputs (handle returned)."""

        def hook(mod: Any, args: tuple, kwargs: dict[str, Any]) -> None:
            inner = getattr(mod, "module", mod)
            inner = getattr(inner, "_orig_mod", inner)
            self.mark(args, kwargs, inner)

        return module.register_forward_pre_hook(hook, with_kwargs=True)

    # ------------------------------------------------------------------ close
    def close(self, steps: int) -> None:
        """Uninstall the wrapper, restore the torch config values this thread had before, and give the settings
        nothing applied their reason."""
        self.uninstall()
        try:
            self.check_effect()
            if self._watch is not None:
                from torch._logging import _internal

                _internal.trace_log.removeHandler(self._watch)
                self._watch = None
        except Exception:  # noqa: BLE001
            pass
        for key, rec in self._records.items():
            if rec.get("applied") and rec.get("took_effect") is None and rec.get("effect") is None:
                rec["effect"] = "not checked: no compile finished while the collector watched"
        tid = threading.get_ident()
        for (t, modname, key), old in list(self._previous.items()):
            if t == tid:
                try:
                    _set_config(importlib.import_module(modname), key, old)
                except Exception:  # noqa: BLE001
                    pass
                del self._previous[(t, modname, key)]
        for key, rec in self._records.items():
            if rec["applied"] or rec["reason"] != "not reached yet":
                continue
            section = key.split(".", 1)[0]
            if section == "compile":
                rec["reason"] = ("torch.compile was not called while the collector existed: create the Collector "
                                 "before calling torch.compile, or use the [compiler]/[dynamo] equivalent")
            elif section == "mark_dynamic":
                rec["reason"] = ("no compiled model was called while the collector existed (torch.compile before "
                                 "Collector(), or no collector.instrument(model)): use [compiler] dynamic_sources")
            elif key == "stance.stance":
                rec["reason"] = f"the run ended at step {steps - 1} before after_step={self.cfg.stance.get('after_step')}"
            elif key == "distributed.barrier_after_step":
                rec["reason"] = f"the run ended at step {steps - 1} before step {self.cfg.distributed.get(key.split('.')[1])}"
            elif key == "cache.save":
                rec["reason"] = f"the run ended before save_after_step={self.cfg.cache.get('save_after_step', 0)}"
            else:
                rec["reason"] = "no step ran"
        for key in ("distributed.save_after_step",):
            self._records.pop(key, None)


# ---------------------------------------------------------------------- helpers
class _EffectWatch(logging.Handler):
    """Hands each torch trace record's metadata to :meth:`ConfigApplier.observe` (writes nothing)."""

    def __init__(self, applier: ConfigApplier) -> None:
        super().__init__(level=logging.DEBUG)
        self._applier = applier

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "metadata", None)
        if isinstance(meta, dict):
            try:
                self._applier.observe(meta)
            except Exception:  # noqa: BLE001 - never into a compile
                pass


def _torch_version() -> str | None:
    torch = sys.modules.get("torch")
    return getattr(torch, "__version__", None) if torch is not None else None


def _mkey(m: MarkDynamic) -> str:
    return f"mark_dynamic.{m.arg}:{m.dim}"


def _get_config(module: Any, key: str) -> Any:
    obj = module
    for part in key.split("."):
        obj = getattr(obj, part)
    return obj


def _set_config(module: Any, key: str, value: Any) -> None:
    parts = key.split(".")
    obj = module
    for part in parts[:-1]:
        obj = getattr(obj, part)
    setattr(obj, parts[-1], value)


def _has_config(module: Any, key: str) -> bool:
    try:
        _get_config(module, key)
        return True
    except AttributeError:
        return False


def _bind(target: Any, args: tuple, kwargs: dict[str, Any]) -> dict[str, Any]:
    import inspect

    fn = getattr(target, "forward", target)
    try:
        return dict(inspect.signature(fn).bind_partial(*args, **kwargs).arguments)
    except (TypeError, ValueError):
        return {}


def _resolve(arg: str, args: tuple, kwargs: dict[str, Any], bound: dict[str, Any]) -> Any:
    head, _, rest = arg.partition(".")
    if head.isdigit():
        value = args[int(head)] if int(head) < len(args) else None
    else:
        value = kwargs.get(head, bound.get(head))
    for part in rest.split(".") if rest else []:
        if value is None:
            break
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    return value


def _is_constraint_violation(exc: BaseException) -> bool:
    names = {type(e).__name__ for e in _chain(exc)}
    return bool(names & {"ConstraintViolationError"}) or (
        "UserError" in names and "constraint" in str(exc).lower())


def _chain(exc: BaseException | None) -> list[BaseException]:
    out = []
    while exc is not None and len(out) < 10:
        out.append(exc)
        exc = exc.__cause__ or exc.__context__
    return out


def _unmark(t: Any) -> None:
    for attr in ("_dynamo_dynamic_indices", "_dynamo_dynamic_range"):
        if hasattr(t, attr):
            try:
                delattr(t, attr)
            except Exception:  # noqa: BLE001
                pass
