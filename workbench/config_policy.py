"""What a compile config may set: the allowlist applied when a config is loaded and when one is written.

A compile config is applied inside the user's training job on every rank, so it may set only keys whose meaning
and type the workbench knows, to values checked by type and pattern: :data:`ALLOWED` is that table, in one place
(``docs/compile-config.md``, "Safety policy", shows it). No string value is a flag, a path or ``module:attr``; no
key takes another config as its value (``debug_inductor_config_override``); ``[env]`` takes a fixed list of names,
each with a value pattern. Anything else needs ``allow_unsafe=True`` in the caller's own code
(``load_compile_config(path, allow_unsafe=True)``, ``Collector(..., allow_unsafe=True)``); the file cannot ask for
it. What a recommender may write is :data:`RECOMMENDER_KEYS`, a part of :data:`ALLOWED` (:func:`check_writable`).

Example:
    >>> rule("dynamo", "recompile_limit").problem(-1)
    'must be an integer from 1 to 1048576, got -1'
    >>> rule("inductor", "cpp.march") is None   # not allowed: its value is pasted into the compiler's command line
    True
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Literal

RuleKind = Literal["bool", "int", "choice", "text", "names", "table"]


@dataclass(frozen=True)
class Rule:
    """The values one key accepts: a bool, an int in ``[lo, hi]``, one of ``choices``, a string matching
    ``pattern`` in full, a list of names from ``choices``, or (``table``) a table of ``[inductor]`` keys, each
    checked by its own rule. ``example`` is a value that passes."""

    kind: RuleKind
    lo: int | None = None
    hi: int | None = None
    choices: tuple[Any, ...] = ()
    pattern: str | None = None
    example: str = ""

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not accepted (a phrase), or None."""
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"must be true or false, got {_show(value)}"
        if self.kind == "int":
            ok = isinstance(value, int) and not isinstance(value, bool) \
                and self.lo <= value <= self.hi  # type: ignore[operator]
            return None if ok else f"must be an integer from {self.lo} to {self.hi}, got {_show(value)}"
        if self.kind == "choice":
            if any(type(value) is type(c) and value == c for c in self.choices):
                return None
            return f"must be one of {', '.join(_show(c) for c in self.choices)}; got {_show(value)}"
        if self.kind == "text":
            if isinstance(value, str) and len(value) <= MAX_TEXT and re.fullmatch(self.pattern or "", value, re.ASCII):
                return None
            return f"must look like {_show(self.example)} (the pattern in docs/compile-config.md), got {_show(value)}"
        if self.kind == "table":
            return None if isinstance(value, dict) else f"must be a table, got {_show(value)}"
        names = value if isinstance(value, list) else None
        if names is not None and all(isinstance(n, str) and n in self.choices for n in names):
            return None
        return f"must be a list of {', '.join(map(_show, self.choices))}, got {_show(value)}"

    def describe(self) -> str:
        """The accepted values in words, for the docs and for messages."""
        if self.kind == "bool":
            return "true / false"
        if self.kind == "int":
            return f"integer {self.lo} … {self.hi}"
        if self.kind == "choice":
            return "one of " + ", ".join(_show(c) for c in self.choices)
        if self.kind == "names":
            return "list of " + ", ".join(f'"{c}"' for c in self.choices)
        if self.kind == "table":
            return "table of the `[inductor]` keys, each by its rule"
        return f"pattern `{self.pattern}`"


def _show(value: Any) -> str:
    """``value`` as TOML writes it (``true``, ``"text"``), cut at 80 characters."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, str):
        text = json.dumps(value)
    else:
        text = repr(value)
    return text if len(text) <= 80 else text[:79] + "…"


#: Longest string value any rule accepts.
MAX_TEXT = 1000
INT31 = (1 << 31) - 1
BOOL = Rule("bool")


def Int(lo: int, hi: int) -> Rule:  # noqa: N802 - reads like a type in the table
    return Rule("int", lo=lo, hi=hi)


def Choice(*choices: Any) -> Rule:  # noqa: N802
    return Rule("choice", choices=choices)


def Text(pattern: str, example: str) -> Rule:  # noqa: N802
    return Rule("text", pattern=pattern, example=example)


def Names(*choices: str) -> Rule:  # noqa: N802
    return Rule("names", choices=choices)


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
#: One Dynamo source as ``dynamic_sources`` takes it (``L['x']``, ``L['args'][0]:0``, ``L['batch']['ids']:1``).
SOURCE = rf"(?:L|G)\['{_NAME}'\](?:\['{_NAME}'\]|\[[0-9]{{1,6}}\]|\.{_NAME})*(?::[0-9]{{1,2}})?"
SOURCES = Text(rf"{SOURCE}(?:,{SOURCE})*", "L['x']:0,L['n']")
#: A ``[cache]`` file: a relative path of plain names ending ``.bin``, no ``..``, no leading dot.
CACHE_FILE = Text(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}/){0,4}[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.bin",
                  "compile_cache.bin")
#: Backends a config may name: torch's own, which import no other package.
BACKENDS: tuple[str, ...] = ("inductor", "aot_eager", "eager", "aot_eager_decomp_partition", "cudagraphs")
MODES: tuple[str, ...] = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
STANCES: tuple[str, ...] = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile",
                            "eager_then_compile", "aot_eager_then_compile")
LIMIT = Int(1, 1 << 20)
STEP = Int(0, INT31)
ZERO_ONE = Choice("0", "1")


#: ``torch._inductor.config`` keys (also the keys of ``[compile] options``).
INDUCTOR: dict[str, Rule] = {
    "fx_graph_cache": BOOL, "autotune_local_cache": BOOL, "triton.cudagraphs": BOOL, "triton.cudagraph_trees": BOOL,
    "triton.cudagraph_skip_dynamic_graphs": BOOL, "triton.cudagraph_support_input_mutation": BOOL,
    "reorder_for_compute_comm_overlap": BOOL, "deterministic": BOOL, "max_autotune": BOOL,
    "max_autotune_pointwise": BOOL, "max_autotune_gemm": BOOL,
    "max_autotune_gemm_backends": Text(r"(?:ATEN|TRITON|CPP)(?:,(?:ATEN|TRITON|CPP)){0,2}", "ATEN,TRITON"),
    "coordinate_descent_tuning": BOOL, "freezing": BOOL, "shape_padding": BOOL, "comprehensive_padding": BOOL,
    "size_asserts": BOOL, "nan_asserts": BOOL, "benchmark_kernel": BOOL, "epilogue_fusion": BOOL,
    "pattern_matcher": BOOL, "aggressive_fusion": BOOL, "split_reductions": BOOL, "layout_optimization": BOOL,
    "keep_output_stride": BOOL, "reorder_for_locality": BOOL, "fallback_random": BOOL, "implicit_fallbacks": BOOL,
    "emulate_precision_casts": BOOL, "combo_kernels": BOOL, "conv_1x1_as_mm": BOOL, "online_softmax": BOOL,
    "memory_planning": BOOL, "allow_buffer_reuse": BOOL, "inplace_buffers": BOOL, "permute_fusion": BOOL,
    "search_autotune_cache": BOOL, "autotune_in_subproc": BOOL, "disable_progress": BOOL,
    "compile_threads": Int(1, 1024), "unroll_reductions_threshold": Int(1, 1024), "max_fusion_size": Int(1, 4096),
    "cpp.threads": Int(1, 4096), "cpp.dynamic_threads": BOOL, "triton.unique_kernel_names": BOOL,
    "triton.descriptive_names": Choice("torch", "original_aten", "inductor_node"),
    "triton.autotune_pointwise": BOOL, "triton.max_tiles": Choice(1, 2, 3), "triton.multi_kernel": Choice(0, 1, 2, 3),
    "triton.cooperative_reductions": BOOL,
}

#: Every key a config may set without the caller's opt-in, per section, with the values it accepts.
ALLOWED: dict[str, dict[str, Rule]] = {
    "dynamo": {                                                 # torch._dynamo.config
        "recompile_limit": LIMIT, "cache_size_limit": LIMIT, "accumulated_recompile_limit": LIMIT,
        "accumulated_cache_size_limit": LIMIT, "automatic_dynamic_shapes": BOOL,
        "automatic_dynamic_shapes_mark_as": Choice("dynamic", "unbacked"), "assume_static_by_default": BOOL,
        "specialize_int": BOOL, "specialize_float": BOOL, "capture_scalar_outputs": BOOL,
        "capture_dynamic_output_shape_ops": BOOL, "reorderable_logging_functions": Names("print"),
        "fail_on_recompile_limit_hit": BOOL, "enable_compiler_collectives": BOOL,
        "optimize_ddp": Choice(True, False, "ddp_optimizer", "python_reducer",
                               "python_reducer_without_compiled_forward", "no_optimization"),
        "force_parameter_static_shapes": BOOL, "force_nn_module_property_static_shapes": BOOL,
        "inline_inbuilt_nn_modules": BOOL, "allow_unspec_int_on_nn_module": BOOL, "suppress_errors": BOOL,
        "verbose": BOOL, "guard_nn_modules": BOOL, "error_on_recompile": BOOL, "dynamic_shapes": BOOL,
        "automatic_dynamic_local_pgo": BOOL, "prefer_deferred_runtime_asserts_over_guards": BOOL,
        "use_graph_deduplication": BOOL, "skip_nnmodule_hook_guards": BOOL, "skip_fsdp_guards": BOOL,
        "allow_rnn": BOOL,
    },
    "inductor": INDUCTOR,                                       # torch._inductor.config
    "compiler": {                                               # torch.compiler.config
        "dynamic_sources": SOURCES, "unbacked_sources": SOURCES, "force_disable_caches": BOOL,
    },
    "compile": {                                                # torch.compile(...) keyword arguments
        "fullgraph": BOOL, "dynamic": BOOL, "backend": Choice(*BACKENDS), "mode": Choice(*MODES),
        "disable": BOOL, "recompile_limit": LIMIT, "isolate_recompiles": BOOL,
        "options": Rule("table"),                               # key by key through the [inductor] rules
    },
    "stance": {                                                 # torch.compiler.set_stance(...)
        "stance": Choice(*STANCES), "after_step": STEP, "skip_guard_eval_unsafe": BOOL,
        "force_backend": Choice(*BACKENDS),
    },
    "distributed": {"guard_collectives": BOOL, "compiler_collectives": BOOL, "barrier_after_step": STEP},
    "cache": {"load": CACHE_FILE, "save": CACHE_FILE, "save_after_step": STEP},
    "env": {                                                    # os.environ at Collector(); values are strings
        "TORCH_COMPILE_DYNAMIC_SOURCES": SOURCES, "TORCH_COMPILE_UNBACKED_SOURCES": SOURCES,
        # names only: a dotted name makes torch's log setup import its parent module (find_spec)
        "TORCH_LOGS": Text(r"[+-]?[A-Za-z_][A-Za-z0-9_]{0,80}(?:,[+-]?[A-Za-z_][A-Za-z0-9_]{0,80}){0,40}",
                           "+dynamo,recompiles,graph_breaks"),
        "TORCHDYNAMO_VERBOSE": ZERO_ONE, "TORCHINDUCTOR_FX_GRAPH_CACHE": ZERO_ONE,
        "TORCHINDUCTOR_AUTOGRAD_CACHE": ZERO_ONE, "TORCHINDUCTOR_MAX_AUTOTUNE": ZERO_ONE,
        "TORCHINDUCTOR_COORDINATE_DESCENT_TUNING": ZERO_ONE, "TORCHINDUCTOR_FREEZING": ZERO_ONE,
        "TORCHINDUCTOR_COMPILE_THREADS": Text(r"[1-9][0-9]{0,3}", "8"),
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": Choice("0", "1", "2", "3"), "TORCH_NCCL_BLOCKING_WAIT": ZERO_ONE,
        "TORCH_NCCL_TRACE_BUFFER_SIZE": Text(r"[0-9]{1,7}", "2000"), "TORCH_NCCL_ENABLE_MONITORING": ZERO_ONE,
        "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC": Text(r"[1-9][0-9]{0,5}", "600"),
        "TORCH_DISTRIBUTED_DEBUG": Choice("OFF", "INFO", "DETAIL"),
        "NCCL_DEBUG": Choice("VERSION", "WARN", "INFO", "TRACE"),
        "NCCL_DEBUG_SUBSYS": Text(r"\^?[A-Z]{2,8}(?:,[A-Z]{2,8}){0,20}", "INIT,COLL"),
        "NCCL_P2P_DISABLE": ZERO_ONE, "NCCL_IB_DISABLE": ZERO_ONE, "CUDA_LAUNCH_BLOCKING": ZERO_ONE,
        "CUBLAS_WORKSPACE_CONFIG": Choice(":4096:8", ":16:8"), "OMP_NUM_THREADS": Text(r"[1-9][0-9]{0,3}", "4"),
    },
}

#: ``[mark_dynamic]``: an argument name, a positional index or a dotted path; dims and bounds.
MARK_DYNAMIC_ARG = r"[A-Za-z0-9_]{1,100}(?:\.[A-Za-z0-9_]{1,100}){0,8}"
MARK_DYNAMIC_DIM = Int(0, 63)
MARK_DYNAMIC_BOUND = Int(0, (1 << 62))

#: Keys a recommender may write, per section (``*``: any key :data:`ALLOWED` has, or any argument name).
RECOMMENDER_KEYS: dict[str, frozenset[str]] = {
    "dynamo": frozenset({
        "recompile_limit", "cache_size_limit", "accumulated_recompile_limit", "accumulated_cache_size_limit",
        "automatic_dynamic_shapes", "automatic_dynamic_shapes_mark_as", "assume_static_by_default",
        "specialize_int", "specialize_float", "capture_scalar_outputs", "capture_dynamic_output_shape_ops",
        "reorderable_logging_functions", "fail_on_recompile_limit_hit", "enable_compiler_collectives",
        "optimize_ddp", "force_parameter_static_shapes", "force_nn_module_property_static_shapes",
        "inline_inbuilt_nn_modules", "allow_unspec_int_on_nn_module",
    }),
    "inductor": frozenset({
        "fx_graph_cache", "autotune_local_cache", "triton.cudagraphs", "triton.cudagraph_trees",
        "triton.cudagraph_skip_dynamic_graphs", "reorder_for_compute_comm_overlap", "deterministic",
        "max_autotune", "max_autotune_pointwise", "max_autotune_gemm", "coordinate_descent_tuning", "freezing",
        "shape_padding", "comprehensive_padding", "size_asserts", "benchmark_kernel",
    }),
    "compiler": frozenset({"dynamic_sources", "unbacked_sources"}),
    "compile": frozenset({"dynamic", "mode", "fullgraph", "backend", "options"}),
    "stance": frozenset({"stance", "after_step"}),
    "env": frozenset({"*"}),
    "mark_dynamic": frozenset({"*"}),
    "distributed": frozenset({"guard_collectives", "compiler_collectives", "barrier_after_step"}),
    "cache": frozenset({"load", "save", "save_after_step"}),
}

_CONTROL = re.compile(r"[\x00-\x1f\x7f\x85\u2028\u2029]")


def rule(section: str, key: str) -> Rule | None:
    """The rule for ``[section] key`` (``compile.options`` keys are inductor keys), or None if not allowed."""
    return ALLOWED.get("inductor" if section == "compile.options" else section, {}).get(key)


def allowed_keys(section: str) -> list[str]:
    return list(ALLOWED.get("inductor" if section == "compile.options" else section, {}))


def key_problem(section: str, key: str, value: Any) -> str | None:
    """Why ``[section] key = value`` needs the caller's opt-in (a phrase naming the key), or None."""
    r = rule(section, key)
    if r is None:
        return f"[{section}] {key} is not in the allowlist{_closest(key, allowed_keys(section))}"
    why = r.problem(value)
    return f"[{section}] {key} {why}" if why else None


def unsafe_value_problem(section: str, key: str, value: Any) -> str | None:
    """Even with the caller's opt-in a value may not hold a control character (it could forge log lines)."""
    if isinstance(value, str) and _CONTROL.search(value):
        return f"[{section}] {key}: the value holds a control character"
    return None


def _closest(key: str, valid: list[str]) -> str:
    import difflib

    match = difflib.get_close_matches(key, valid, n=1, cutoff=0.6)
    return f" (did you mean {match[0]!r}?)" if match else ""


def check_writable(config: dict[str, Any]) -> None:
    """Raise ``ValueError`` unless every key of ``config`` is one a recommender may write."""
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


def markdown_table() -> str:
    """:data:`ALLOWED` as the Markdown table ``docs/compile-config.md`` shows (a test keeps them equal)."""
    rows = ["| section | key | accepts | a recommender writes it |", "| --- | --- | --- | --- |"]
    for section, keys in ALLOWED.items():
        written = RECOMMENDER_KEYS.get(section, frozenset())
        for key, r in keys.items():
            rows.append(f"| `[{section}]` | `{key}` | {r.describe().replace('|', '&#124;')} | "
                        f"{'yes' if key in written or '*' in written else ''} |")
    return "\n".join(rows)
