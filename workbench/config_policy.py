"""What a compile config may set: the safety policy applied when a config is loaded and when one is written.

A compile config is applied inside the user's training job, so a setting that names code, a command, a library or
a path is a way to run code there. The policy (docs/compile-config.md, "Safety policy"):

- ``[env]``: only names starting ``TORCH``, ``PYTORCH``, ``NCCL``, ``CUDA``, ``CUBLAS``, ``CUDNN``, ``TRITON``,
  ``GLOO`` or ``OMP``, made of ``A-Z 0-9 _``, and none whose parts name a path, file, library, plugin or command
  (``TORCHINDUCTOR_CACHE_DIR``, ``NCCL_NET_PLUGIN``, ``TRITON_LIBCUDA_PATH``). Never ``LD_*``, ``PATH`` or
  ``PYTHON*``. Values hold no control characters.
- ``[dynamo]``, ``[inductor]``, ``[compiler]``, ``[compile] options``: a key whose torch type is not a plain
  bool/int/float/str (or a list or ``Literal`` of them) — callables, passes, dicts of code — or whose name names a
  path, file, command, compiler, hook or pass is unsafe. ``reorderable_logging_functions`` may list builtins only.
- ``[compile] backend`` and ``[stance] force_backend``: a registered backend name, never a dotted path.
- ``[cache] load`` / ``save``: a relative ``.bin`` path inside the config file's folder.

Unsafe settings load only with ``allow_unsafe=True`` (the caller's explicit choice) or a top-level
``allow_unsafe = true`` in the file, which :func:`check_writable` refuses, so no recommender can write it.
What the recommender may write at all is :data:`RECOMMENDER_KEYS`.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any, Literal, get_args, get_origin

#: [env] names must start with one of these.
ENV_PREFIXES: tuple[str, ...] = ("TORCH", "PYTORCH", "NCCL", "CUDA", "CUBLAS", "CUDNN", "TRITON", "GLOO", "OMP")
#: Name parts (split on ``_`` and ``.``) that make a setting name a path, a library, a command or code.
UNSAFE_PARTS: frozenset[str] = frozenset({
    "path", "paths", "dir", "dirs", "file", "files", "filename", "home", "root", "lib", "libs", "library",
    "preload", "plugin", "plugins", "cmd", "command", "cxx", "cc", "compiler", "linker", "exe", "shell", "script",
    "hook", "hooks", "callback", "fn", "func", "function", "functions", "callable", "pass", "passes", "custom",
    "module", "modules", "upload", "url", "output", "testing", "socket",
})
#: Backends a config may name without ``allow_unsafe`` when torch is not importable to list them.
KNOWN_BACKENDS: tuple[str, ...] = ("inductor", "aot_eager", "eager", "cudagraphs", "aot_eager_decomp_partition",
                                   "aot_inductor", "tvm", "openxla", "onnxrt")
#: Keys the recommender may write, per section (``*`` = any key of that section that passes the policy).
RECOMMENDER_KEYS: dict[str, frozenset[str]] = {
    "dynamo": frozenset({
        "recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit",
        "automatic_dynamic_shapes", "automatic_dynamic_shapes_mark_as", "assume_static_by_default",
        "specialize_int", "specialize_float", "capture_scalar_outputs", "capture_dynamic_output_shape_ops",
        "reorderable_logging_functions", "fail_on_recompile_limit_hit", "enable_compiler_collectives",
        "optimize_ddp", "force_parameter_static_shapes", "force_nn_module_property_static_shapes",
        "inline_inbuilt_nn_modules", "mark_static_nn_module", "allow_unspec_int_on_nn_module",
    }),
    "inductor": frozenset({
        "fx_graph_cache", "autotune_local_cache", "triton.cudagraphs", "triton.cudagraph_trees",
        "triton.cudagraph_skip_dynamic_graphs", "reorder_for_compute_comm_overlap", "deterministic",
        "max_autotune", "max_autotune_pointwise", "max_autotune_gemm", "coordinate_descent_tuning", "freezing",
        "shape_padding", "comprehensive_padding", "size_asserts", "benchmark_kernel",
    }),
    "compiler": frozenset({"dynamic_sources", "unbacked_sources", "automatic_dynamic_local_pgo"}),
    "compile": frozenset({"dynamic", "mode", "fullgraph", "backend", "options"}),
    "stance": frozenset({"*"}),
    "env": frozenset({"*"}),
    "mark_dynamic": frozenset({"*"}),
    "distributed": frozenset({"*"}),
    "cache": frozenset({"*"}),
}

_ENV_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")
_PLAIN = (bool, int, float, str, type(None))


def name_parts(key: str) -> set[str]:
    """The lower-case parts of a setting name, split on ``.`` and ``_``."""
    return {p for p in re.split(r"[._]", key.lower()) if p}


def env_problem(name: str, value: str) -> str | None:
    """Why ``[env] name = value`` is unsafe, or None."""
    if not _ENV_NAME.match(name):
        return f"[env] {name!r} is not an environment variable name (A-Z, 0-9, _)"
    if not name.startswith(ENV_PREFIXES):
        return (f"[env] {name} is not allowed: only {'/'.join(p + '*' for p in ENV_PREFIXES)} variables "
                f"(never LD_*, PATH, PYTHON*)")
    bad = name_parts(name) & UNSAFE_PARTS
    if bad:
        return f"[env] {name} names a {sorted(bad)[0]} (paths, libraries, plugins and commands need allow_unsafe)"
    if _CONTROL.search(value):
        return f"[env] {name}: the value holds a control character"
    return None


def _plain_type(vtype: Any) -> bool:
    """True for bool/int/float/str/None, their unions, Literals and lists/tuples of them."""
    if vtype is None or vtype in _PLAIN:
        return True
    origin = get_origin(vtype)
    if origin is Literal:
        return all(isinstance(a, _PLAIN) for a in get_args(vtype))
    if origin in (list, tuple) or str(origin) in ("typing.Union", "<class 'types.UnionType'>"):
        return all(a is Ellipsis or _plain_type(a) for a in get_args(vtype))
    import types

    if isinstance(vtype, types.UnionType):
        return all(_plain_type(a) for a in get_args(vtype))
    return False


def torch_key_problem(section: str, key: str, value: Any, vtype: Any, *, typed: bool) -> str | None:
    """Why ``[section] key = value`` (a torch config entry of type ``vtype``) is unsafe, or None.

    ``typed`` says whether ``vtype`` came from the installed torch (without torch only the name is checked).
    """
    if key == "reorderable_logging_functions":
        import builtins

        names = value if isinstance(value, list) else [value]
        if all(isinstance(n, str) and "." not in n and callable(getattr(builtins, n, None)) for n in names):
            return None
        return f"[{section}] {key}: only builtins (like \"print\") without allow_unsafe; a module path imports code"
    bad = name_parts(key) & UNSAFE_PARTS
    if bad:
        return f"[{section}] {key} names a {sorted(bad)[0]} (code, paths and commands need allow_unsafe)"
    if typed and not _plain_type(vtype):
        return f"[{section}] {key} is not a plain value in torch ({vtype}); it needs allow_unsafe"
    if isinstance(value, str) and _CONTROL.search(value):
        return f"[{section}] {key}: the value holds a control character"
    return None


def backend_problem(section: str, key: str, value: str, registered: list[str] | None) -> str | None:
    """Why a backend name is unsafe or unknown, or None."""
    known = registered if registered is not None else list(KNOWN_BACKENDS)
    if value in known:
        return None
    if "." in value or "/" in value or ":" in value:
        return f"[{section}] {key} {value!r} is a path to code; it needs allow_unsafe"
    return f"[{section}] {key} {value!r} is not a registered backend ({', '.join(sorted(known))})"


def cache_path_problem(key: str, value: str) -> str | None:
    """Why a ``[cache]`` path is unsafe, or None (relative, inside the config's folder, ending ``.bin``)."""
    for pure in (PurePosixPath(value), PureWindowsPath(value)):
        if pure.is_absolute() or pure.drive or ".." in pure.parts:
            return f"[cache] {key} {value!r} must be a relative path inside the config's folder"
    if not value.endswith(".bin") or _CONTROL.search(value):
        return f"[cache] {key} {value!r} must be a file name ending .bin"
    return None


def check_writable(config: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless every key of ``config`` is one the recommender may write."""
    for section, body in config.items():
        allowed = RECOMMENDER_KEYS.get(section)
        if allowed is None:
            raise ValueError(f"a recommender may not write [{section}]" if isinstance(body, dict)
                             else f"a recommender may not write the top-level key {section!r}")
        if "*" in allowed or not isinstance(body, dict):
            continue
        for key in body:
            if key not in allowed:
                raise ValueError(f"a recommender may not write [{section}] {key} (not in RECOMMENDER_KEYS)")
