"""Compile-config TOML as data: the fixes ``workbench recommend`` writes and the collectors apply on the next run.

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
    after_step = 2                # set at the end of that step; absent: when the config is applied
    [env]                         # environment variables, set when the collector is created
    TORCH_LOGS = "recompiles"
    [mark_dynamic]                # torch._dynamo.mark_dynamic on the compiled function's inputs
    x = { dim = 0, min = 2, max = 64 }     # by argument name, or "0" = positional index
    [distributed]
    guard_collectives = true      # torch.compiler.set_enable_guard_collectives(True)
    barrier_after_step = 1        # warm-up + barrier: dist.barrier() at the end of that step
    [cache]                       # compile-cache warm start (a bundle in the config's own folder)
    load = "compile_cache.bin"
    save = "compile_cache.bin"
    save_after_step = 3

This module loads, validates, dumps and hashes a config; ``collectors/apply.py`` is the only code that applies
one. Every setting passes the allowlist of :mod:`workbench.config_policy` unless the caller's own code passes
``allow_unsafe=True`` (a top-level ``allow_unsafe`` in the file is refused); ``[cache]`` files must lie inside
the config file's real folder, and a bundle that is already there is checked (:mod:`workbench.compile_cache`).
The keys of ``[dynamo]``, ``[inductor]``, ``[compiler]``, ``[compile]`` and ``[compile] options`` are also
checked against the installed torch when it is importable (``validate="auto"``): an unknown key raises
:class:`~workbench.errors.InputError` naming the file, the key and the closest valid key. torch is imported
lazily, never at module import.

Example:
    >>> cfg = CompileConfig.from_dict({"compile": {"dynamic": True}, "env": {"TORCHDYNAMO_VERBOSE": 1}},
    ...                               validate=False)
    >>> cfg.compile_kwargs, cfg.env
    ({'dynamic': True}, {'TORCHDYNAMO_VERBOSE': '1'})
"""

from __future__ import annotations

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
from typing import Any, Literal

from workbench import config_policy as policy
from workbench.errors import InputError
from workbench.regular_file import read_regular

SECTIONS: tuple[str, ...] = (
    "dynamo", "inductor", "compiler", "compile", "stance", "env", "mark_dynamic", "distributed", "cache",
)

#: ``torch.compile`` keyword arguments (torch 2.13), used when torch is not importable.
COMPILE_KWARGS_FALLBACK: tuple[str, ...] = (
    "fullgraph", "dynamic", "backend", "mode", "options", "name", "disable", "recompile_limit",
    "isolate_recompiles",
)
STANCES = policy.STANCES
MODES = policy.MODES
STANCE_KEYS: dict[str, type | tuple[type, ...]] = {
    "stance": str, "after_step": int, "skip_guard_eval_unsafe": bool, "force_backend": str,
}
DISTRIBUTED_KEYS: dict[str, type | tuple[type, ...]] = {
    "guard_collectives": bool, "compiler_collectives": bool, "barrier_after_step": int,
}
CACHE_KEYS: dict[str, type | tuple[type, ...]] = {"load": str, "save": str, "save_after_step": int}
MARK_DYNAMIC_KEYS: tuple[str, ...] = ("dim", "dims", "min", "max")
#: Largest compile-config file read (bytes).
MAX_CONFIG_BYTES = 1 << 20
#: What a refusal says the way out is.
OPT_IN = "only the caller's code can allow it (allow_unsafe=True; docs/compile-config.md)"

#: section → torch config module (validated against it; applied per thread by collectors/apply.py)
CONFIG_MODULES: dict[str, str] = {
    "dynamo": "torch._dynamo.config",
    "inductor": "torch._inductor.config",
    "compiler": "torch.compiler.config",
}

ValidateMode = bool | Literal["auto", "allowlist"]


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
    """A validated compile config (data only). Build with :func:`load_compile_config` or :meth:`from_dict`."""

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
    base_dir: str | None = None  # the config file's real folder: [cache] files lie inside it
    unsafe_allowed: bool = False  # the caller's code passed allow_unsafe=True

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "<dict>", validate: ValidateMode = "auto",
                  allow_unsafe: bool = False, base_dir: str | Path | None = None) -> CompileConfig:
        """Check ``data`` (the TOML document as a dict) and build the config; see the module doc."""
        return _build(data, source, validate, allow_unsafe=allow_unsafe, base_dir=base_dir)

    @classmethod
    def load(cls, path: str | Path, *, validate: ValidateMode = "auto", allow_unsafe: bool = False) -> CompileConfig:
        """:func:`load_compile_config`."""
        return load_compile_config(path, validate=validate, allow_unsafe=allow_unsafe)

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
        """:func:`config_hash` of :meth:`to_dict`."""
        return config_hash(self.to_dict())

    def dump(self, comments: dict[str, str] | None = None, header: str | None = None) -> str:
        """The config as TOML text (:func:`dump_compile_config` without the recommender's key list)."""
        return _dump(self.to_dict(), comments, header, None, allow_unsafe=self.unsafe_allowed)

    def dynamic_sources(self) -> str:
        """``mark_dynamic`` args as a ``torch.compiler.config.dynamic_sources`` string (``L['x']``, no min/max)."""
        names = []
        for m in self.mark_dynamic:
            if not m.arg.isdigit() and "." not in m.arg:
                src = f"L['{m.arg}']"
                if src not in names:
                    names.append(src)
        return ",".join(names)

    def cache_file(self, key: str) -> Path | None:
        """The real path of ``[cache] load``/``save`` (None when unset). InputError when it leaves the config's
        real folder (symlinks followed) or the config has no folder, unless the caller allowed unsafe settings."""
        value = self.cache.get(key)
        if not value:
            return None
        return _cache_path(self.source, key, value, self.base_dir, self.unsafe_allowed)


# ---------------------------------------------------------------------- loading
def config_hash(config: dict[str, Any] | None) -> str:
    """sha256 (hex) of a compile config as data (:meth:`CompileConfig.to_dict`, ``run.json``'s ``compile_config``):
    configs that set anything differently hash differently, key order aside; no config, an empty one and one of
    empty sections all hash to :data:`NO_CONFIG_HASH`."""
    data = {k: v for k, v in (config or {}).items() if v not in (None, {}, [], "")}
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str).encode()
    return hashlib.sha256(blob).hexdigest()


#: The hash of no compile config (:func:`config_hash` of ``None``).
NO_CONFIG_HASH = hashlib.sha256(b"{}").hexdigest()


def load_compile_config(path: str | Path, *, validate: ValidateMode = "auto",
                        allow_unsafe: bool = False) -> CompileConfig:
    """Read and check a compile-config TOML file (a regular file of at most 1 MiB).

    ``validate="auto"`` checks torch config keys against the installed torch when torch is importable;
    ``"allowlist"`` does so only for keys the allowlist does not know (an allowlisted key is checked by its rule,
    without importing torch: what ``workbench recommend -o`` writes); ``True`` requires torch; ``False`` checks the
    structure and the allowlist only. Settings outside the
    allowlist (:mod:`workbench.config_policy`) raise unless the caller passes ``allow_unsafe=True``. A ``[cache]
    load`` bundle already in the folder is checked now (:mod:`workbench.compile_cache`). Raises
    :class:`InputError` on any problem, naming the file and the key.
    """
    p = Path(path)
    raw = read_regular(p, MAX_CONFIG_BYTES, what="compile config").data
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{p}: not valid TOML ({' '.join(str(exc).split())})") from None
    except RecursionError:
        raise InputError(f"{p}: not valid TOML (nested too deeply)") from None
    cfg = _build(data, str(p), validate, allow_unsafe=allow_unsafe, base_dir=os.path.realpath(p.parent))
    bundle = cfg.cache_file("load")
    if bundle is not None and os.path.lexists(bundle):
        read_cache_bundle(cfg)
    return cfg


def read_cache_bundle(cfg: CompileConfig) -> bytes | None:
    """The torch bytes of the ``[cache] load`` bundle, checked (:func:`workbench.compile_cache.check`); None when
    the file does not exist. InputError naming the config, the key and the artifact refused."""
    from workbench import compile_cache

    path = cfg.cache_file("load")
    if path is None or not os.path.lexists(path):
        return None
    where = f"{cfg.source}: [cache] load {cfg.cache['load']}"
    try:
        blob = read_regular(path, compile_cache.MAX_BUNDLE_BYTES, what="compile-cache bundle").data
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return compile_cache.check(blob, where, allow_unsafe=cfg.unsafe_allowed)


def _cache_path(source: str, key: str, value: str, base_dir: str | None, unsafe_ok: bool) -> Path:
    if base_dir is None:
        if unsafe_ok and os.path.isabs(value):
            return Path(value)
        raise InputError(f"{source}: [cache] {key} {value!r}: a config made from a dict has no folder to hold it; "
                         f"load the config from a file")
    folder = os.path.realpath(base_dir)
    real = os.path.realpath(os.path.join(folder, value))
    if not unsafe_ok and os.path.commonpath([folder, real]) != folder:
        raise InputError(f"{source}: [cache] {key} {value!r} resolves to {real}, outside the config's folder "
                         f"{folder} (a symlink?); {OPT_IN}")
    return Path(real)


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


def _unlisted_torch_keys(data: dict[str, Any]) -> bool:
    """True when a torch-config section or ``[compile]`` of ``data`` holds a key the allowlist has no rule for."""
    for section in (*CONFIG_MODULES, "compile"):
        body = data.get(section)
        if not isinstance(body, dict):
            continue
        flat: dict[str, Any] = {}
        for k, v in body.items():
            _flatten(k, v, {"options"} if section == "compile" else None, flat)
        for key, value in flat.items():
            if policy.rule(section, key) is None:
                return True
            if section == "compile" and key == "options" and isinstance(value, dict):
                opts: dict[str, Any] = {}
                for k, v in value.items():
                    _flatten(k, v, None, opts)
                if any(policy.rule("compile.options", k) is None for k in opts):
                    return True
    return False


def _torch_available(validate: ValidateMode, source: str, data: dict[str, Any]) -> bool:
    if validate is False or (validate == "allowlist" and not _unlisted_torch_keys(data)):
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


def torch_entry_type(module: Any, key: str) -> Any:
    """The declared type of a torch config entry (``bool``, ``int | None``, ...), or None."""
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
    if "allow_unsafe" in data:
        raise InputError(f"{source}: allow_unsafe in the file is refused: a config cannot lift its own policy; "
                         f"only the caller's code can (load_compile_config(..., allow_unsafe=True) or "
                         f"Collector(..., allow_unsafe=True))")
    for section, body in data.items():
        if section not in SECTIONS:
            raise InputError(f"{source}: unknown section [{section}]{_closest(section, SECTIONS)}"
                             f" (sections: {', '.join(SECTIONS)})")
        if not isinstance(body, dict):
            raise InputError(f"{source}: [{section}] must be a table, got {type(body).__name__}")

    def allowed(section: str, key: str, value: Any) -> None:
        """Refuse ``[section] key = value`` unless the allowlist admits it or the caller opted in."""
        if allow_unsafe:
            problem = policy.unsafe_value_problem(section, key, value)
        else:
            problem = policy.key_problem(section, key, value)
        if problem:
            raise InputError(f"{source}: {problem}" + ("" if allow_unsafe else f"; {OPT_IN}"))

    use_torch = _torch_available(validate, source, data)
    cfg = CompileConfig(source=source, base_dir=str(base_dir) if base_dir is not None else None,
                        unsafe_allowed=bool(allow_unsafe))

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
            if keys is not None:
                if key not in keys:
                    raise _unknown(source, section, key, keys, modname)
                _check_config_value(source, section, key, value, torch_entry_type(module, key))
            allowed(section, key, value)
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
        for key in comp:
            if key not in valid:
                raise _unknown(source, "compile", key, valid, "torch.compile keyword arguments")
        for key, typ in (("fullgraph", bool), ("dynamic", bool), ("disable", bool), ("backend", str),
                         ("mode", str), ("name", str), ("recompile_limit", int), ("isolate_recompiles", bool),
                         ("options", dict)):
            if key in comp:
                _check_type(source, "compile", key, comp[key], typ)
        if "mode" in comp and comp["mode"] not in MODES:
            raise InputError(f"{source}: [compile] mode {comp['mode']!r} is not one of {', '.join(MODES)}"
                             f"{_closest(comp['mode'], MODES)}")
        for key, value in comp.items():
            allowed("compile", key, value)
        if "options" in comp:
            opts: dict[str, Any] = {}
            for k, v in comp["options"].items():
                _flatten(k, v, set(ind_keys) if ind_keys is not None else None, opts)
            for key, value in opts.items():
                if ind_keys is not None:
                    if key not in ind_keys:
                        raise _unknown(source, "compile.options", key, ind_keys, "torch._inductor.config")
                    _check_config_value(source, "compile.options", key, value, torch_entry_type(ind_module, key))
                allowed("compile.options", key, value)
            comp["options"] = opts
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
    for key, value in stance.items():
        allowed("stance", key, value)
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
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,200}", key, re.ASCII):
            raise InputError(f"{source}: [env] {key!r} is not a valid environment variable name")
        allowed("env", key, env[key])
    cfg.env = env

    # mark_dynamic
    cfg.mark_dynamic = _parse_mark_dynamic(source, data.get("mark_dynamic") or {})

    for section, spec in (("distributed", DISTRIBUTED_KEYS), ("cache", CACHE_KEYS)):
        body = dict(data.get(section) or {})
        for key, value in body.items():
            if key not in spec:
                raise _unknown(source, section, key, tuple(spec), f"workbench [{section}] keys")
            _check_type(source, section, key, value, spec[key])
            allowed(section, key, value)
        setattr(cfg, section, body)
    for key in ("load", "save"):
        if key in cfg.cache and cfg.base_dir is not None:
            cfg.cache_file(key)         # inside the config's real folder, symlinks followed

    if use_torch:
        import torch

        cfg.validated_against = str(torch.__version__)
    return cfg


def _parse_mark_dynamic(source: str, body: dict[str, Any]) -> list[MarkDynamic]:
    out: list[MarkDynamic] = []

    def bad(arg: str, why: str) -> InputError:
        return InputError(f"{source}: [mark_dynamic] {arg}: {why} (write dim = N, dims = [..], min, max)")

    def one(arg: str, spec: Any) -> None:
        if isinstance(spec, bool):
            raise bad(arg, "expected a dim, a list of dims or a table")
        if isinstance(spec, int):
            spec = {"dim": spec}
        if isinstance(spec, list):
            for item in spec:
                if isinstance(item, list):
                    raise bad(arg, "a list of dims holds dims or tables, not lists")
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
            if val is not None and (why := policy.MARK_DYNAMIC_BOUND.problem(val)):
                raise bad(arg, f"{name} {why}")
        if lo is not None and hi is not None and lo > hi:
            raise bad(arg, f"min {lo} > max {hi}")
        for d in dims if isinstance(dims, list) else [dims]:
            if why := policy.MARK_DYNAMIC_DIM.problem(d):
                raise bad(arg, f"dim {why}")
            out.append(MarkDynamic(arg, d, lo, hi))

    for arg, spec in body.items():
        if not re.fullmatch(policy.MARK_DYNAMIC_ARG, arg, re.ASCII):
            raise bad(arg, "the key is an argument name, a positional index, or a dotted path")
        one(arg, spec)
    return out


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


def writable_problem(config: dict[str, Any]) -> str | None:
    """Why a recommender may not write ``config`` (a key outside :data:`~workbench.config_policy.RECOMMENDER_KEYS`
    or the allowlist, or a value the allowlist refuses), or None."""
    try:
        policy.check_writable(config)
        CompileConfig.from_dict(config, source="<written config>", validate=False)
    except (ValueError, InputError) as exc:
        return str(exc)
    return None


def dump_compile_config(config: dict[str, Any], comments: dict[str, str] | None = None,
                        header: str | None = None, footer: str | None = None) -> str:
    """TOML text of ``config`` (sections → keys → values, as :meth:`CompileConfig.to_dict` returns) with comments,
    as a recommender writes it.

    ``comments`` maps ``"section.key"`` (above that setting) or ``"section"`` (above the section) to text;
    ``header`` and ``footer`` become comment lines at the top and the end. Values are written by ``tomli_w``;
    comment text is cut at every line break (:func:`comment_lines`). Only keys a recommender may write
    (:data:`workbench.config_policy.RECOMMENDER_KEYS`) with values the allowlist admits are accepted, and the
    text is read back and must equal ``config`` exactly; otherwise ``ValueError``.
    """
    data = {s: b for s, b in ((s, _plain(b)) for s, b in config.items() if b) if b}
    policy.check_writable(data)
    return _dump(data, comments, header, footer, allow_unsafe=False)


def _dump(config: dict[str, Any], comments: dict[str, str] | None, header: str | None, footer: str | None, *,
          allow_unsafe: bool) -> str:
    import tomli_w

    comments = comments or {}
    data = {s: _plain(b) for s, b in config.items() if b}
    data = {s: b for s, b in data.items() if b}
    try:
        CompileConfig.from_dict(data, source="<written config>", validate=False, allow_unsafe=allow_unsafe)
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
