"""Fuzzing ingestion with mutated real inputs (issue 10, requirement 5).

Real Kineto traces and TORCH_TRACE logs are mutated (a field's type or number changed, the file cut short, values
nested deep, keys dropped) and opened beside an untouched rank. Asserted for every example: no exception other than
a one-line ``TraceError``/``InputError`` that names the file, no hang (an alarm per example), and with
``on_error="skip"`` the good rank still loads. Hypothesis runs derandomized (the same examples every run) with a
bounded number of examples, so the whole module takes well under a minute.
"""

from __future__ import annotations

import gzip
import json
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import workbench  # noqa: E402
from workbench.compile_log import read_compile_logs  # noqa: E402
from workbench.errors import InputError  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data"
TRACE_SEEDS = [
    DATA / "traces/hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    DATA / "traces/hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    REPO / "sample_traces/cpu-recompile-before/rank0/trace/rank0.steps2-3.17626.pt.trace.json.gz",
]
LOG_SEED = DATA / "compile_logs/torch2.13-cpu/2rank-gloo-divergent-shape"
EXAMPLES = 30
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

#: Values a field is replaced with: other types, numbers no trace holds, text, deep nesting.
ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([1e300, -1e300, -1.0, 0.0, 1e-300, 2**63, -(2**63) - 1, 1.5]),
    st.text(max_size=8), st.sampled_from(["12.5", "nan", "inf", "0", "-3", "", "\n]\n"]),
    st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.integers(min_value=50, max_value=400).map(lambda n: json.loads("[" * n + "]" * n)),
)


@contextmanager
def no_hang(seconds: int = 30) -> Iterator[None]:
    """Fail (instead of hanging the suite) when the body runs longer than ``seconds``."""
    def boom(*_: object) -> None:
        raise TimeoutError(f"ingestion hung for {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


#: Words that would mean an internal exception reached the user (issue 35: one line, never a class name).
INTERNAL = ("Error:", "Exception", "Traceback", "i128", "i32", "strict_cast")


def _one_line_error(exc: BaseException, path: Path) -> None:
    assert isinstance(exc, InputError), f"{type(exc).__name__}: {exc}"
    msg = str(exc)
    assert "\n" not in msg and msg.strip(), repr(msg)
    assert str(path) in msg or path.name in msg, msg
    assert not any(word in msg for word in INTERNAL), msg


def _mutate_trace(doc: dict, data: st.DataObject) -> dict:
    how = data.draw(st.sampled_from(["event_field", "arg_field", "top_field", "drop_key", "dist_info", "copy",
                                     "shift"]))
    events = doc["traceEvents"]
    if how == "copy" and events:  # an event written again (issue 35: counted once, never four times)
        events.append(dict(events[data.draw(st.integers(0, len(events) - 1))]))
        return doc
    if how == "shift" and events:  # an event from another clock or after a jump (issue 35: dropped and counted)
        ev = events[data.draw(st.integers(0, len(events) - 1))]
        if isinstance(ev.get("ts"), (int, float)):
            ev["ts"] += data.draw(st.sampled_from([3600e6, -1e12, 86400e6 * 365, 61e6]))
        return doc
    if how in ("event_field", "arg_field", "drop_key") and events:
        for _ in range(data.draw(st.integers(1, 5))):
            ev = events[data.draw(st.integers(0, len(events) - 1))]
            if how == "arg_field":
                args = ev.setdefault("args", {})
                key = data.draw(st.sampled_from(["correlation", "External id", "device", "stream", "In msg nelems",
                                                 "Collective name", "Process Group Ranks", "name"]))
                args[key] = data.draw(ODD_VALUES)
            else:
                key = data.draw(st.sampled_from(["ts", "dur", "ph", "pid", "tid", "name", "cat", "args"]))
                if how == "drop_key":
                    ev.pop(key, None)
                else:
                    ev[key] = data.draw(ODD_VALUES)
    elif how == "top_field":
        doc[data.draw(st.sampled_from(["baseTimeNanoseconds", "traceEvents", "deviceProperties",
                                       "schemaVersion"]))] = data.draw(ODD_VALUES)
    else:
        doc["distributedInfo"] = {data.draw(st.sampled_from(["rank", "world_size", "backend", "pg_config"])):
                                  data.draw(ODD_VALUES)}
    return doc


@SETTINGS
@given(data=st.data())
def test_mutated_trace_never_crashes_and_good_rank_loads(tmp_path_factory: pytest.TempPathFactory,
                                                         data: st.DataObject) -> None:
    seed = TRACE_SEEDS[data.draw(st.integers(0, len(TRACE_SEEDS) - 1))]
    raw = gzip.decompress(seed.read_bytes())
    d = tmp_path_factory.mktemp("fuzz")
    good = d / "rank-0.json"
    good.write_bytes(json.dumps({**json.loads(raw), "distributedInfo": {"rank": 0, "world_size": 2}}).encode())
    bad = d / "rank-1.json"
    if data.draw(st.booleans()):
        cut = data.draw(st.integers(0, len(raw) - 1))
        bad.write_bytes(raw[:cut])
    else:
        doc = _mutate_trace(json.loads(raw), data)
        if isinstance(doc.get("distributedInfo"), dict) and "rank" in doc["distributedInfo"]:
            doc["distributedInfo"]["rank"] = 1 if data.draw(st.booleans()) else doc["distributedInfo"]["rank"]
        bad.write_bytes(json.dumps(doc).encode())
    from workbench import kineto

    piece = kineto.PIECE_BYTES
    if data.draw(st.booleans()):
        kineto.PIECE_BYTES = 4096  # large-file path: the document parsed in pieces cut between events
    with no_hang():
        try:
            _open_both(bad, d)
        finally:
            kineto.PIECE_BYTES = piece


def _open_both(bad: Path, d: Path) -> None:
    """Open the mutated file alone (raise mode) and the folder with the good rank (skip mode); check both."""
    try:
        workbench.open(bad, rank=1, cache=False)
    except Exception as exc:  # noqa: BLE001 - the assertion is on the exception's type and text
        _one_line_error(exc, bad)
    run = workbench.open(d, on_error="skip", cache=False)  # never raises: the good rank is there
    assert 0 in run.ranks.get_column("rank").to_list()
    assert all("\n" not in p and not any(word in p for word in INTERNAL) for p in run.problems), run.problems


@SETTINGS
@given(data=st.data())
def test_mutated_compile_log_never_crashes_and_good_rank_loads(tmp_path_factory: pytest.TempPathFactory,
                                                               data: st.DataObject) -> None:
    d = tmp_path_factory.mktemp("fuzzlog")
    for f in LOG_SEED.glob("*.log.gz"):
        (d / f.name.removesuffix(".gz")).write_bytes(gzip.decompress(f.read_bytes()))
    bad = next(d.glob("*rank_1*.log"))
    lines = bad.read_text().split("\n")
    how = data.draw(st.sampled_from(["field", "truncate", "garbage", "nest"]))
    if how == "truncate":
        text = "\n".join(lines)
        bad.write_text(text[:data.draw(st.integers(0, len(text)))])
    else:
        decodable = [i for i, ln in enumerate(lines) if "] {" in ln and not ln.startswith("\t")]
        for _ in range(data.draw(st.integers(1, 4))):
            i = decodable[data.draw(st.integers(0, len(decodable) - 1))]
            head, _, body = lines[i].partition("] ")
            try:
                ev = json.loads(body)
            except ValueError:
                continue
            if how == "garbage":
                lines[i] = head + "] " + body[: data.draw(st.integers(0, len(body)))]
                continue
            top = next(iter(ev))
            if how == "nest" or not isinstance(ev[top], dict) or not ev[top]:
                key = data.draw(st.sampled_from(["frame_id", "frame_compile_id", "attempt", "rank",
                                                 "compiled_autograd_id", top]))
                ev[key] = data.draw(ODD_VALUES)
            else:
                inner = ev[top]
                inner[data.draw(st.sampled_from(sorted(inner)))] = data.draw(ODD_VALUES)
            lines[i] = head + "] " + json.dumps(ev)
        bad.write_text("\n".join(lines))
    with no_hang():
        problems: list[str] = []
        compiles, _ = read_compile_logs(sorted(d.glob("*.log")), problems=problems)
        run = workbench.open(d, on_error="skip", cache=False)
    assert 0 in compiles.get_column("rank").to_list() and 0 in run.compiles.get_column("rank").to_list()
    assert all("\n" not in p and not any(word in p for word in INTERNAL) for p in problems + run.problems)
