"""Compile-config TOML: the fixes ``workbench recommend`` writes and the collectors apply on the next run.

Format (every section is optional; see ``docs/compile-config.md``)::

    [dynamo]                      # torch._dynamo.config
    recompile_limit = 16
    [inductor]                    # torch._inductor.config (dotted keys: triton.cudagraphs = true)
    fx_graph_cache = true
    [compiler]                    # torch.compiler.config
    dynamic_sources = "L['x']"
    [compile]                     # torch.compile(...) keyword arguments
    dynamic = true
    mode = "max-autotune-no-cudagraphs"
    options = { "triton.cudagraphs" = false }
    [stance]                      # torch.compiler.set_stance(...)
    stance = "eager_on_recompile"
    after_step = 2                # applied at the end of that step (``on_step_end``); absent: at apply time
    [env]                         # environment variables, set before the first compile
    TORCH_COMPILE_DYNAMIC_SOURCES = "L['x']"
    [mark_dynamic]                # torch._dynamo.mark_dynamic on the compiled function's inputs
    x = { dim = 0, min = 2, max = 64 }     # by argument name, or "0" = positional index
    [distributed]
    guard_collectives = true      # torch.compiler.set_enable_guard_collectives(True)
    barrier_after_step = 1        # warm-up + barrier: dist.barrier() at the end of that step
    [cache]                       # compile-cache warm start
    load = "compile_cache.bin"    # torch.compiler.load_cache_artifacts before the first compile
    save = "compile_cache.bin"    # torch.compiler.save_cache_artifacts at the end of save_after_step
    save_after_step = 3

Parsing and the structural checks (sections, the keys of the workbench's own sections, value types) need no
torch. The keys of ``[dynamo]``, ``[inductor]``, ``[compiler]``, ``[compile]`` and ``[compile.options]`` are
checked against the installed torch only when torch is importable (``validate="auto"``, the default); an
unknown key raises :class:`~workbench.errors.InputError` naming the file, the key and the closest valid key.
torch is imported lazily, never at module import.

Every config passes the safety policy of :mod:`workbench.config_policy` (no code, commands, libraries or
paths from a config unless the user allows unsafe settings), and :func:`dump_compile_config` writes TOML with a
TOML library and checks that the text reads back as exactly the settings it was given.

Example:
    >>> cfg = CompileConfig.from_dict({"compile": {"dynamic": True}, "env": {"A": 1}}, validate=False)
    >>> cfg.compile_kwargs, cfg.env
    ({'dynamic': True}, {'A': '1'})
"""

from __future__ import annotations

import builtins
import difflib
import hashlib
import importlib
import importlib.util
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from workbench import config_policy as policy
from workbench.errors import InputError

SECTIONS: tuple[str, ...] = (
    "dynamo", "inductor", "compiler", "compile", "stance", "env", "mark_dynamic", "distributed", "cache",
)

#: ``torch.compile`` keyword arguments (torch 2.13), used when torch is not importable.
COMPILE_KWARGS_FALLBACK: tuple[str, ...] = (
    "fullgraph", "dynamic", "backend", "mode", "options", "name", "disable", "recompile_limit",
    "isolate_recompiles",
)
STANCES: tuple[str, ...] = (
    "default", "force_eager", "eager_on_recompile", "fail_on_recompile", "eager_then_compile",
    "aot_eager_then_compile",
)
MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
STANCE_KEYS: dict[str, type | tuple[type, ...]] = {
    "stance": str, "after_step": int, "skip_guard_eval_unsafe": bool, "force_backend": str,
}
DISTRIBUTED_KEYS: dict[str, type | tuple[type, ...]] = {
    "guard_collectives": bool, "compiler_collectives": bool, "barrier_after_step": int,
}
CACHE_KEYS: dict[str, type | tuple[type, ...]] = {"load": str, "save": str, "save_after_step": int}
MARK_DYNAMIC_KEYS: tuple[str, ...] = ("dim", "dims", "min", "max")
#: Top-level (section-less) keys a config may hold.
TOP_LEVEL_KEYS: tuple[str, ...] = ("allow_unsafe",)
#: Largest compile-config file read (bytes).
MAX_CONFIG_BYTES = 1 << 20

#: section → torch config module (validated and applied per thread)
CONFIG_MODULES: dict[str, str] = {
    "dynamo": "torch._dynamo.config",
    "inductor": "torch._inductor.config",
    "compiler": "torch.compiler.config",
}

ValidateMode = bool | Literal["auto"]


@dataclass(frozen=True)
class MarkDynamic:
    """One ``torch._dynamo.mark_dynamic(t, dim, min=, max=)`` on input ``arg`` (name, index or ``a.b`` path)."""

    arg: str
    dim: int
    min: int | None = None
    max: int | None = None

    def to_toml_value(self) -> dict[str, int]:
        out: dict[str, int] = {"dim": self.dim}
        if self.min is not None:
            out["min"] = self.min
        if self.max is not None:
            out["max"] = self.max
        return out


@dataclass
class CompileConfig:
    """A validated compile config. Build with :func:`load_compile_config` or :meth:`from_dict`."""

    dynamo: dict[str, Any] = field(default_factory=dict)
    inductor: dict[str, Any] = field(default_factory=dict)
    compiler: dict[str, Any] = field(default_factory=dict)
    compile: dict[str, Any] = field(default_factory=dict)
    stance: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    mark_dynamic: list[MarkDynamic] = field(default_factory=list)
    distributed: dict[str, Any] = field(default_factory=dict)
    cache: dict[str, Any] = field(default_factory=dict)
    source: str = "<dict>"
    validated_against: str | None = None  # torch version the keys were checked against, None if not checked
    base_dir: str | None = None  # folder that relative [cache] paths are inside (the config file's folder)
    unsafe_allowed: bool = False  # loaded with allow_unsafe (by the caller or the file's own allow_unsafe = true)
    _stance_applied: bool = field(default=False, repr=False)

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>", validate: ValidateMode = "auto",
                  allow_unsafe: bool = False, base_dir: str | Path | None = None) -> CompileConfig:
        """Check ``data`` (the TOML document as a dict) and build the config; see the module doc."""
        return _build(data, source, validate, allow_unsafe=allow_unsafe, base_dir=base_dir)

    # ------------------------------------------------------------------ views
    @property
    def compile_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``torch.compile`` (a fresh copy; ``options`` copied too)."""
        kwargs = dict(self.compile)
        if "options" in kwargs:
            kwargs["options"] = dict(kwargs["options"])
        return kwargs

    def is_empty(self) -> bool:
        return not any(self.to_dict().values())

    def to_dict(self) -> dict[str, Any]:
        """The config as TOML-shaped data (sections → keys → plain values); ``from_dict`` reads it back."""
        md: dict[str, list[dict[str, int]]] = {}
        for m in self.mark_dynamic:
            md.setdefault(m.arg, []).append(m.to_toml_value())
        out: dict[str, Any] = {
            "dynamo": dict(self.dynamo),
            "inductor": dict(self.inductor),
            "compiler": dict(self.compiler),
            "compile": self.compile_kwargs,
            "stance": dict(self.stance),
            "env": dict(self.env),
            "mark_dynamic": {k: (v[0] if len(v) == 1 else v) for k, v in md.items()},
            "distributed": dict(self.distributed),
            "cache": dict(self.cache),
        }
        return {k: v for k, v in out.items() if v}

    def config_hash(self) -> str:
        """sha256 of the canonical JSON of :meth:`to_dict` (stable across key order)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()

    def dynamic_sources(self) -> str:
        """``mark_dynamic`` args as a ``torch.compiler.config.dynamic_sources`` string (``L['x']``, no min/max)."""
        names = []
        for m in self.mark_dynamic:
            if not m.arg.isdigit() and "." not in m.arg:
                src = f"L['{m.arg}']"
                if src not in names:
                    names.append(src)
        return ",".join(names)

    # ------------------------------------------------------------------ applying
    def apply_env(self, environ: dict[str, str] | None = None) -> dict[str, str | None]:
        """Set ``[env]`` variables (call before the first compile, ideally before importing torch).

        Returns the previous values (None where unset) so a caller can restore them.
        """
        target = os.environ if environ is None else environ
        previous: dict[str, str | None] = {}
        for key, value in self.env.items():
            previous[key] = target.get(key)
            target[key] = value
        return previous

    def apply_in_thread(self) -> dict[str, Any]:
        """Set ``[dynamo]``, ``[inductor]``, ``[compiler]`` values in the calling thread (torch config is per
        thread: call it in the thread that compiles), enable guard collectives / compiler collectives, and set
        the stance now when it has no ``after_step``. Loads ``[cache] load`` artifacts if the file exists.

        Returns ``{"section.key": previous value}`` for the config values it changed.
        """
        import torch  # noqa: F401  (lazily, on purpose)

        previous: dict[str, Any] = {}
        for section, modname in CONFIG_MODULES.items():
            values = getattr(self, section)
            if not values:
                continue
            module = importlib.import_module(modname)
            for key, value in values.items():
                previous[f"{section}.{key}"] = _get_config(module, key)
                _set_config(module, key, _to_torch_value(module, key, value))
        if self.distributed.get("compiler_collectives"):
            import torch._dynamo.config as dcfg

            previous["dynamo.enable_compiler_collectives"] = dcfg.enable_compiler_collectives
            dcfg.enable_compiler_collectives = True
        if "guard_collectives" in self.distributed:
            import torch.compiler

            torch.compiler.set_enable_guard_collectives(bool(self.distributed["guard_collectives"]))
        if self.stance and self.stance.get("after_step") is None:
            self._set_stance()
        if self.cache.get("load"):
            self.load_cache_artifacts()
        return previous

    def on_step_end(self, step: int) -> list[str]:
        """Per-step actions (call at the end of each training step, outside any compiled region).

        - ``[stance] after_step``: set the stance once ``step >= after_step``;
        - ``[distributed] barrier_after_step``: ``dist.barrier()`` at the end of that step (warm-up + barrier);
        - ``[cache] save_after_step``: ``torch.compiler.save_cache_artifacts()`` written to ``[cache] save``.

        Returns what was done, as short strings (for the collector's log).
        """
        done: list[str] = []
        after = self.stance.get("after_step")
        if self.stance and after is not None and step >= after and not self._stance_applied:
            self._set_stance()
            done.append(f"stance={self.stance.get('stance', 'default')}")
        if self.distributed.get("barrier_after_step") == step:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                dist.barrier()
                done.append("barrier")
        if self.cache.get("save") and self.cache.get("save_after_step", 0) == step:
            if self.save_cache_artifacts():
                done.append(f"saved cache artifacts to {self.cache['save']}")
        return done

    def _set_stance(self) -> None:
        import torch.compiler

        kwargs: dict[str, Any] = {}
        if "skip_guard_eval_unsafe" in self.stance:
            kwargs["skip_guard_eval_unsafe"] = self.stance["skip_guard_eval_unsafe"]
        if "force_backend" in self.stance:
            kwargs["force_backend"] = self.stance["force_backend"]
        torch.compiler.set_stance(self.stance.get("stance", "default"), **kwargs)
        self._stance_applied = True

    def cache_path(self, key: str) -> Path | None:
        """The ``[cache] load``/``save`` file, relative paths taken inside :attr:`base_dir`."""
        value = self.cache.get(key)
        if not value:
            return None
        p = Path(value)
        return p if p.is_absolute() or self.base_dir is None else Path(self.base_dir) / p

    def load_cache_artifacts(self) -> bool:
        """``torch.compiler.load_cache_artifacts`` from ``[cache] load`` when that file exists."""
        path = self.cache_path("load")
        if path is None or not path.is_file():
            return False
        import torch.compiler

        torch.compiler.load_cache_artifacts(Path(path).read_bytes())
        return True

    def save_cache_artifacts(self) -> bool:
        """``torch.compiler.save_cache_artifacts`` written to ``[cache] save`` (atomically)."""
        path = self.cache_path("save")
        if path is None:
            return False
        import torch.compiler

        result = torch.compiler.save_cache_artifacts()
        if result is None:
            return False
        blob = result[0]
        tmp = Path(f"{path}.tmp{os.getpid()}")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(blob)
        os.replace(tmp, path)
        return True

    def mark_dynamic_inputs(self, args: tuple | list, kwargs: dict[str, Any] | None = None,
                            fn: Callable[..., Any] | None = None) -> int:
        """Call ``torch._dynamo.mark_dynamic`` on the inputs named in ``[mark_dynamic]``.

        ``args``/``kwargs`` are the call's arguments; ``fn`` (the function or module being called) lets names
        resolve to positional arguments through its signature. An arg ``"0"`` is the first positional
        argument; ``"batch.x"`` is ``batch["x"]`` or ``batch.x``. Inputs that are missing or not tensors are
        skipped. Returns how many dims were marked.
        """
        if not self.mark_dynamic:
            return 0
        import torch

        kwargs = kwargs or {}
        bound: dict[str, Any] = {}
        if fn is not None:
            import inspect

            target = getattr(fn, "forward", fn)
            try:
                sig = inspect.signature(target)
                bound = dict(sig.bind_partial(*args, **kwargs).arguments)
            except (TypeError, ValueError):
                bound = {}
        count = 0
        for m in self.mark_dynamic:
            head, _, rest = m.arg.partition(".")
            if head.isdigit():
                idx = int(head)
                value = args[idx] if idx < len(args) else None
            else:
                value = kwargs.get(head, bound.get(head))
            for part in rest.split(".") if rest else []:
                if value is None:
                    break
                value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
            if not isinstance(value, torch.Tensor) or m.dim >= value.dim():
                continue
            extra = {k: v for k, v in (("min", m.min), ("max", m.max)) if v is not None}
            torch._dynamo.mark_dynamic(value, m.dim, **extra)
            count += 1
        return count

    def mark_dynamic_hook(self, module: Any) -> Any:
        """Register a forward pre-hook on ``module`` (the outermost, e.g. the DDP wrapper) that marks its
        inputs dynamic before every call; returns the hook handle (``.remove()`` to undo)."""

        def hook(mod: Any, args: tuple, kwargs: dict[str, Any]) -> None:
            inner = getattr(mod, "module", mod)
            inner = getattr(inner, "_orig_mod", inner)
            self.mark_dynamic_inputs(args, kwargs, fn=inner)

        return module.register_forward_pre_hook(hook, with_kwargs=True)


# ---------------------------------------------------------------------- loading
def load_compile_config(path: str | Path, *, validate: ValidateMode = "auto",
                        allow_unsafe: bool = False) -> CompileConfig:
    """Read and check a compile-config TOML file.

    ``validate="auto"`` checks torch config keys against the installed torch when torch is importable;
    ``True`` requires torch; ``False`` only checks the structure. Settings the safety policy refuses
    (:mod:`workbench.config_policy`) raise unless ``allow_unsafe`` (or the file's top-level
    ``allow_unsafe = true``). Raises :class:`InputError` on any problem, naming the file and the key.
    """
    p = Path(path)
    try:
        if p.is_file() and p.stat().st_size > MAX_CONFIG_BYTES:
            raise InputError(f"{p}: a compile config is at most {MAX_CONFIG_BYTES} bytes")
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{p}: compile config not found") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{p}: not valid TOML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise InputError(f"{p}: not valid TOML (nested too deeply)") from None
    except OSError as exc:
        raise InputError(f"{p}: cannot read compile config ({exc.strerror})") from None
    return _build(data, str(p), validate, allow_unsafe=allow_unsafe, base_dir=p.resolve().parent)


def _closest(key: str, valid: list[str] | tuple[str, ...]) -> str:
    match = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else ""


def _unknown(source: str, section: str, key: str, valid: list[str] | tuple[str, ...], what: str) -> InputError:
    return InputError(f"{source}: unknown key {key!r} in [{section}] ({what}){_closest(key, valid)}")


def _check_type(source: str, section: str, key: str, value: Any, expected: type | tuple[type, ...]) -> None:
    exp = expected if isinstance(expected, tuple) else (expected,)
    ok = isinstance(value, exp) and not (isinstance(value, bool) and bool not in exp)
    if not ok:
        names = " or ".join(t.__name__ for t in exp)
        raise InputError(f"{source}: [{section}] {key} must be {names}, got {type(value).__name__} {value!r}")


def _torch_available(validate: ValidateMode, source: str) -> bool:
    if validate is False:
        return False
    if importlib.util.find_spec("torch") is None:
        if validate is True:
            raise InputError(f"{source}: cannot validate the compile config: torch is not installed")
        return False
    return True


def _flatten(prefix: str, value: Any, valid: set[str] | None, out: dict[str, Any]) -> None:
    """TOML dotted keys (``triton.cudagraphs = true``) arrive nested: flatten unless the key is itself a
    dict-valued config entry."""
    if isinstance(value, dict) and (valid is None or prefix not in valid):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}", v, valid, out)
    else:
        out[prefix] = value


def _config_keys(modname: str) -> tuple[Any, list[str]]:
    module = importlib.import_module(modname)
    cfg = getattr(module, "_config", None)
    keys = list(cfg.keys()) if isinstance(cfg, dict) else list(module.get_config_copy().keys())
    return module, keys


def _entry_type(module: Any, key: str) -> Any:
    cfg = getattr(module, "_config", None)
    entry = cfg.get(key) if isinstance(cfg, dict) else None
    return getattr(entry, "value_type", None)


def _check_config_value(source: str, section: str, key: str, value: Any, vtype: Any) -> None:
    if vtype is bool:
        _check_type(source, section, key, value, bool)
    elif vtype is int:
        _check_type(source, section, key, value, int)
    elif vtype is float:
        _check_type(source, section, key, value, (int, float))
    elif vtype is str:
        _check_type(source, section, key, value, str)


def _build(data: dict[str, Any], source: str, validate: ValidateMode, *, allow_unsafe: bool = False,
           base_dir: str | Path | None = None) -> CompileConfig:
    if not isinstance(data, dict):
        raise InputError(f"{source}: a compile config is a TOML table")
    data = dict(data)
    file_unsafe = data.pop("allow_unsafe", False)
    if not isinstance(file_unsafe, bool):
        raise InputError(f"{source}: allow_unsafe must be true or false, got {type(file_unsafe).__name__}")
    unsafe_ok = allow_unsafe or file_unsafe

    def refuse(problem: str | None) -> None:
        if problem and not unsafe_ok:
            raise InputError(f"{source}: {problem}; refused by the safety policy (docs/compile-config.md)")

    for section, body in data.items():
        if section not in SECTIONS:
            raise InputError(f"{source}: unknown section [{section}]{_closest(section, SECTIONS)}"
                             f" (sections: {', '.join(SECTIONS)})")
        if not isinstance(body, dict):
            raise InputError(f"{source}: [{section}] must be a table, got {type(body).__name__}")
    use_torch = _torch_available(validate, source)
    cfg = CompileConfig(source=source, base_dir=str(base_dir) if base_dir is not None else None,
                        unsafe_allowed=bool(unsafe_ok))

    # torch config modules
    for section, modname in CONFIG_MODULES.items():
        body = data.get(section) or {}
        if not body:
            continue
        module = keys = None
        if use_torch:
            module, keys = _config_keys(modname)
        flat: dict[str, Any] = {}
        for k, v in body.items():
            _flatten(k, v, set(keys) if keys is not None else None, flat)
        for key, value in flat.items():
            vtype = None
            if keys is not None:
                if key not in keys:
                    raise _unknown(source, section, key, keys, modname)
                vtype = _entry_type(module, key)
                _check_config_value(source, section, key, value, vtype)
            refuse(policy.torch_key_problem(section, key, value, vtype, typed=keys is not None))
        setattr(cfg, section, flat)

    # torch.compile kwargs
    comp = dict(data.get("compile") or {})
    if comp:
        valid = list(COMPILE_KWARGS_FALLBACK)
        ind_module = ind_keys = None
        if use_torch:
            import inspect

            import torch

            valid = [p for p in inspect.signature(torch.compile).parameters if p != "model"]
            ind_module, ind_keys = _config_keys("torch._inductor.config")
        for key, value in comp.items():
            if key not in valid:
                raise _unknown(source, "compile", key, valid, "torch.compile keyword arguments")
        for key, typ in (("fullgraph", bool), ("dynamic", bool), ("disable", bool), ("backend", str),
                         ("mode", str), ("name", str), ("recompile_limit", int), ("isolate_recompiles", bool)):
            if key in comp:
                _check_type(source, "compile", key, comp[key], typ)
        if "mode" in comp and comp["mode"] not in MODES:
            raise InputError(f"{source}: [compile] mode {comp['mode']!r} is not one of {', '.join(MODES)}"
                             f"{_closest(comp['mode'], MODES)}")
        if "options" in comp:
            _check_type(source, "compile", "options", comp["options"], dict)
            opts: dict[str, Any] = {}
            for k, v in comp["options"].items():
                _flatten(k, v, set(ind_keys) if ind_keys is not None else None, opts)
            for key, value in opts.items():
                vtype = None
                if ind_keys is not None:
                    if key not in ind_keys:
                        raise _unknown(source, "compile.options", key, ind_keys, "torch._inductor.config")
                    vtype = _entry_type(ind_module, key)
                    _check_config_value(source, "compile.options", key, value, vtype)
                refuse(policy.torch_key_problem("compile.options", key, value, vtype, typed=ind_keys is not None))
            comp["options"] = opts
        if "backend" in comp:
            refuse(policy.backend_problem("compile", "backend", comp["backend"], _backends(use_torch)))
        cfg.compile = comp

    # stance
    stance = dict(data.get("stance") or {})
    for key, value in stance.items():
        if key not in STANCE_KEYS:
            raise _unknown(source, "stance", key, tuple(STANCE_KEYS), "torch.compiler.set_stance")
        _check_type(source, "stance", key, value, STANCE_KEYS[key])
    if "stance" in stance and stance["stance"] not in STANCES:
        raise InputError(f"{source}: [stance] stance {stance['stance']!r} is not one of {', '.join(STANCES)}"
                         f"{_closest(stance['stance'], STANCES)}")
    if stance and "stance" not in stance:
        raise InputError(f"{source}: [stance] needs stance = \"...\" (one of {', '.join(STANCES)})")
    if "force_backend" in stance:
        refuse(policy.backend_problem("stance", "force_backend", stance["force_backend"], _backends(use_torch)))
    cfg.stance = stance

    # env
    env: dict[str, str] = {}
    for key, value in (data.get("env") or {}).items():
        if isinstance(value, bool):
            env[key] = "1" if value else "0"
        elif isinstance(value, (str, int, float)):
            env[key] = str(value)
        else:
            raise InputError(f"{source}: [env] {key} must be a string or number, got {type(value).__name__}")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or "\x00" in env[key]:
            raise InputError(f"{source}: [env] {key!r} is not a valid environment variable name or value")
        refuse(policy.env_problem(key, env[key]))
    cfg.env = env

    # mark_dynamic
    cfg.mark_dynamic = _parse_mark_dynamic(source, data.get("mark_dynamic") or {})

    for section, spec in (("distributed", DISTRIBUTED_KEYS), ("cache", CACHE_KEYS)):
        body = dict(data.get(section) or {})
        for key, value in body.items():
            if key not in spec:
                raise _unknown(source, section, key, tuple(spec), f"workbench [{section}] keys")
            _check_type(source, section, key, value, spec[key])
            if section == "cache" and key in ("load", "save"):
                refuse(policy.cache_path_problem(key, value))
        setattr(cfg, section, body)

    if use_torch:
        import torch

        cfg.validated_against = str(torch.__version__)
    return cfg


def _backends(use_torch: bool) -> list[str] | None:
    """The backend names the installed torch registers (None without torch)."""
    if not use_torch:
        return None
    try:
        import torch._dynamo

        return list(torch._dynamo.list_backends(exclude_tags=())) + ["inductor"]
    except Exception:  # noqa: BLE001 - an odd torch build: fall back to the fixed list
        return None


def _parse_mark_dynamic(source: str, body: dict[str, Any]) -> list[MarkDynamic]:
    out: list[MarkDynamic] = []

    def bad(arg: str, why: str) -> InputError:
        return InputError(f"{source}: [mark_dynamic] {arg}: {why} (write dim = N, dims = [..], min, max)")

    def one(arg: str, spec: Any) -> None:
        if isinstance(spec, bool):
            raise bad(arg, "expected a dim, a list of dims or a table")
        if isinstance(spec, int):
            out.append(MarkDynamic(arg, spec))
            return
        if isinstance(spec, list):
            for item in spec:
                one(arg, item)
            return
        if not isinstance(spec, dict):
            raise bad(arg, f"expected a dim, a list or a table, got {type(spec).__name__}")
        for key in spec:
            if key not in MARK_DYNAMIC_KEYS:
                raise _unknown(source, f"mark_dynamic.{arg}", key, MARK_DYNAMIC_KEYS, "mark_dynamic keys")
        dims = spec.get("dims", [spec["dim"]] if "dim" in spec else None)
        if dims is None:
            raise bad(arg, "needs dim or dims")
        lo, hi = spec.get("min"), spec.get("max")
        for name, val in (("min", lo), ("max", hi)):
            if val is not None and (isinstance(val, bool) or not isinstance(val, int)):
                raise bad(arg, f"{name} must be an integer")
        if lo is not None and hi is not None and lo > hi:
            raise bad(arg, f"min {lo} > max {hi}")
        for d in dims if isinstance(dims, list) else [dims]:
            if isinstance(d, bool) or not isinstance(d, int) or d < 0:
                raise bad(arg, f"dim {d!r} must be a non-negative integer")
            out.append(MarkDynamic(arg, d, lo, hi))

    for arg, spec in body.items():
        if not re.fullmatch(r"[A-Za-z_0-9][\w]*(\.[\w]+)*", arg):
            raise bad(arg, "the key is an argument name, a positional index, or a dotted path")
        one(arg, spec)
    return out


# ---------------------------------------------------------------------- applying helpers
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


def _resolve_callable(name: str) -> Any:
    if hasattr(builtins, name):
        return getattr(builtins, name)
    modname, _, attr = name.rpartition(".")
    return getattr(importlib.import_module(modname), attr)


def _to_torch_value(module: Any, key: str, value: Any) -> Any:
    """TOML has lists and strings; some config entries want sets or callables."""
    vtype = _entry_type(module, key)
    origin = getattr(vtype, "__origin__", vtype)
    if key == "reorderable_logging_functions" and isinstance(value, list):
        return {_resolve_callable(v) if isinstance(v, str) else v for v in value}
    if origin in (set, frozenset) and isinstance(value, list):
        return origin(value)
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    return value


# ---------------------------------------------------------------------- writing
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]")


def comment_lines(text: str | None) -> list[str]:
    """``text`` as TOML comment lines: every line break, control character and Unicode line separator becomes a
    line of its own or a space, so no text can end a comment and start a setting."""
    if not text:
        return []
    lines = re.split(r"[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+", str(text))
    return ["# " + _CONTROL_CHARS.sub(" ", line).rstrip() for line in lines if line.strip()]


def _plain(v: Any) -> Any:
    """A value as TOML can hold it (sets sorted into lists, callables by name); None stays None (left out)."""
    if isinstance(v, (set, frozenset)):
        return sorted((_plain(x) for x in v), key=str)
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items() if x is not None}
    if callable(v) and not isinstance(v, type) and hasattr(v, "__name__"):
        mod = getattr(v, "__module__", "builtins")
        return v.__name__ if mod == "builtins" else f"{mod}.{v.__name__}"
    return v


def _toml_key(key: str) -> str:
    """``key`` as TOML writes it (bare or quoted), by ``tomli_w``."""
    import tomli_w

    return tomli_w.dumps({key: 0})[: -len(" = 0\n")]


def _scalar(value: Any) -> str | None:
    """A bool/int/float/str as TOML text by ``tomli_w``, or None for anything else."""
    import tomli_w

    if isinstance(value, (bool, int, float, str)):
        return tomli_w.dumps({"v": value})[len("v = "):].rstrip("\n")
    return None


def _inline(table: dict[str, Any]) -> str | None:
    """A one-line inline table for a dict of scalars and lists of scalars, else None."""
    parts = []
    for k, v in table.items():
        text = _scalar(v)
        if text is None and isinstance(v, list):
            items = [_scalar(x) for x in v]
            text = None if None in items else "[" + ", ".join(items) + "]"  # type: ignore[arg-type]
        if text is None:
            return None
        parts.append(f"{_toml_key(k)} = {text}")
    return "{ " + ", ".join(parts) + " }" if parts else None


def dump_compile_config(config: dict[str, Any], comments: dict[str, str] | None = None,
                        header: str | None = None, footer: str | None = None) -> str:
    """TOML text of ``config`` (sections → keys → values, as :meth:`CompileConfig.to_dict` returns) with comments.

    ``comments`` maps ``"section.key"`` (above that setting) or ``"section"`` (above the section) to text;
    ``header`` and ``footer`` become comment lines at the top and the end. Values are written by ``tomli_w``;
    comment text is cut at every line break (:func:`comment_lines`). Only keys the recommender may write
    (:data:`workbench.config_policy.RECOMMENDER_KEYS`) that pass the safety policy are accepted, and the text
    is read back and must equal ``config`` exactly; otherwise ``ValueError``.
    """
    import tomli_w

    comments = comments or {}
    data = {s: _plain(b) for s, b in config.items() if b}
    data = {s: b for s, b in data.items() if b}
    policy.check_writable(data)
    try:
        CompileConfig.from_dict(data, source="<written config>", validate=False)
    except InputError as exc:
        raise ValueError(str(exc)) from None
    lines: list[str] = comment_lines(header)
    order = [s for s in SECTIONS if s in data] + [s for s in data if s not in SECTIONS]
    for section in order:
        body = data[section]
        if lines:
            lines.append("")
        lines.extend(comment_lines(comments.get(section)))
        lines.append(tomli_w.dumps({section: {}}).rstrip("\n"))
        tables = {k: v for k, v in body.items() if isinstance(v, dict) and _inline(v) is None}
        for key, value in body.items():
            if key not in tables:
                lines.extend(comment_lines(comments.get(f"{section}.{key}")))
                inline = _inline(value) if isinstance(value, dict) else None
                lines.append(f"{_toml_key(key)} = {inline}" if inline else tomli_w.dumps({key: value}).rstrip("\n"))
        for key, value in tables.items():
            lines.append("")
            lines.extend(comment_lines(comments.get(f"{section}.{key}")))
            lines.append(tomli_w.dumps({section: {key: value}}).rstrip("\n"))
    if footer:
        lines.append("")
        lines.extend(comment_lines(footer))
    text = "\n".join(lines) + "\n"
    if tomllib.loads(text) != data:
        raise ValueError("the written compile config does not read back as the settings given")
    return text
