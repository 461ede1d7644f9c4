"""TORCH_TRACE ingest and cause classification on the real logs in tests/data/compile_logs."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import polars as pl
import pytest

from workbench import schema
from workbench.analyses.recompiles import (
    classify_compiles, classify_graph_break, classify_reason, divergent_compiles, recompile_findings,
)
from workbench.compile_log import format_compile_id, rank_from_filename, read_compile_logs, read_log_bytes

SP = "torch2.13-cpu/single-process"


def _text(path: Path) -> str:
    """A stored (gzip-compressed) log's text."""
    return gzip.decompress(path.read_bytes()).decode()

# folder -> {compile_id: (cause, cause_detail or None, substrings of cause_source)}
EXPECTED = {
    "shape": {"0/0": ("first", None, []), "0/1": ("shape", "dim 0", ["L['x']", "dim 0", "4 -> 8"])},
    "dtype": {"0/1": ("dtype", None, ["L['x']", "Float -> Double"])},
    "int_arg": {"0/1": ("int_arg", None, ["L['n'] == 2", "scenarios.py:27"])},
    "global": {"0/1": ("global", None, ["G['GLOBAL_SCALE'] == 1.0", "scenarios.py:33"])},
    "requires_grad": {"0/1": ("requires_grad", None, ["L['x']", "requires_grad False -> True"])},
    "grad_mode": {"0/1": ("grad_mode", "grad_mode", ["grad_mode"])},
    # train -> eval left no guard failure in this log (nn modules are inlined); the batch-size change did
    "module": {"0/1": ("shape", "dim 0", ["L['args'][0]", "4 -> 6"])},
    "limit": {"0/1": ("dtype", None, ["Float -> Double"]),
              "0/2": ("limit", "recompile_limit", ["recompile_limit=2", "runs eager", "Double -> Half"])},
    "graph_break": {"0/0_1": ("graph_break", "print", ["scenarios.py:59"]),
                    "1/0": ("graph_break", "data_dependent_branch", ["scenarios.py:60"]),
                    "2/0": ("first", None, [])},
    "fullgraph_fail": {"0/0": ("graph_break", "data_dependent_branch", ["scenarios.py:67"])},
}
STATUS = {("limit", "0/2"): "eager_fallback", ("fullgraph_fail", "0/0"): "failed",
          ("graph_break", "0/0_1"): "graph_break", ("shape", "0/1"): "ok"}
FINDING_KIND = {"shape": "recompile_shape", "dtype": "recompile_dtype", "int_arg": "recompile_int_arg",
                "global": "recompile_global", "requires_grad": "recompile_requires_grad",
                "grad_mode": "recompile_grad_mode", "module": "recompile_shape", "limit": "recompile_limit",
                "graph_break": "graph_break", "fullgraph_fail": "compile_failure"}


def test_every_folder_has_an_expectation(compile_logs):
    assert sorted(p.name for p in (compile_logs / SP).iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("folder", sorted(EXPECTED))
def test_single_process_cause(compile_logs, folder):
    compiles, skipped = read_compile_logs([compile_logs / SP / folder])
    assert skipped.height == 0, skipped.to_dicts()
    assert compiles.schema == pl.Schema(schema.COMPILES)
    c = classify_compiles(compiles)
    by_id = {r["compile_id"]: r for r in c.iter_rows(named=True)}
    for cid, (cause, detail, needles) in EXPECTED[folder].items():
        row = by_id[cid]
        assert row["cause"] == cause, (cid, row["cause"], row["cause_source"])
        assert row["cause_detail"] == detail, (cid, row["cause_detail"])
        for n in needles:
            assert n in (row["cause_source"] or ""), (cid, n, row["cause_source"])
        if (folder, cid) in STATUS:
            assert row["status"] == STATUS[(folder, cid)]
    assert c["rank"].to_list() == [0] * c.height
    assert c["torch_version"].unique().to_list() == ["2.13.0+cpu"]
    assert (c["start"] > 1_700_000_000 * 10**9).all() and (c["end"] >= c["start"]).all()
    findings = recompile_findings(c)
    assert findings.schema == pl.Schema(schema.FINDINGS)
    assert FINDING_KIND[folder] in findings["kind"].to_list()


def test_limit_row_gets_code_name_of_its_frame(compile_logs):
    c, _ = read_compile_logs([compile_logs / SP / "limit"])
    row = c.filter(pl.col("compile_id") == "0/2").row(0, named=True)
    assert row["co_name"] == "f" and row["co_firstlineno"] == 50
    assert row["recompile_reasons"] == ["0/1: tensor 'x' dtype mismatch. expected Double, actual Half",
                                        "0/0: tensor 'x' dtype mismatch. expected Float, actual Half"]


def test_graph_break_restart_and_times(compile_logs):
    c, _ = read_compile_logs([compile_logs / SP / "graph_break"])
    row = c.filter(pl.col("compile_id") == "0/0_1").row(0, named=True)
    assert row["attempt"] == 1 and row["frame_id"] == 0
    assert len(row["restart_reasons"]) == 1 and "print" in row["restart_reasons"][0]
    assert row["duration_ns"] == 412_057_000 and row["start"] == 1795949831076075 * 1000


def test_two_rank_divergent_shape(compile_logs):
    c, skipped = read_compile_logs([compile_logs / "torch2.13-cpu/2rank-gloo-divergent-shape"])
    assert sorted(c["rank"].unique().to_list()) == [0, 1] and skipped.height == 0
    div = divergent_compiles(c)
    assert div.height == 1
    d = div.row(0, named=True)
    assert d["compile_id"] == "0/1" and d["ranks"] == [1] and d["missing_ranks"] == [0]
    assert d["cause"] == "shape" and "L['args'][0] dim 0: 4 -> 6" in d["cause_source"]
    f = recompile_findings(c)
    top = f.row(0, named=True)
    assert "divergen" in top["kind"] and top["ranks"] == [0, 1]
    ev = json.loads(top["evidence"])
    assert ev["compiling_ranks"] == [1] and ev["waiting_ranks"] == [0] and ev["compile_id"] == "0/1"
    # no step or collective recorded: the compile time, said to be an estimate
    assert top["cost_ns"] == 768_567_000 and top["cost_basis"] == "estimated" and "compile time" in top["cost_method"]
    assert "Rank 1 alone recompiled" in top["message"] and "(0/1)" in top["message"]


def test_two_rank_step_from_steps_table_and_wait_from_collectives(compile_logs):
    c, _ = read_compile_logs([compile_logs / "torch2.13-cpu/2rank-gloo-divergent-shape"])
    rec = c.filter(pl.col("compile_id") == "0/1").row(0, named=True)
    t0 = rec["start"] - 10**9
    # synthetic step table: 5 steps of ~0.1 s, step 3 holds the compile on rank 1 and the wait on rank 0
    steps = []
    for r in (0, 1):
        t = t0
        for s in range(5):
            dur = 10**8 if s != 3 else rec["duration_ns"] + 10**8
            steps.append({"rank": r, "step": s, "source": "collector", "start": t, "end": t + dur, "dur": dur})
            t += dur
    st = schema.conform(pl.DataFrame(steps), schema.STEPS)
    f = recompile_findings(c, steps=st)
    top = f.row(0, named=True)
    assert top["kind"] == "divergent_recompile" and top["steps"] == [3]
    assert "at step 3" in top["message"] and top["cost_basis"] == "measured"
    assert "step-time excess" in top["cost_method"] and top["cost_ns"] == rec["duration_ns"]
    # collectives: rank 1 enters allreduce seq 7 after its compile; rank 0 has been waiting in seq 7
    coll = schema.conform(pl.DataFrame([
        {"rank": 1, "pg_name": "0", "seq": 7, "start": rec["end"] + 1000, "end": rec["end"] + 2000},
        {"rank": 0, "pg_name": "0", "seq": 7, "start": rec["start"], "end": rec["end"] + 2000},
    ]), schema.COLLECTIVES)
    f = recompile_findings(c, steps=st, collectives=coll)
    top = f.row(0, named=True)
    assert top["cost_basis"] == "measured" and top["steps"] == [3]  # measured in the step where it happened


def test_guard_collectives_run_is_not_divergent(compile_logs):
    c, _ = read_compile_logs([compile_logs / "torch2.13-cpu/2rank-gloo-divergent-shape-guard-collectives"])
    assert divergent_compiles(c).height == 0
    kinds = recompile_findings(c)["kind"].to_list()
    assert not any("divergen" in k for k in kinds)
    causes = dict(zip(classify_compiles(c).filter(pl.col("compile_id") == "0/1")["rank"].to_list(),
                      classify_compiles(c).filter(pl.col("compile_id") == "0/1")["cause"].to_list()))
    assert causes == {0: "backend", 1: "shape"}


@pytest.mark.parametrize("name", ["simple.log.gz", "comp_failure.log.gz", "multi_rank_schedule"])
def test_tlparse_logs_parse(compile_logs, name):
    c, skipped = read_compile_logs([compile_logs / "tlparse" / name])
    assert c.height >= 1
    classify_compiles(c)
    recompile_findings(c)


def test_tlparse_multi_rank_schedule(compile_logs):
    c, skipped = read_compile_logs([compile_logs / "tlparse/multi_rank_schedule"])
    assert sorted(c["rank"].unique().to_list()) == [0, 1, 2]  # ranks from the file names
    assert skipped["reason"].str.contains("differs from file name").all()
    kinds = recompile_findings(c)["kind"].to_list()
    assert "divergent_collective_schedule" in kinds
    assert "compile_skew" not in kinds  # the three files were recorded hours apart


def test_unknown_events_and_garbage_are_counted(tmp_path):
    log = tmp_path / "dedicated_log_torch_trace_rank_3_abc.log"
    log.write_text(
        'V1129 10:56:30.925000 1 x.py:1] {"str": ["/a/model.py", 1]}\n'
        'V1129 10:56:30.925000 1 x.py:1] {"dynamo_start": {"stack": [{"line": 9, "name": "fwd", "filename": 1}]}, '
        '"frame_id": 0, "frame_compile_id": 0, "attempt": 0}\n'
        'V1129 10:56:30.925000 1 x.py:1] {"brand_new_event": {}, "has_payload": "00"}\n'
        '\tpayload line\n'
        'garbage line\n'
        'V1129 10:56:30.925000 1 x.py:1] {"artifact": {"name": "recompile_reasons", "encoding": "json"}, '
        '"frame_id": 0, "frame_compile_id": 1, "attempt": 0, "has_payload": "00"}\n'
        '\t[\n\t"0/0: tensor \'x\' stride mismatch at index 0. expected 4, actual 1"\n\t]\n'
        'V1129 10:56:30.925000 1 x.py:1] {"compilation_metrics": {"compile_id": "0/1", "co_name": "fwd", '
        '"start_time_us": 1000, "end_time_us": 3000, "duration_us": 2000, "recompile_user_contexts": ["step=12"]}, '
        '"frame_id": 0, "frame_compile_id": 1, "attempt": 0}\n'
        'V1129 10:56:30.925000 1 x.py:1] {"compilation_metrics": {"compile_id": "0/2", "co_name": "fwd", '
        '"start_time_us": 5000, "end_time_us": 6000, "duration_us": 1000, "recompile_user_contexts": ["step=13"], '
        '"inductor_fx_local_cache_hit_count": 2}, "frame_id": 0, "frame_compile_id": 2, "attempt": 0}\n'
        'V1129 10:56:30.925000 1 x.py:1] {"compilation_metrics": {not json\n'
    )
    c, skipped = read_compile_logs([log])
    reasons = dict(zip(skipped["reason"], skipped["count"]))
    assert reasons == {"unknown event type brand_new_event": 1, "malformed line": 1, "malformed json": 1}
    assert c["rank"].unique().to_list() == [3]
    c = classify_compiles(c)
    rows = {r["compile_id"]: r for r in c.iter_rows(named=True)}
    assert rows["0/0"]["status"] == "incomplete" and rows["0/0"]["co_name"] == "fwd"
    assert rows["0/0"]["co_filename"] == "/a/model.py" and rows["0/0"]["co_firstlineno"] == 9
    assert rows["0/1"]["step"] == 12 and rows["0/1"]["cause"] == "stride" and rows["0/1"]["start"] == 1_000_000
    assert rows["0/2"]["cache_hits"] == 2 and rows["0/2"]["step"] == 13


@pytest.mark.parametrize("reason,cause,detail,needle", [
    ("0/0: tensor 'x' stride mismatch at index 0. expected 4, actual 1", "stride", "dim 0", "L['x'] dim 0: 4 -> 1"),
    ("0/0: L['self']._modules['1'].training == True  # x = self.drop(x)  # m.py:12 in forward", "module",
     "training", "m.py:12"),
    ("0/0: L['alpha'] == 0.5", "float_arg", None, "L['alpha'] == 0.5"),
    ("0/0: tensor 'x' rank mismatch. expected 2, actual 3", "shape", "ndim", "2 -> 3"),
    ("0/0: 2 <= L['x'].size()[0]  # return x * 2", "shape", "dim 0 (dynamic range)", "L['x'] dim 0"),
    ("0/0: ___check_obj_id(L['fn'], 1403)", "object_id", "identity", "L['fn']"),
    ("0/0: ___check_obj_id(G['CFG'], 1403)", "global", "identity", "G['CFG']"),
    ("0/0: GLOBAL_STATE changed: autocast", "global_state", "autocast", "autocast"),
    ("0/0: tensor 'x' device mismatch. expected cpu, actual cuda:0", "device", None, "L['x']"),
    ("0/0: L['mode'] == 'train'", "constant", None, "L['mode'] == 'train'"),
    ("0/0: len(L['xs']) == 3", "length", None, "len(L['xs'])"),
])
def test_classify_reason_synthetic(reason, cause, detail, needle):
    c, d, s = classify_reason(reason)
    assert (c, d) == (cause, detail) and needle in s


@pytest.mark.parametrize("text,kind", [
    ("Unsupported Tensor.item() call with capture_scalar_outputs=False", "item"),
    ("Dynamic shape operator\n hint capture_dynamic_output_shape_ops", "dynamic_output_shape"),
    ("Call to `torch._dynamo.graph_break()`", "explicit"),
    ("Graph break in user code at /a/b.py:3\nGraph Break Reason: Logger.info is not supported", "logging"),
    ("Attempted to call function marked as skipped", "skipped_function"),
    ("Unsupported method call: foo", "unsupported_call"),
])
def test_classify_graph_break_synthetic(text, kind):
    assert classify_graph_break(text)[0] == kind


def test_helpers():
    assert rank_from_filename("dedicated_log_torch_trace_rank_12_x1.log") == 12
    assert rank_from_filename("dedicated_log_torch_trace_rank_2.log") == 2
    assert rank_from_filename("dedicated_log_torch_trace_abc.log") is None
    assert rank_from_filename("dedicated_log_torch_trace_rank_3_ab.log.gz") == 3
    assert format_compile_id(0, 1) == "0/1" and format_compile_id(0, 0, 1) == "0/0_1"
    assert format_compile_id(1, 0, 0, 2) == "!2/1/0"


def test_unreadable_file_raises_trace_error(tmp_path):
    from workbench.errors import TraceError

    with pytest.raises(TraceError):
        read_compile_logs([tmp_path / "missing.log"])


def test_gzip_compressed_logs_read_as_the_plain_ones(compile_logs, tmp_path):
    """A ``.log.gz`` (how tests/data stores its logs) gives the rows of the plain log, found by a folder, a run
    and ``workbench.open`` alike; a bomb, a cut-short file and a ``.gz`` that is not gzip are one line each."""
    import workbench
    from workbench.errors import TraceError

    src = compile_logs / "torch2.13-cpu/2rank-gloo-divergent-shape"
    plain = tmp_path / "plain"
    plain.mkdir()
    for f in src.glob("*.log.gz"):
        (plain / f.name.removesuffix(".gz")).write_bytes(gzip.decompress(f.read_bytes()))
    a, _ = read_compile_logs([plain])
    b, _ = read_compile_logs([src])
    assert a.height == 3 and a.drop("log_file").equals(b.drop("log_file"))
    assert workbench.open(src, cache=False).compiles.drop("log_file").equals(
        workbench.open(plain, cache=False).compiles.drop("log_file"))
    bomb = tmp_path / "dedicated_log_torch_trace_rank_0_bomb.log.gz"
    bomb.write_bytes(gzip.compress(b"\0" * (1 << 20)))
    with pytest.raises(TraceError, match="decompresses to more than 100,000 bytes .the limit for a compile log."):
        read_log_bytes(bomb, 100_000)
    cut = tmp_path / "dedicated_log_torch_trace_rank_0_cut.log.gz"
    cut.write_bytes(next(src.glob("*.log.gz")).read_bytes()[:5000])
    fake = tmp_path / "dedicated_log_torch_trace_rank_0_fake.log.gz"
    fake.write_text("V1205 00:00:00.000000 1 x.py:1] {}\n")
    for bad, why in ((cut, "truncated gzip"), (fake, "named .gz but is not gzip-compressed")):
        problems: list[str] = []
        read_compile_logs([bad], problems=problems)
        assert len(problems) == 1 and str(bad) in problems[0] and why in problems[0], problems


# --- fidelity (issue 11): repeated compile ids, graph breaks vs failures, unknown times, cache bypasses ------


def test_repeated_identical_block_collapses_and_a_reset_starts_a_generation(compile_logs, tmp_path):
    """A log written twice (identical blocks, identical times: tlparse's ``multi_rank_runtime`` has one) is one set
    of compilations, the repeat noted in SKIPPED; a log of a process that reset dynamo (torch 2.13, ``reset``
    scenario: 2 frames × 3 generations) keeps all 6 first compiles, in generations 0, 1, 2, and none is a
    recompile."""
    from workbench.analyses.recompiles import classify_compiles, event_counts

    src = next((compile_logs / SP / "shape").glob("*.log.gz"))
    once, _ = read_compile_logs([src])
    twice_log = tmp_path / "twice.log"
    twice_log.write_text(_text(src) + _text(src))
    twice, skipped = read_compile_logs([twice_log])
    assert twice.height == once.height and twice["compile_id"].to_list() == once["compile_id"].to_list()
    assert skipped["reason"].str.contains("repeated with identical content").all() and skipped.height == 1
    assert int(skipped["count"][0]) == once.height
    reset = next((compile_logs / "matrix" / "2.13.0" / "reset").glob("*.log.gz"))
    c, _ = read_compile_logs([reset])
    assert c.height == 6 and sorted(c["generation"].to_list()) == [0, 0, 1, 1, 2, 2]
    assert c.filter(pl.col("compile_id") == "0/0")["sequence"].sort().to_list() == [0, 1, 2]
    counts = event_counts(classify_compiles(c))[0]
    assert counts["recompiles"] == 0 and counts["first_compiles"] == 6 and counts["resets"] == 2


def test_graph_break_is_never_a_failure(compile_logs):
    gb, _ = read_compile_logs([compile_logs / SP / "graph_break"])
    breaks = gb.filter(pl.col("status") == "graph_break")
    assert breaks.height == 2
    assert breaks["fail_type"].null_count() == breaks.height and breaks["fail_reason"].null_count() == breaks.height
    assert breaks["break_reason"].null_count() == 0 and (breaks["graph_break_count"] >= 1).all()
    assert "print" in breaks.filter(pl.col("compile_id") == "0/0_1")["break_reason"][0]
    fail, _ = read_compile_logs([compile_logs / SP / "fullgraph_fail"])
    row = fail.row(0, named=True)
    assert row["status"] == "failed" and row["fail_type"] == "Unsupported" and row["break_reason"] is None
    assert row["graph_break_count"] == 0 and "Data-dependent branching" in row["fail_reason"]


def test_unknown_compile_time_is_null_not_zero(compile_logs, tmp_path):
    src = next((compile_logs / SP / "shape").glob("*.log.gz"))
    lines = []
    for ln in _text(src).split("\n"):
        if '{"compilation_metrics"' in ln:
            head, _, body = ln.partition("] ")
            ev = json.loads(body)
            for k in ("start_time_us", "end_time_us", "start_time", "duration_us", "entire_frame_compile_time_s"):
                ev["compilation_metrics"].pop(k, None)
            ln = head + "] " + json.dumps(ev)
        lines.append(ln)
    log = tmp_path / "no_times.log"
    log.write_text("\n".join(lines))
    c, _ = read_compile_logs([log])
    assert c.height == 2 and c["duration_ns"].null_count() == 2 and c["start"].null_count() == 2


def test_aotautograd_cache_bypass_counted(compile_logs, tmp_path):
    src = next((compile_logs / SP / "shape").glob("*.log.gz"))
    text = _text(src).split("\n")
    i = next(i for i, ln in enumerate(text) if '{"compilation_metrics"' in ln and '"frame_compile_id": 1' in ln)
    prefix = text[i].partition("] ")[0]
    bypass = (prefix + '] {"artifact": {"name": "aotautograd_cache_bypass", "encoding": "json"}, '
              '"frame_id": 0, "frame_compile_id": 1, "attempt": 0, "has_payload": "x"}')
    payload = '\t{"cache_bypass_reason": "Unsupported call_function target flex_attention", "cache_state": "bypass"}'
    log = tmp_path / "bypass.log"
    log.write_text("\n".join(text[:i] + [bypass, payload] + text[i:]))
    c, _ = read_compile_logs([log])
    row = c.filter(pl.col("compile_id") == "0/1").row(0, named=True)
    assert row["cache_bypasses"] == 1 and "flex_attention" in row["cache_bypass_reason"]
    assert c.filter(pl.col("compile_id") == "0/0")["cache_bypasses"].to_list() == [0]


def test_tlparse_logs_of_older_torch_keep_unknown_times_null(compile_logs):
    c, _ = read_compile_logs([compile_logs / "tlparse" / "comp_failure.log.gz"])
    row = c.row(0, named=True)
    assert row["duration_ns"] is None  # the log records no compile time
    # its dynamo_config says suppress_errors: the backend error was swallowed and the frame runs eagerly
    assert row["status"] == "skipped_frame" and row["skip_reason"] == "suppressed_error"
    assert row["fail_type"] == "BackendCompilerFailed"


_INDUCTOR_SCRIPT = """
import torch
def f(x):
    y = torch.sin(x) * 2
    print("a graph break")
    return y.cos() + 1
g = torch.compile(f, backend="inductor")
for n in (4, 8, 8):
    g(torch.randn(n))
"""


@pytest.mark.slow
def test_real_inductor_logs_graph_breaks_and_cache_hits(tmp_path):
    """Two real torch 2.13 inductor runs sharing one compile cache: graph breaks are graph breaks (never failures),
    inductor times are read, the first run's cache misses become the second run's hits."""
    pytest.importorskip("torch")
    import subprocess
    import sys

    script = tmp_path / "job.py"
    script.write_text(_INDUCTOR_SCRIPT)
    runs = []
    for i in (1, 2):
        env = {**os.environ, "TORCH_TRACE": str(tmp_path / f"trace{i}"),
               "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor_cache")}
        subprocess.run([sys.executable, str(script)], env=env, check=True, capture_output=True, timeout=600)
        c, skipped = read_compile_logs([tmp_path / f"trace{i}"])
        runs.append(c)
        assert skipped.height == 0, skipped.to_dicts()
        assert c["torch_version"].unique().to_list()[0].startswith("2.")
        breaks = c.filter(pl.col("status") == "graph_break")
        assert breaks.height >= 1 and c.filter(pl.col("status") == "failed").height == 0
        assert breaks["fail_type"].null_count() == breaks.height and "print" in breaks["break_reason"][0]
        assert c["duration_ns"].null_count() == 0
    cold, warm = runs
    assert cold["inductor_compile_s"].drop_nulls().len() > 0  # the warm run may take every graph from the cache
    assert cold["cache_misses"].sum() > 0 and warm["cache_hits"].sum() >= cold["cache_misses"].sum() // 2
