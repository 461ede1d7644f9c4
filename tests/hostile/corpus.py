"""The hostile-input corpus: seeded cases across seven classes, each an input an attacker or a broken job
produces, the commands that read it, and the oracle of a handled outcome (docs: /work/coord/security-contract.md,
issue 35).

Classes: ``kineto`` (traces), ``compile_log`` (TORCH_TRACE logs), ``rundir`` (run directories), ``fr`` (Flight
Recorder dumps), ``config`` (compile configs, the code-execution doors with marker files), ``diff``, ``app``.

Each class draws from ``random.Random(f"{seed}:{class}")``, so ``--only CLASS`` gives the same cases as the whole
corpus; a case's own input comes from a ``Random`` seeded when the corpus is built, so a case rebuilds the same
bytes in any process.

Example:
    >>> cases = build_corpus(0)
    >>> len(cases) >= 300 and {c.cls for c in cases} == set(CLASSES)
    True
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import builders as B
from harness import Case, Check, Ctx, Outcome, Step

CLASSES = ("kineto", "compile_log", "rundir", "fr", "config", "diff", "app")
#: Per class, how many cases the CI subset takes (about 40 in all).
FAST_QUOTA = {"kineto": 9, "compile_log": 5, "rundir": 7, "fr": 7, "config": 7, "diff": 3, "app": 4}

ANSI = ["\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "\x1b[31;1m", "\x1b[?1049h", "\x07\x08\x08", "\x9b2J", "\r\x1b[K",
        "\x1b]8;;http://evil.example\x1b\\link\x1b]8;;\x1b\\"]


# --------------------------------------------------------------------------------------------- oracle helpers
def _phrase_count(data: dict[str, Any], phrase: str) -> int:
    return sum(int(n) for k, n in (data.get("skipped") or {}).items() if phrase.lower() in str(k).lower())


def _said(data: Any, needle: str) -> bool:
    """``needle`` (case-insensitive) in what the summary reports as dropped or wrong: skipped, problems, notes."""
    if not isinstance(data, dict):
        return False
    text = json.dumps([data.get("skipped"), data.get("problems"), data.get("notes")], ensure_ascii=False)
    return needle.lower() in text.lower()


def counted(phrase: str, at_least: int = 1, exactly: int | None = None) -> Check:
    """SKIPPED holds ``phrase`` with a count of at least ``at_least`` (or exactly ``exactly``)."""
    want = f"= {exactly}" if exactly is not None else f">= {at_least}"
    return Check(f"SKIPPED has no '{phrase}' counted {want}",
                 lambda o: (_phrase_count(o.data, phrase) == exactly) if exactly is not None
                 else _phrase_count(o.data, phrase) >= at_least, "silent")


def noted(*needles: str) -> Check:
    """One of ``needles`` appears in skipped / problems / notes."""
    return Check(f"no note naming {' or '.join(repr(n) for n in needles)}",
                 lambda o: any(_said(o.data, n) for n in needles), "silent")


def anything_skipped() -> Check:
    return Check("nothing counted in SKIPPED or noted", lambda o: bool(
        {k: v for k, v in (o.data.get("skipped") or {}).items() if "metadata" not in k}
        or o.data.get("problems") or o.data.get("notes")), "silent")


def ranks_are(ranks: list[int]) -> Check:
    return Check(f"ranks {ranks} expected (good data lost or invented)", lambda o: o.data.get("ranks") == ranks)


def compute_is(n: int, column: str = "wrong") -> Check:
    """``n`` compute kernels kept; ``column="silent"`` where more means a bad event was kept as if good (clamped,
    counted twice)."""
    return Check(f"{n} compute kernels expected", lambda o: (o.data.get("kernels") or {}).get("compute") == n,
                 column)


def collectives_are(n: int) -> Check:
    return Check(f"{n} collectives expected (collectives lost)", lambda o: o.data.get("collectives") == n)


def compiles_at_least(n: int) -> Check:
    return Check(f">= {n} compiles expected (good compiles lost)", lambda o: (o.data.get("compiles") or 0) >= n)


def check(what: str, fn: Callable[[Any], bool], column: str = "wrong") -> Check:
    """A check on the parsed JSON."""
    return Check(what, lambda o: bool(fn(o.data)), column)


def info(path: str, *checks: Check, expect: str = "ok", names: tuple[str, ...] = (), extra: tuple[str, ...] = (),
         **kw: Any) -> Step:
    """``workbench info PATH --json`` with ``checks`` on its summary."""
    return Step(["info", path, "--json", *extra], expect=expect, names=names, checks=list(checks), json_out=True,
                **kw)


def text(cmd: str, path: str, expect: str = "ok", names: tuple[str, ...] = (), **kw: Any) -> Step:
    """``workbench CMD PATH`` as a person sees it (control characters, one error line)."""
    return Step([cmd, path], expect=expect, names=names, **kw)


def sub_rng(rng: random.Random) -> random.Random:
    return random.Random(rng.getrandbits(64))


class Corpus:
    """Collects the cases of one class, numbering the variants of each kind."""

    def __init__(self, cls: str, seed: int) -> None:
        self.cls, self.rng, self.cases, self._n = cls, random.Random(f"{seed}:{cls}"), [], {}

    def add(self, kind: str, make: Callable[[Ctx], None], steps: list[Step], note: str = "",
            slow: bool = False) -> None:
        i = self._n.get(kind, 0)
        self._n[kind] = i + 1
        self.cases.append(Case(f"{self.cls}-{kind}-{i}", self.cls, make, steps, note, slow))


# --------------------------------------------------------------------------------------------- Kineto traces
def _job(ctx: Ctx, r: random.Random, mutate: Callable[[dict[int, dict], random.Random], None] | None = None, *,
         ranks: tuple[int, ...] = (0, 1), gz: bool = False, steps: int = 3, gemms: int = 3,
         folder: str = "job") -> dict[int, B.TraceFacts]:
    docs, facts = {}, {}
    for rank in ranks:
        docs[rank], facts[rank] = B.kineto_trace(rank, len(ranks), r, steps=steps, gemms=gemms)
    if mutate:
        mutate(docs, r)
    for rank, doc in docs.items():
        if doc is not None:
            B.write_json(ctx.inp / folder / f"rank-{rank}.json{'.gz' if gz else ''}", doc, gz=gz)
    return facts


def _gemms(doc: dict, r: random.Random, n: int) -> list[dict]:
    ks = B.events_of(doc, "kernel", "gemm")
    return r.sample(ks, min(n, len(ks)))


def kineto_cases(seed: int) -> list[Case]:
    c = Corpus("kineto", seed)
    rng = c.rng
    J = "{in}/job"
    total = lambda steps=3, gemms=3: 2 * steps * gemms  # noqa: E731

    def mutating(kind: str, fn: Callable[[dict, random.Random, int], None], n: int, *checks: Check,
                 bad: int = 1, gz: bool = False, more: tuple[Step, ...] = ()) -> None:
        r = sub_rng(rng)
        c.add(kind, lambda ctx: _job(ctx, r, lambda docs, rr: fn(docs[bad], rr, n), gz=gz),
              [info(J, ranks_are([0, 1]), *checks), *more])

    for _ in range(4):
        n = rng.randint(1, 4)
        def neg(doc, r, n):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                k["dur"] = -round(r.uniform(0.5, 1e6), 3)
        mutating("negative-dur", neg, n, counted("negative 'dur'", exactly=n), compute_is(total() - n, "silent"),
                 collectives_are(6), bad=rng.randint(0, 1), gz=rng.random() < 0.5)
    for _ in range(4):
        n, how = rng.randint(1, 3), rng.choice(["null", "absent"])
        def nodur(doc, r, n, how=how):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                if how == "null":
                    k["dur"] = None
                else:
                    del k["dur"]
        mutating(f"{how}-dur", nodur, n, counted("no 'dur'", at_least=n), compute_is(total() - n, "silent"),
                 collectives_are(6))
    for _ in range(4):
        n = rng.randint(1, 4)
        def noph(doc, r, n):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                del k["ph"]
        mutating("no-ph", noph, n, counted("no 'ph' field", at_least=n), compute_is(total() - n, "silent"),
                 collectives_are(6))
    for _ in range(5):
        n, copies = rng.randint(1, 3), rng.randint(1, 4)
        def dup(doc, r, n, copies=copies):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                i = doc["traceEvents"].index(k)
                doc["traceEvents"][i + 1:i + 1] = [json.loads(json.dumps(k)) for _ in range(copies)]
        mutating("duplicate", dup, n, counted("duplicate event", exactly=n * copies), compute_is(total(), "silent"),
                 collectives_are(6))
    for _ in range(5):
        hours = rng.choice([1, 1, 6, 24, -1, -3])
        target = rng.choice(["kernel", "cpu_op"])
        def jump(doc, r, n, hours=hours, target=target):  # noqa: ANN001
            ev = r.choice(B.events_of(doc, target, "gemm" if target == "kernel" else "aten::mm"))
            ev["ts"] += hours * 3600e6
        mutating(f"clock-jump-{target}", jump, 1, counted("clock jump"),
                 check("span stays the trace's own (under 10 s), not the jump", lambda d: d["span_ns"] < 10**10,
                       "silent"))
    for _ in range(4):
        n = rng.randint(1, 3)
        def early(doc, r, n):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                k["ts"] = B.launch_of(doc, k)["ts"] - round(r.uniform(5, 900), 3)
        mutating("before-launch", early, n, counted("before its launch", at_least=n), collectives_are(6))
    for value in [12345, 3.5, True, {"x": 1}, [1, 2], None]:
        n = rng.randint(1, 3)
        def badname(doc, r, n, value=value):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                k["name"] = value
        kept = [compute_is(total())] if isinstance(value, (int, float)) and not isinstance(value, bool) else []
        mutating(f"name-{type(value).__name__}", badname, n, counted("wrong type"), collectives_are(6), *kept)
    for value in ["correlation=5", [1, 2, 3], 7, True]:
        n = rng.randint(1, 3)
        def badargs(doc, r, n, value=value):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                k["args"] = value
        mutating(f"args-{type(value).__name__}", badargs, n, counted("wrong type"), collectives_are(6))
    for _ in range(3):
        n = rng.randint(1, 3)
        field = rng.choice(["ts", "dur"])
        def strtime(doc, r, n, field=field):  # noqa: ANN001
            for k in _gemms(doc, r, n):
                k[field] = str(k[field])
        mutating(f"{field}-text", strtime, n, counted("wrong type"), collectives_are(6))
    for field, value in [("ts", 1e30), ("dur", 1e300), ("ts", -5e15), ("dur", 2**64), ("ts", 2**80)]:
        def huge(doc, r, n, field=field, value=value):  # noqa: ANN001
            _gemms(doc, r, 1)[0][field] = value
        mutating(f"huge-{field}", huge, 1, anything_skipped(), collectives_are(6), compute_is(total() - 1))
    for field, value in [("External id", 2**80), ("correlation", -1), ("device", 2**63), ("stream", -(2**63))]:
        def hugeid(doc, r, n, field=field, value=value):  # noqa: ANN001
            _gemms(doc, r, 1)[0]["args"][field] = value
        mutating("huge-id", hugeid, 1, collectives_are(6))

    # ranks and world sizes from the file
    for value in [12345678901234567890, 98765432109876543210, 2**31, 2**63, -1, "1", 1.5, [1]]:
        r = sub_rng(rng)
        def badrank(docs, rr, value=value):  # noqa: ANN001
            docs[1]["distributedInfo"]["rank"] = value
        c.add(f"rank-{type(value).__name__}", lambda ctx, r=r, f=badrank: _job(ctx, r, f), [
            info(J, check("ranks stay within those present", lambda d: set(d["ranks"]) <= {0, 1} and d["ranks"]),
                 noted("rank"), expect="either", names=("rank-1.json",))])
    for value in [10**12, "two", -3, 0, 1.5, 10**30, 2**63 - 1, 1]:
        r = sub_rng(rng)
        def badworld(docs, rr, value=value):  # noqa: ANN001
            for d in docs.values():
                d["distributedInfo"]["world_size"] = value
        steps = [info(J, ranks_are([0, 1]), check("world size between the ranks present and 1,000,000",
                                                  lambda d: 2 <= (d.get("world_size") or 0) <= 1_000_000),
                      noted("world"), expect="either", names=("rank-0.json", "rank-1.json"))]
        if value == 10**12:
            steps.append(text("analyze", J, expect="either", names=("rank-0.json", "rank-1.json")))
        c.add(f"world-{type(value).__name__}", lambda ctx, r=r, f=badworld: _job(ctx, r, f), steps)
    for step in [2**63 - 1, 2**63, 2**64 + 7, 10**25]:
        r = sub_rng(rng)
        def bigstep(docs, rr, step=step):  # noqa: ANN001
            ann = B.events_of(docs[1], "user_annotation", "ProfilerStep#")
            rr.choice(ann)["name"] = f"ProfilerStep#{step}"
        c.add("step-huge", lambda ctx, r=r, f=bigstep: _job(ctx, r, f), [
            info(J, ranks_are([0, 1]), check("no step id past int64", lambda d: all(
                s < 2**63 for s in d.get("step_ids") or [])), noted("step"), expect="either",
                 names=("rank-1.json",))])

    # documents that are not what they claim
    for depth in [3000, 100_000]:
        r = sub_rng(rng)
        def deep(ctx, r=r, depth=depth):  # noqa: ANN001
            _job(ctx, r)
            p = ctx.inp / "job" / "rank-1.json"
            t = p.read_text()
            p.write_text(t.replace('"args": {"External id": 1,', f'"args": {{"deep": {B.deep_json(depth)}, '
                                   '"External id": 1,', 1))
        c.add("deep-json", deep, [info(J, ranks_are([0, 1]), anything_skipped(), expect="either",
                                      names=("rank-1.json",)),
                                 info(J, check("rank 0 kept", lambda d: 0 in d["ranks"]), noted("rank-1.json"),
                                      expect="either", names=("rank-1.json",), extra=("--skip-bad",))])
    for _ in range(4):
        r, gz = sub_rng(rng), rng.random() < 0.6
        frac = rng.uniform(0.2, 0.95)
        def cut(ctx, r=r, gz=gz, frac=frac):  # noqa: ANN001
            _job(ctx, r, gz=gz)
            p = ctx.inp / "job" / f"rank-1.json{'.gz' if gz else ''}"
            data = p.read_bytes()
            p.write_bytes(data[: int(len(data) * frac)])
        c.add("truncated-gz" if gz else "truncated-json", cut, [
            info(J, expect="error", names=("rank-1.json",)),
            info(J, ranks_are([0]), noted("rank-1.json"), extra=("--skip-bad",))])
    r = sub_rng(rng)
    def fifo(ctx, r=r):  # noqa: ANN001
        _job(ctx, r, ranks=(0,))
        os.mkfifo(ctx.inp / "job" / "rank-1.json")
    c.add("fifo", fifo, [info(J, ranks_are([0]), noted("rank-1.json"), timeout=40),
                         info(J + "/rank-1.json", expect="error", names=("rank-1.json",), timeout=40)])
    for target in ["/dev/zero", "/dev/urandom", "/proc/self/mem", "loop"]:
        r = sub_rng(rng)
        def devlink(ctx, r=r, target=target):  # noqa: ANN001
            _job(ctx, r, ranks=(0,))
            link = ctx.inp / "job" / "rank-1.json"
            if target == "loop":
                link.symlink_to(ctx.inp / "job" / "rank-2.json")
                (ctx.inp / "job" / "rank-2.json").symlink_to(link)
            else:
                link.symlink_to(target)
        c.add("symlink-device", devlink, [info(J, check("rank 0 kept", lambda d: 0 in d["ranks"]),
                                               noted("rank-1.json"), expect="either", names=("rank-1.json",),
                                               timeout=40),
                                          info(J + "/rank-1.json", expect="error", names=("rank-1.json",),
                                               timeout=40)])
    c.add("dev-zero-input", lambda ctx: None, [text("info", "/dev/zero", expect="error", names=("/dev/zero",),
                                                    timeout=40)])
    for content in [b"", b"null", b"[]", b"{}", b'{"traceEvents": {}}', b'{"traceEvents": [1, "x", null]}',
                    b"\xef\xbb\xbf" + b'{"traceEvents": []}', "{}".encode("utf-16"), bytes(range(256)) * 4,
                    b'{"traceEvents": [{"ph": "X", "ts": NaN, "dur": Infinity, "name": "k", "cat": "kernel"}]}']:
        def odd(ctx, content=content):  # noqa: ANN001
            (ctx.inp / "odd.json").write_bytes(content)
        c.add("odd-document", odd, [info("{in}/odd.json", expect="error", names=("odd.json",))])
    for _ in range(2):
        r = sub_rng(rng)
        def badutf8(ctx, r=r):  # noqa: ANN001
            _job(ctx, r)
            p = ctx.inp / "job" / "rank-1.json"
            p.write_bytes(p.read_bytes().replace(b'"aten::mm"', b'"aten::\xff\xfemm"', 2))
        c.add("invalid-utf8", badutf8, [info(J, check("rank 0 kept", lambda d: 0 in d["ranks"]),
                                             expect="either", names=("rank-1.json",))])
    for value in ["nccl", [], {"rank": [0]}, {"world_size": {"n": 2}}, None]:
        r = sub_rng(rng)
        def baddist(docs, rr, value=value):  # noqa: ANN001
            docs[1]["distributedInfo"] = value
        c.add("distributed-info-type", lambda ctx, r=r, f=baddist: _job(ctx, r, f), [
            info(J, check("rank 0 kept", lambda d: 0 in d["ranks"]), expect="either", names=("rank-1.json",))])
    for value in [-1, 10**30, "soon", 1.5e19]:
        r = sub_rng(rng)
        def badbase(docs, rr, value=value):  # noqa: ANN001
            docs[1]["baseTimeNanoseconds"] = value
        c.add("base-time", lambda ctx, r=r, f=badbase: _job(ctx, r, f), [
            info(J, check("rank 0 kept", lambda d: 0 in d["ranks"]), expect="either", names=("rank-1.json",))])
    for ph in ["Z", 5, "", None]:
        r = sub_rng(rng)
        n = rng.randint(1, 3)
        def badph(docs, rr, ph=ph, n=n):  # noqa: ANN001
            for k in _gemms(docs[0], rr, n):
                k["ph"] = ph
        c.add("odd-ph", lambda ctx, r=r, f=badph: _job(ctx, r, f), [
            info(J, ranks_are([0, 1]), anything_skipped(), compute_is(total() - n), collectives_are(6))])

    # control characters in names reach the terminal
    for where in ["kernel", "collective", "pg", "thread", "backend", "device", "step-annotation", "cpu_op"]:
        for _ in range(2):
            r, seq = sub_rng(rng), rng.choice(ANSI)
            def ansi(docs, rr, where=where, seq=seq):  # noqa: ANN001
                d = docs[rr.randint(0, 1)]
                if where == "kernel":
                    for k in _gemms(d, rr, 2):
                        k["name"] = f"gemm{seq}kernel"
                elif where == "collective":
                    for e in B.events_of(d, "cpu_op", "record_param_comms"):
                        e["args"]["Collective name"] = f"allreduce{seq}"
                elif where == "pg":
                    for e in B.events_of(d, "cpu_op", "record_param_comms"):
                        e["args"]["Process Group Description"] = f"default{seq}pg"
                elif where == "thread":
                    for e in d["traceEvents"]:
                        if e.get("ph") == "M":
                            e["args"]["name"] = f"python{seq}"
                elif where == "backend":
                    d["distributedInfo"]["backend"] = f"nccl{seq}"
                elif where == "device":
                    d["deviceProperties"][0]["name"] = f"NVIDIA{seq}H100"
                elif where == "step-annotation":
                    for e in B.events_of(d, "user_annotation", "nccl:"):
                        e["name"] = f"nccl:all_reduce{seq}"
                else:
                    for e in B.events_of(d, "cpu_op", "aten::mm")[:3]:
                        e["name"] = f"aten::mm{seq}"
            c.add(f"ansi-{where}", lambda ctx, r=r, f=ansi: _job(ctx, r, f),
                  [text("info", J), text("analyze", J)])
    return c.cases


# --------------------------------------------------------------------------------------------- compile logs
def _logs(ctx: Ctx, r: random.Random, frames: int, *, co_name: str = "forward", fail_reason: str | None = None,
          ranks: tuple[int, ...] = (0, 1)) -> dict[int, Path]:
    out = {}
    for rank in ranks:
        textlog, _ = B.compile_log(rank, frames, r, co_name=co_name if rank == 1 else "forward",
                                   fail_reason=fail_reason if rank == 1 else None)
        p = ctx.inp / "logs" / B.compile_log_name(rank, r)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textlog)
        out[rank] = p
    return out


def _rank0_compiles(n: int) -> Check:
    return Check(f"{n} compiles of rank 0 expected (good compiles lost)", lambda o: (o.data.get("compiles") or 0) >= n)


def compile_log_cases(seed: int) -> list[Case]:
    c = Corpus("compile_log", seed)
    rng = c.rng
    L = "{in}/logs"

    for _ in range(4):
        r, frames, frac = sub_rng(rng), rng.randint(2, 5), rng.uniform(0.3, 0.98)
        def cut(ctx, r=r, frames=frames, frac=frac):  # noqa: ANN001
            p = _logs(ctx, r, frames)[1]
            data = p.read_bytes()
            p.write_bytes(data[: int(len(data) * frac)])
        c.add("truncated", cut, [info(L, _rank0_compiles(frames), expect="ok")])
    for how in ["no-payload-lines", "garbage-payload", "payload-not-json", "payload-huge-line"]:
        r, frames = sub_rng(rng), rng.randint(2, 4)
        def payload(ctx, r=r, frames=frames, how=how):  # noqa: ANN001
            p = _logs(ctx, r, frames)[1]
            head = ('V1129 11:00:06.271000 4001 torch/_logging/_internal.py:1328] {"artifact": {"name": '
                    '"recompile_reasons", "encoding": "json"}, "rank": 1, "frame_id": 0, "frame_compile_id": 0, '
                    '"attempt": 0, "has_payload": "98696a967131e5fafe595f7ec2e727bc"}\n')
            body = {"no-payload-lines": "", "garbage-payload": "\t\x00\x01\x02{{{]]]\n\t" + "z" * 500 + "\n",
                    "payload-not-json": "\t[not json, 'x'\n", "payload-huge-line": "\t" + "x" * 20_000_000 + "\n"}
            p.write_text(p.read_text() + head + body[how])
        c.add(f"payload-{how}", payload, [info(L, compiles_at_least(2 * frames))])
    for field, value in [("attempt", '"0"'), ("frame_id", '{"a": 1}'), ("frame_compile_id", "[0]"),
                         ("rank", '"one"'), ("frame_id", str(2**70)), ("attempt", "-1")]:
        r, frames = sub_rng(rng), rng.randint(2, 4)
        def wrongtype(ctx, r=r, frames=frames, field=field, value=value):  # noqa: ANN001
            p = _logs(ctx, r, frames)[1]
            lines = p.read_text().split("\n")
            i = next(i for i, ln in enumerate(lines) if '"dynamo_start"' in ln)
            lines[i] = re.sub(rf'"{field}": [^,}}]+', f'"{field}": {value}', lines[i], count=1)
            p.write_text("\n".join(lines))
        c.add(f"field-{field}", wrongtype, [info(L, _rank0_compiles(frames), noted(field))])
    for _ in range(3):
        r, frames, n = sub_rng(rng), rng.randint(2, 4), rng.randint(1, 50)
        def unknown(ctx, r=r, frames=frames, n=n):  # noqa: ANN001
            p = _logs(ctx, r, frames)[1]
            extra = "".join(f'V1129 11:00:07.{i:06d} 4001 evil.py:1] {{"totally_new_event_{i % 3}": {{"x": {i}}}, '
                            f'"rank": 1, "frame_id": 0, "frame_compile_id": 0, "attempt": 0}}\n' for i in range(n))
            p.write_text(p.read_text() + extra)
        c.add("unknown-events", unknown, [info(L, compiles_at_least(2 * frames), noted("unknown"))])
    for where in ["co_name", "fail_reason", "recompile_reason"]:
        for _ in range(2):
            r, frames, seq = sub_rng(rng), rng.randint(2, 3), rng.choice(ANSI)
            def ansi(ctx, r=r, frames=frames, where=where, seq=seq):  # noqa: ANN001
                if where == "co_name":
                    _logs(ctx, r, frames, co_name=f"forward{seq}")
                elif where == "fail_reason":
                    _logs(ctx, r, frames, fail_reason=f"boom{seq}again")
                else:
                    p = _logs(ctx, r, frames)[1]
                    p.write_text(p.read_text() + (
                        'V1129 11:00:06.271000 4001 torch/_dynamo/guards.py:5400] {"artifact": {"name": '
                        '"recompile_reasons", "encoding": "json"}, "rank": 1, "frame_id": 0, "frame_compile_id": 1, '
                        '"attempt": 0, "has_payload": "85670e34879222f5ce94458f8e2980cb"}\n'
                        f'\t{json.dumps(["size mismatch" + seq])}\n'))
            c.add(f"ansi-{where}", ansi, [text("info", L), text("analyze", L)])
    r = sub_rng(rng)
    def big(ctx, r=r):  # noqa: ANN001
        """300,000 records in one rank's log: 100,000 frame compiles (start + metrics) and 100,000 strings."""
        p = ctx.inp / "logs" / B.compile_log_name(0, r)
        p.parent.mkdir(parents=True)
        with open(p, "w") as f:
            for i in range(100_000):
                f.write(f'V1129 11:00:06.{i % 10**6:06d} 4000 torch/_logging/structured.py:28] {{"str": '
                        f'["/work/m{i}.py", {i}]}}\n')
                f.write(f'V1129 11:00:06.{i % 10**6:06d} 4000 torch/_dynamo/convert_frame.py:303] {{"dynamo_start":'
                        f' {{"stack": [{{"line": 3, "name": "f", "filename": {i}}}]}}, "rank": 0, "frame_id": {i}, '
                        f'"frame_compile_id": 0, "attempt": 0}}\n')
                f.write(f'V1129 11:00:06.{i % 10**6:06d} 4000 torch/_dynamo/utils.py:2009] {{"compilation_metrics":'
                        f' {{"compile_id": "{i}/0", "co_name": "f", "co_filename": "/work/m{i}.py", '
                        f'"co_firstlineno": 3, "start_time": {1795950006 + i * 0.01}, '
                        f'"entire_frame_compile_time_s": 0.01, "fail_type": null}}, "rank": 0, "frame_id": {i}, '
                        f'"frame_compile_id": 0, "attempt": 0}}\n')
    c.add("300k-records", big, [info(L, compiles_at_least(100_000), timeout=60)], slow=True,
          note="a 60 s budget for 300,000 records")
    r = sub_rng(rng)
    def garbage(ctx, r=r):  # noqa: ANN001
        p = _logs(ctx, r, 3)[1]
        p.write_bytes(p.read_bytes() + bytes(r.getrandbits(8) for _ in range(20000)))
    c.add("binary-tail", garbage, [info(L, compiles_at_least(6), anything_skipped())])
    r = sub_rng(rng)
    def crlf(ctx, r=r):  # noqa: ANN001
        p = _logs(ctx, r, 3)[1]
        p.write_bytes(p.read_bytes().replace(b"\n", b"\r\n"))
    c.add("crlf", crlf, [info(L, compiles_at_least(6))])
    for field, value in [("entire_frame_compile_time_s", "1e308"), ("entire_frame_compile_time_s", "-5"),
                         ("entire_frame_compile_time_s", '"slow"'), ("start_time", "1e300"),
                         ("co_firstlineno", str(2**70)), ("guard_count", '"many"')]:
        r, frames = sub_rng(rng), rng.randint(2, 4)
        def metric(ctx, r=r, frames=frames, field=field, value=value):  # noqa: ANN001
            p = _logs(ctx, r, frames)[1]
            p.write_text(re.sub(rf'"{field}": [^,}}]+', f'"{field}": {value}', p.read_text(), count=1))
        c.add(f"metric-{field}", metric, [info(L, compiles_at_least(2 * frames), noted(field))])
    for depth in [2000, 50_000]:
        r = sub_rng(rng)
        def deep(ctx, r=r, depth=depth):  # noqa: ANN001
            p = _logs(ctx, r, 2)[1]
            p.write_text(p.read_text() + 'V1129 11:00:06.271000 4001 torch/_dynamo/utils.py:2009] '
                         f'{{"compilation_metrics": {B.deep_json(depth)}, "rank": 1, "frame_id": 9, '
                         '"frame_compile_id": 0, "attempt": 0}\n')
        c.add("deep-json", deep, [info(L, compiles_at_least(4), anything_skipped())])
    for what in ["empty", "prefix-only", "fifo", "dev-zero"]:
        r = sub_rng(rng)
        def oddfile(ctx, r=r, what=what):  # noqa: ANN001
            _logs(ctx, r, 3, ranks=(0,))
            p = ctx.inp / "logs" / "dedicated_log_torch_trace_rank_1_bad.log"
            if what == "empty":
                p.write_text("")
            elif what == "prefix-only":
                p.write_text("V1129 11:00:06.271000 4001 torch/_dynamo/utils.py:2009] \n" * 50)
            elif what == "fifo":
                os.mkfifo(p)
            else:
                p.symlink_to("/dev/zero")
        steps = [info(L, compiles_at_least(3), timeout=40)]
        if what in ("fifo", "dev-zero"):
            steps[0].checks.append(noted("rank_1_bad.log"))
        c.add(f"odd-file-{what}", oddfile, steps)
    for rank in [99999999999999999999, 2**31, -1]:
        r = sub_rng(rng)
        def bigrank(ctx, r=r, rank=rank):  # noqa: ANN001
            p = _logs(ctx, r, 2)[1]
            p.write_text(p.read_text().replace('"rank": 1,', f'"rank": {rank},'))
        c.add("rank-huge", bigrank, [info(L, compiles_at_least(2), expect="either",
                                          names=("dedicated_log_torch_trace_rank_1",))])
    r = sub_rng(rng)
    def rankname(ctx, r=r):  # noqa: ANN001
        p = _logs(ctx, r, 2)[1]
        p.rename(p.with_name("dedicated_log_torch_trace_rank_99999999999999999999_x.log"))
    c.add("rank-huge-name", rankname, [info(L, compiles_at_least(2), expect="either",
                                            names=("rank_99999999999999999999",))])
    return c.cases


# --------------------------------------------------------------------------------------------- run directories
def _run(ctx: Ctx, r: random.Random, ranks: tuple[int, ...] = (0, 1), **kw: Any) -> Path:
    root = ctx.inp / "run"
    B.run_dir(root, list(ranks), r, **kw)
    return root


def rundir_cases(seed: int) -> list[Case]:
    c = Corpus("rundir", seed)
    rng = c.rng
    R = "{in}/run"

    for dup in [("rank0", "rank00"), ("rank1", "rank01"), ("rank1", "rank001"), ("rank0", "rank000")]:
        r, traced_both = sub_rng(rng), rng.random() < 0.7
        def twin(ctx, r=r, dup=dup, traced_both=traced_both):  # noqa: ANN001
            root = _run(ctx, r)
            (root / dup[1]).mkdir()
            if traced_both:
                doc, _ = B.kineto_trace(int(dup[1][4:]), 2, r, steps=2, first_step=2)
                B.write_json(root / dup[1] / "trace" / "other.pt.trace.json", doc)
        named = dict(names=(dup[1],), error_re=rf"{dup[0]}(?!\d)")
        c.add("ambiguous-rank-folders", twin, [info(R, expect="error", **named),
                                               text("analyze", R, expect="error", **named)])
    for target in ["dir", "outside-itself", "file", "dangling", "dangling-deep"]:
        r = sub_rng(rng)
        def cachelink(ctx, r=r, target=target):  # noqa: ANN001
            root = _run(ctx, r)
            dest = {"dir": ctx.outside / "cache", "outside-itself": ctx.outside, "file": ctx.outside / "keep.txt",
                    "dangling": ctx.outside / "made-by-workbench", "dangling-deep": ctx.outside / "a" / "b"}[target]
            if target == "dir":
                dest.mkdir()
            (root / ".workbench").symlink_to(dest)
        c.add(f"cache-symlink-{target}", cachelink, [info(R, ranks_are([0, 1])), info(R, ranks_are([0, 1])),
                                                     Step(["ingest", R])])
    for what in ["truncated", "list", "null", "deep", "huge-sparse", "fifo", "dev-zero", "directory", "utf16"]:
        r = sub_rng(rng)
        def runjson(ctx, r=r, what=what):  # noqa: ANN001
            root = _run(ctx, r)
            p = root / "run.json"
            if what == "truncated":
                p.write_text(p.read_text()[:40])
            elif what == "list":
                p.write_text("[1, 2, 3]")
            elif what == "null":
                p.write_text("null")
            elif what == "deep":
                p.write_text(B.deep_json(100_000))
            elif what == "huge-sparse":
                p.unlink()
                B.sparse_file(p, 300 << 20, b'{"world_size": 2, "pad": "')
            elif what == "fifo":
                p.unlink()
                os.mkfifo(p)
            elif what == "dev-zero":
                p.unlink()
                p.symlink_to("/dev/zero")
            elif what == "directory":
                p.unlink()
                p.mkdir()
            else:
                p.write_bytes(p.read_text().encode("utf-16"))
        c.add(f"run-json-{what}", runjson, [info(R, ranks_are([0, 1]), noted("run.json"), expect="either",
                                                 names=("run.json",), timeout=40, max_rss_mb=1500)])
    for value in [10**12, "two", -1, 0, 1, 2**63, 10**6 + 1]:
        r = sub_rng(rng)
        def world(ctx, r=r, value=value):  # noqa: ANN001
            root = _run(ctx, r)
            d = json.loads((root / "run.json").read_text())
            d["world_size"] = value
            (root / "run.json").write_text(json.dumps(d))
        steps = [info(R, ranks_are([0, 1]), check("world size between the ranks present and 1,000,000",
                                                  lambda d: 2 <= (d.get("world_size") or 0) <= 1_000_000),
                      noted("world"), expect="either", names=("run.json",))]
        if value == 10**12:
            steps.append(text("analyze", R, expect="either", names=("run.json",)))
        c.add(f"run-json-world-{type(value).__name__}", world, steps)
    for what in ["step-int64-max", "step-2^64", "step-text", "negative-start", "end-before-start", "20-digit",
                 "broken-lines", "huge-line", "fifo", "dev-zero", "huge-sparse"]:
        r = sub_rng(rng)
        def steps_file(ctx, r=r, what=what):  # noqa: ANN001
            root = _run(ctx, r)
            p = root / "rank1" / "steps.jsonl"
            lines = p.read_text().splitlines()
            bad = json.loads(lines[-1])
            if what == "step-int64-max":
                bad["step"] = 2**63 - 1
            elif what == "step-2^64":
                bad["step"] = 2**64
            elif what == "step-text":
                bad["step"] = "seven"
            elif what == "negative-start":
                bad["start_ns"] = -(2**62)
            elif what == "end-before-start":
                bad["end_ns"] = bad["start_ns"] - 10**12
            elif what == "20-digit":
                bad["start_ns"] = 12345678901234567890123
            if what in ("fifo", "dev-zero", "huge-sparse"):
                p.unlink()
                if what == "fifo":
                    os.mkfifo(p)
                elif what == "dev-zero":
                    p.symlink_to("/dev/zero")
                else:
                    B.sparse_file(p, 300 << 20, "\n".join(lines).encode() + b"\n")
                return
            if what == "broken-lines":
                lines.insert(2, '{"step": 1, "start_')
                lines.insert(4, "\x00\x00\x00")
            elif what == "huge-line":
                lines.append(json.dumps({"step": 99, "junk": "x" * 30_000_000}))
            else:
                lines[-1] = json.dumps(bad)
            p.write_text("\n".join(lines) + "\n")
        c.add(f"steps-{what}", steps_file, [info(R, ranks_are([0, 1]), check(
            "no step id past int64", lambda d: all(s < 2**63 for s in d.get("step_ids") or [])),
            noted("steps.jsonl"), expect="either", names=("steps.jsonl",), timeout=40, max_rss_mb=1500)])
    for what in ["sparse-1GiB", "fifo", "dev-zero", "binary"]:
        r = sub_rng(rng)
        def fatal(ctx, r=r, what=what):  # noqa: ANN001
            root = _run(ctx, r)
            hang = root / "rank0" / "hang"
            hang.mkdir()
            (hang / "events.jsonl").write_text(json.dumps({"event": "start", "time_ns": B.BASE_NS}) + "\n")
            p = hang / "fatal.txt"
            if what == "sparse-1GiB":
                B.sparse_file(p, 1 << 30, b'Fatal Python error: Aborted\n\nCurrent thread 0x7f (most recent call '
                                          b'first):\n  File "/work/train.py", line 9 in step\n')
            elif what == "fifo":
                os.mkfifo(p)
            elif what == "dev-zero":
                p.symlink_to("/dev/zero")
            else:
                p.write_bytes(bytes(r.getrandbits(8) for _ in range(100_000)))
        c.add(f"fatal-{what}", fatal, [info(R, ranks_are([0, 1]), timeout=60, max_rss_mb=900),
                                       text("analyze", R, timeout=60, max_rss_mb=900)])
    for _ in range(2):
        r = sub_rng(rng)
        def ranklink(ctx, r=r):  # noqa: ANN001
            root = _run(ctx, r, ranks=(0,))
            B.run_dir(ctx.outside / "other", [1], r)
            (root / "rank1").symlink_to(ctx.outside / "other" / "rank1")
        c.add("rank-folder-symlink-outside", ranklink, [info(R, ranks_are([0]), noted("rank1"))])
    for name in ["rank99999999999999999999", "rank2147483648", "rank18446744073709551617"]:
        r = sub_rng(rng)
        def bigrankdir(ctx, r=r, name=name):  # noqa: ANN001
            root = _run(ctx, r)
            (root / name / "trace").mkdir(parents=True)
            doc, _ = B.kineto_trace(1, 2, r, steps=1)
            B.write_json(root / name / "trace" / "t.json", doc)
        c.add("rank-folder-huge", bigrankdir, [info(R, check("ranks 0 and 1 kept", lambda d: {0, 1} <= set(
            d["ranks"]) and all(x < 2**31 for x in d["ranks"])), noted(name), expect="either", names=(name,))])
    for what in ["truncated", "list", "huge-numbers", "deep"]:
        r = sub_rng(rng)
        def finger(ctx, r=r, what=what):  # noqa: ANN001
            root = _run(ctx, r)
            p = root / "rank1" / "fingerprint.json"
            p.write_text({"truncated": '{"rank": 1, "to', "list": "[]", "deep": B.deep_json(50_000),
                          "huge-numbers": json.dumps({"rank": 10**30, "world_size": 10**20, "env": {"A": 10**40}})
                          }[what])
        c.add(f"fingerprint-{what}", finger, [info(R, ranks_are([0, 1]), expect="either",
                                                   names=("fingerprint.json",))])
    for what in ["junk", "huge-numbers", "ansi"]:
        r = sub_rng(rng)
        def events(ctx, r=r, what=what):  # noqa: ANN001
            root = _run(ctx, r)
            hang = root / "rank1" / "hang"
            hang.mkdir()
            rows = {"junk": ["{{{", "[]", '{"event": 5}', '{"event": "exit", "reason": [1]}'],
                    "huge-numbers": [json.dumps({"event": "start", "time_ns": 10**40}),
                                     json.dumps({"event": "stalled", "step": 2**70})],
                    "ansi": [json.dumps({"event": "error", "error": "RuntimeErr\x1b[2J", "step": 1}),
                             json.dumps({"event": "exit", "reason": "sigterm\x1b]0;x\x07"})]}[what]
            (hang / "events.jsonl").write_text("\n".join(rows) + "\n")
            (hang / "heartbeat.jsonl").write_text(json.dumps({"time_ns": "late", "step": [1]}) + "\n")
        c.add(f"hang-events-{what}", events, [info(R, ranks_are([0, 1])), text("info", R), text("analyze", R)])
    r = sub_rng(rng)
    def tracefifo(ctx, r=r):  # noqa: ANN001
        root = _run(ctx, r)
        os.mkfifo(root / "rank1" / "trace" / "stuck.pt.trace.json")
        os.mkfifo(root / "rank1" / "compile" / "stuck.log")
        (root / "rank1" / "trace" / "loop").symlink_to(root / "rank1")
    c.add("fifos-inside", tracefifo, [info(R, ranks_are([0, 1]), noted("stuck"), timeout=40)])
    return c.cases


# --------------------------------------------------------------------------------------------- Flight Recorder
def _dumps(ctx: Ctx, r: random.Random, ranks: tuple[int, ...] = (0,), entries: int = 4) -> Path:
    d = ctx.inp / "dumps"
    d.mkdir(parents=True, exist_ok=True)
    for rank in ranks:
        (d / f"nccl_trace_rank_{rank}").write_bytes(B.pickle_bytes(B.fr_dump(rank, entries, r), 4))
    return d


def _rank0_last() -> Check:
    return check("rank 0's last collective kept", lambda d: any(
        x.get("rank") == 0 and x.get("last_collective") for x in d.get("ranks_last") or []))


def fr_cases(seed: int) -> list[Case]:
    c = Corpus("fr", seed)
    rng = c.rng
    D = "{in}/dumps"
    combos = [(door, proto, where) for door in B.DOORS for proto in (2, 3, 4, 5) for where in ("top", "entry", "pg")]
    for door, proto, where in rng.sample(combos, 18):
        r = sub_rng(rng)
        def evil(ctx, r=r, door=door, proto=proto, where=where):  # noqa: ANN001
            d = _dumps(ctx, r)
            (d / "nccl_trace_rank_1").write_bytes(B.evil_dump(door, ctx.marker, proto, 1, r, where=where))
        c.add(f"evil-pickle-p{proto}", evil, [info(D, _rank0_last(), noted("nccl_trace_rank_1")),
                                             text("analyze", D)], note=f"{door} in the {where}")
    for door in rng.sample(B.DOORS, 4):
        proto = rng.choice([0, 1])
        r = sub_rng(rng)
        def evil0(ctx, r=r, door=door, proto=proto):  # noqa: ANN001
            d = _dumps(ctx, r)
            (d / "nccl_trace_rank_1").write_bytes(B.evil_dump(door, ctx.marker, proto, 1, r, where="entry"))
        c.add(f"evil-pickle-p{proto}", evil0, [info(D, _rank0_last(), noted("protocol 0/1 pickle"))],
              note=door)
    for proto in (0, 1, 0, 1):
        r = sub_rng(rng)
        def old(ctx, r=r, proto=proto):  # noqa: ANN001
            d = _dumps(ctx, r)
            (d / "nccl_trace_rank_1").write_bytes(B.pickle_bytes(B.fr_dump(1, 3, r), proto))
        c.add(f"protocol-{proto}", old, [info(D, _rank0_last(), noted("protocol 0/1 pickle"))])
    for _ in range(4):
        r, levels, width = sub_rng(rng), rng.randint(7, 12), rng.randint(8, 12)
        def bomb(ctx, r=r, levels=levels, width=width):  # noqa: ANN001
            d = _dumps(ctx, r)
            (d / "nccl_trace_rank_1").write_bytes(B.shared_reference_bomb(levels, width))
        c.add("shared-reference-bomb", bomb, [info(D, _rank0_last(), noted("nccl_trace_rank_1"), timeout=60),
                                              text("analyze", D, timeout=60)], note=f"{width}^{levels} leaves")
    for depth, key in [(10_000, "input_sizes"), (200_000, "input_sizes"), (50_000, "frames"),
                       (100_000, "pg_status")]:
        r = sub_rng(rng)
        def deep(ctx, r=r, depth=depth, key=key):  # noqa: ANN001
            d = _dumps(ctx, r)
            (d / "nccl_trace_rank_1").write_bytes(B.deep_pickle(depth, key))
        c.add("deep-nesting", deep, [info(D, _rank0_last(), noted("nccl_trace_rank_1"), timeout=60),
                                     text("analyze", D, timeout=60)])
    for entries, list_len in [(200_000, 200), (200_000, 50)]:
        r = sub_rng(rng)
        def shared(ctx, r=r, entries=entries, list_len=list_len):  # noqa: ANN001
            d = _dumps(ctx, r)
            (d / "nccl_trace_rank_1").write_bytes(B.shared_list_dump(entries, list_len))
        c.add("200k-entries-one-list", shared, [info(D, _rank0_last(), timeout=60), text("analyze", D, timeout=60)],
              slow=True)
    for _ in range(3):
        r = sub_rng(rng)
        def jsondump(ctx, r=r):  # noqa: ANN001
            d = _dumps(ctx, r)
            (d / f"nccl_trace_rank_1{r.choice(['.json', ''])}").write_text(json.dumps(B.fr_dump(1, 3, r)))
        c.add("json-dump", jsondump, [info(D, _rank0_last(), check("rank 1 read from its .json dump", lambda d: any(
            x.get("rank") == 1 and x.get("last_collective") for x in d.get("ranks_last") or [])))])
    for _ in range(3):
        r, frac = sub_rng(rng), rng.uniform(0.1, 0.9)
        def cut(ctx, r=r, frac=frac):  # noqa: ANN001
            d = _dumps(ctx, r)
            data = B.pickle_bytes(B.fr_dump(1, 5, r), 4)
            (d / "nccl_trace_rank_1").write_bytes(data[: int(len(data) * frac)])
        c.add("truncated", cut, [info(D, _rank0_last(), noted("nccl_trace_rank_1"))])
    for what in ["empty", "random", "huge-sparse", "fifo", "dev-zero", "not-a-dict", "entries-dict"]:
        r = sub_rng(rng)
        def odd(ctx, r=r, what=what):  # noqa: ANN001
            d = _dumps(ctx, r)
            p = d / "nccl_trace_rank_1"
            if what == "empty":
                p.write_bytes(b"")
            elif what == "random":
                p.write_bytes(b"\x80\x04" + bytes(r.getrandbits(8) for _ in range(5000)))
            elif what == "huge-sparse":
                B.sparse_file(p, 600 << 20, b"\x80\x04\x95")
            elif what == "fifo":
                os.mkfifo(p)
            elif what == "dev-zero":
                p.symlink_to("/dev/zero")
            elif what == "not-a-dict":
                p.write_bytes(B.pickle_bytes([1, 2, 3], 4))
            else:
                p.write_bytes(B.pickle_bytes({"version": "2.4", "entries": {"a": 1}, "pg_config": 5}, 4))
        steps = [info(D, _rank0_last(), timeout=40, max_rss_mb=1200)]
        if what not in ("empty", "not-a-dict", "entries-dict"):
            steps[0].checks.append(noted("nccl_trace_rank_1"))
        c.add(f"odd-{what}", odd, steps)
    for field, value in [("time_created_ns", "soon"), ("collective_seq_id", 2**70), ("process_group", 5),
                         ("frames", "not a list"), ("input_sizes", {"a": [1]}), ("state", ["completed"]),
                         ("profiling_name", 17)]:
        r = sub_rng(rng)
        def badfield(ctx, r=r, field=field, value=value):  # noqa: ANN001
            d = _dumps(ctx, r)
            dump = B.fr_dump(1, 3, r)
            dump["entries"][-1][field] = value
            (d / "nccl_trace_rank_1").write_bytes(B.pickle_bytes(dump, 4))
        c.add(f"field-{field}", badfield, [info(D, _rank0_last()), text("analyze", D)])
    for where in ["profiling_name", "pg_desc", "frame"]:
        for _ in range(2):
            r, seq = sub_rng(rng), rng.choice(ANSI)
            def ansi(ctx, r=r, where=where, seq=seq):  # noqa: ANN001
                d = _dumps(ctx, r)
                dump = B.fr_dump(1, 3, r, last_state="started")
                e = dump["entries"][-1]
                if where == "profiling_name":
                    e["profiling_name"] = f"nccl:all_reduce{seq}"
                elif where == "pg_desc":
                    e["process_group"] = ["0", f"default{seq}"]
                else:
                    e["frames"][0]["name"] = f"train{seq}step"
                (d / "nccl_trace_rank_1").write_bytes(B.pickle_bytes(dump, 4))
            c.add(f"ansi-{where}", ansi, [text("info", D), text("analyze", D)])
    for door in rng.sample(B.DOORS, 2):
        r = sub_rng(rng)
        def inrun(ctx, r=r, door=door):  # noqa: ANN001
            root = _run(ctx, r)
            hang = root / "rank1" / "hang"
            hang.mkdir()
            (hang / "fr_trace_rank_1").write_bytes(B.evil_dump(door, ctx.marker, 4, 1, r))
        c.add("evil-pickle-in-run", inrun, [info("{in}/run", ranks_are([0, 1]), noted("fr_trace_rank_1")),
                                            text("analyze", "{in}/run")], note=door)
    return c.cases


# --------------------------------------------------------------------------------------------- compile configs
def _cfg(ctx: Ctx, body: str, name: str = "fixes.toml") -> Path:
    p = ctx.inp / name
    p.write_text(body.replace("{in}", str(ctx.inp)).replace("{outside}", str(ctx.outside))
                 .replace("{marker}", str(ctx.marker)))
    return p


def refused(key: str, path: str = "{in}/fixes.toml", *, accepted: str = "wrong", key_re: str | None = None,
            **kw: Any) -> Step:
    """``load_compile_config`` refuses with one line naming the file and ``key`` (or matching ``key_re``, where
    more than one key may rightly be blamed)."""
    return Step(["@driver", "load_config", path], expect="error", names=(Path(path).name,), accepted=accepted,
                error_has=() if key_re else (key,), error_re=key_re, **kw)


def collector(cfg: str = "{in}/fixes.toml", backend: str = "eager") -> Step:
    """``Collector(run, compile_config=cfg)`` around two compiled steps: refused with one line naming the file."""
    return Step(["@driver", "collector", "{in}/run", cfg, backend], expect="error", names=(Path(cfg).name,),
                timeout=240, memory_limit=8 << 30)


def config_cases(seed: int) -> list[Case]:
    c = Corpus("config", seed)
    rng = c.rng

    def cfg_case(kind: str, body: str, key: str, *, plant: str | None = None, more: tuple[Step, ...] = (),
                 accepted: str = "wrong", extra: Callable[[Ctx], None] | None = None, slow: bool = False,
                 key_re: str | None = None) -> None:
        def make(ctx: Ctx) -> None:
            if plant:
                B.planted_program(ctx.inp / "evil" / plant, ctx.marker)
            if extra:
                extra(ctx)
            _cfg(ctx, body)
        c.add(kind, make, [refused(key, accepted=accepted, key_re=key_re), *more], slow=slow)

    # the five doors of issue 35, each with a planted program that would create the marker
    cfg_case("override-env", '[env]\nTORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS = ">=0:cpp.cxx={in}/evil/cxx"\n',
             "TORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS", plant="cxx")
    cfg_case("override-env", '[env]\nTORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS = ">=0:cpp.cxx={in}/evil/cxx"\n',
             "TORCH_COMPILE_OVERRIDE_INDUCTOR_CONFIGS", plant="cxx", more=(collector(backend="inductor"),),
             slow=True)
    cfg_case("override-dynamo", '[dynamo]\ndebug_inductor_config_override = ">=0:cpp.cxx={in}/evil/cxx"\n',
             "debug_inductor_config_override", plant="cxx")
    cfg_case("override-dynamo", '[dynamo]\ndebug_inductor_config_override = "0-9:cpp.cxx={in}/evil/cxx"\n',
             "debug_inductor_config_override", plant="cxx", more=(collector(backend="inductor"),), slow=True)
    cfg_case("override-env-dynamo", '[env]\nTORCH_COMPILE_OVERRIDE_DYNAMO_CONFIGS = ">=0:recompile_limit=1"\n',
             "TORCH_COMPILE_OVERRIDE_DYNAMO_CONFIGS")
    cfg_case("cpp-march", '[inductor]\n"cpp.march" = "native -B{in}/evil/"\n', "cpp.march", plant="cc1plus")
    cfg_case("cpp-march", '[inductor]\n"cpp.march" = "native -B{in}/evil/"\n', "cpp.march", plant="cc1plus",
             more=(collector(backend="inductor"),), slow=True)
    cfg_case("cuda-opt-level", '[inductor]\n"cuda.compile_opt_level" = "-O3 -ccbin {in}/evil/nvcc"\n',
             "cuda.compile_opt_level", plant="nvcc")
    cfg_case("compile-options-march", '[compile]\noptions = {{ "cpp.march" = "native -B{in}/evil/" }}\n'
             .replace("{{", "{").replace("}}", "}"), "cpp.march", plant="cc1plus")

    def bundle(kind_key: list[tuple[str, str, bytes]]) -> Callable[[Ctx], None]:
        def extra(ctx: Ctx) -> None:
            arts = [(k, key.replace("{marker}", str(ctx.marker)), content.replace(b"{marker}", str(ctx.marker)
                                                                                  .encode()))
                    for k, key, content in kind_key]
            (ctx.inp / "compile_cache.bin").write_bytes(B.cache_bundle(arts))
            B.run_dir(ctx.inp / "run", [0], random.Random(1), traced=False, compile_frames=0)
        return extra
    absolute = [("autotune", "{marker}", b'{"XBLOCK": 64}')]
    cfg_case("cache-absolute-key", '[cache]\nload = "compile_cache.bin"\n', "[cache] load",
             extra=bundle(absolute), more=(collector(backend="none"),), key_re=r"(?i)\[cache\]|artifact|absolute")
    cfg_case("cache-absolute-key", '[cache]\nload = "compile_cache.bin"\n', "[cache] load",
             extra=bundle([("inductor", "../../../../../../../../..{marker}", b"x" * 64)]),
             more=(collector(backend="none"),), key_re=r"(?i)\[cache\]|artifact|absolute")

    def pgo(ctx: Ctx) -> None:
        payload = B.pickle_bytes(B.evil_call(rng_door, ctx.marker), 2)
        (ctx.inp / "compile_cache.bin").write_bytes(B.cache_bundle([("pgo", "hostilejob:None:", payload)]))
        B.run_dir(ctx.inp / "run", [0], random.Random(1), traced=False, compile_frames=0)
    rng_door = rng.choice(["os.system", "builtins.open", "subprocess.call"])
    cfg_case("cache-pgo", '[compiler]\njob_id = "hostilejob"\n[cache]\nload = "compile_cache.bin"\n',
             "pgo", extra=pgo, more=(collector(backend="eager"),), slow=True, key_re=r"(?i)pgo|job_id")
    cfg_case("cache-pgo", '[dynamo]\nautomatic_dynamic_local_pgo = true\n[compiler]\njob_id = "hostilejob"\n'
             '[cache]\nload = "compile_cache.bin"\n', "pgo", extra=pgo, key_re=r"(?i)pgo|job_id")

    # settings that load code, import modules, or write files anywhere
    for env, value in [("OMP_TOOL_LIBRARIES", "{outside}/evil.so"), ("TRITON_CACHE_MANAGER", "evilmod:Manager"),
                       ("TRITON_REMOTE_CACHE_BACKEND", "evilmod:Backend"), ("TORCHINDUCTOR_REDIS_HOST", "evil.example"),
                       ("TORCH_LOGS_OUT", "{outside}/log.txt"), ("TORCH_TRACE", "{outside}/trace"),
                       ("CUDNN_LOGDEST_DBG", "{outside}/cudnn.log"), ("TORCHINDUCTOR_WORKER_LOGPATH", "{outside}/w"),
                       ("LD_PRELOAD", "{outside}/evil.so"), ("PYTHONPATH", "{outside}"), ("NCCL_NET_PLUGIN", "evil"),
                       ("TORCHINDUCTOR_CACHE_DIR", "{outside}"), ("TRITON_HOME", "{outside}"),
                       ("CUDA_CACHE_PATH", "{outside}"), ("TORCH_EXTENSIONS_DIR", "{outside}")]:
        cfg_case("env-door", f'[env]\n{env} = "{value}"\n', env)
    for section, key, value in [("inductor", "torchinductor_worker_logpath", '"{outside}/w.log"'),
                                ("inductor", "fx_graph_remote_cache", "true"),
                                ("inductor", "autotune_remote_cache", "true"),
                                ("inductor", "cpp.cxx", '"{in}/evil/cxx"'),
                                ("inductor", "cpp.extra_flags", '"-B{in}/evil/"'),
                                ("inductor", "post_grad_custom_pass", '"evilmod:run"'),
                                ("inductor", "trace.debug_dir", '"{outside}"'),
                                ("dynamo", "debug_dynamo_config_override", '">=0:suppress_errors=True"'),
                                ("dynamo", "reorderable_logging_functions", '["os.system"]'),
                                ("compile", "backend", '"evilmod.backend"')]:
        cfg_case("setting-door", f'[{section}]\n"{key}" = {value}\n', key)
    cfg_case("allow-unsafe-in-file", 'allow_unsafe = true\n[env]\nLD_PRELOAD = "{outside}/evil.so"\n',
             "allow_unsafe")
    cfg_case("allow-unsafe-in-file", 'allow_unsafe = true\n[dynamo]\nrecompile_limit = 8\n', "allow_unsafe")

    def cachelink(ctx: Ctx) -> None:
        (ctx.outside / "secret.bin").write_bytes(B.cache_bundle([("autotune", "x", b"{}")]))
        (ctx.inp / "compile_cache.bin").symlink_to(ctx.outside / "secret.bin")
    cfg_case("cache-symlink", '[cache]\nload = "compile_cache.bin"\n', "[cache] load", extra=cachelink,
             key_re=r"(?i)\[cache\] load|\bload\b")

    def dirlink(ctx: Ctx) -> None:
        (ctx.inp / "sub").symlink_to(ctx.outside)
    cfg_case("cache-symlink", '[cache]\nsave = "sub/compile_cache.bin"\nsave_after_step = 1\n', "[cache] save",
             extra=dirlink, key_re=r"(?i)\[cache\] save|\bsave\b")

    # files that are not configs
    def special(ctx: Ctx, what: str) -> None:
        p = ctx.inp / "fixes.toml"
        if what == "fifo":
            os.mkfifo(p)
        elif what == "dev-zero":
            p.symlink_to("/dev/zero")
        elif what == "huge":
            p.write_text("# " + "x" * (5 << 20) + "\n[dynamo]\nrecompile_limit = 8\n")
        elif what == "huge-sparse":
            B.sparse_file(p, 2 << 30, b"[dynamo]\nrecompile_limit = 8\n# ")
    for what in ["fifo", "dev-zero", "huge", "huge-sparse"]:
        c.add(f"file-{what}", lambda ctx, what=what: special(ctx, what),
              [refused("fixes.toml", timeout=30, max_rss_mb=600)])
    c.add("file-dev-zero-path", lambda ctx: None, [refused("/dev/zero", path="/dev/zero", timeout=30)])
    c.add("file-fifo-collector", lambda ctx: (special(ctx, "fifo"), B.run_dir(ctx.inp / "run", [0], random.Random(
        1), traced=False, compile_frames=0)), [collector(backend="none")])

    # unknown keys, wrong types, out-of-range values
    for body, key in [("[dynamo]\nno_such_key = 1\n", "no_such_key"), ("[nonsense]\nx = 1\n", "nonsense"),
                      ('[inductor]\n"triton.not_a_key" = true\n', "triton.not_a_key"),
                      ('[dynamo]\nrecompile_limit = "8"\n', "recompile_limit"),
                      ("[dynamo]\nrecompile_limit = 8.5\n", "recompile_limit"),
                      ("[dynamo]\nrecompile_limit = true\n", "recompile_limit"),
                      ("[dynamo]\nrecompile_limit = [8]\n", "recompile_limit"),
                      ('[compile]\nfullgraph = "yes"\n', "fullgraph"),
                      ('[compile]\nmode = "max-autotune; rm -rf /"\n', "mode"),
                      ("[dynamo]\ncache_size_limit = 99999999999999\n", "cache_size_limit"),
                      ('[env]\nTORCH_LOGS = "a\\nb"\n', "TORCH_LOGS"),
                      ('[env]\n"TORCH_X\\u001b" = "1"\n', "TORCH_X"),
                      ("[dynamo]\n" + "a = " + "[" * 3000 + "]" * 3000 + "\n", "fixes.toml"),
                      ("[dynamo\n", "fixes.toml")]:
        cfg_case("bad-key", body, key)
    for value in [-1, -5, 0, -(2**63)]:
        cfg_case("recompile-limit-out-of-range", f"[dynamo]\nrecompile_limit = {value}\n", "recompile_limit",
                 accepted="silent")
    c.add("not-utf8", lambda ctx: (ctx.inp / "fixes.toml").write_bytes(b"[dynamo]\nrecompile_limit = 8\n# \xff\xfe\n"),
          [refused("fixes.toml")])

    # what a recommender writes must still load (the allowlist is not a wall)
    for body in ["[dynamo]\nrecompile_limit = 16\n", "[inductor]\nfx_graph_cache = true\n",
                 "[compiler]\ndynamic_sources = \"L['x']\"\n", "[dynamo]\ncapture_scalar_outputs = true\n"]:
        c.add("valid", lambda ctx, body=body: _cfg(ctx, body),
              [Step(["@driver", "load_config", "{in}/fixes.toml"], expect="ok", names=("fixes.toml",))])
    return c.cases


# --------------------------------------------------------------------------------------------- diffs
def _diff_pair(ctx: Ctx, r: random.Random, damage: Callable[[Path, random.Random], None]) -> None:
    for side in ("before", "after"):
        for rank in (0, 1):
            doc, _ = B.kineto_trace(rank, 2, r, steps=4)
            B.write_json(ctx.inp / side / f"rank-{rank}.json.gz", doc, gz=True)
    damage(ctx.inp / "after", r)


def _flags_problem(bad: str) -> Check:
    """The diff is not silently comparable: it says not comparable, or names the damaged file."""
    def ok(o: Outcome) -> bool:
        level = str(((o.data or {}).get("comparability") or {}).get("level", "")) if o.data is not None else ""
        shown = o.stdout + o.stderr
        return (o.data is not None and level and level != "comparable") or bad in shown or (
            o.data is None and "Comparability: comparable" not in shown)
    return Check(f"says 'comparable' without a word about {bad}", ok, "silent")


def diff_cases(seed: int) -> list[Case]:
    c = Corpus("diff", seed)
    rng = c.rng

    def diff_case(kind: str, damage: Callable[[Path, random.Random], None], bad: str) -> None:
        r = sub_rng(rng)
        steps = [Step(["diff", "{in}/before", "{in}/after", "--json"], expect="either", names=(bad,),
                      json_out=True, checks=[_flags_problem(bad)]),
                 Step(["diff", "{in}/before", "{in}/after"], expect="either", names=(bad,),
                      checks=[_flags_problem(bad)])]
        c.add(kind, lambda ctx: _diff_pair(ctx, r, damage), steps)

    for _ in range(3):
        frac = rng.uniform(0.2, 0.9)
        def cut(after, r, frac=frac):  # noqa: ANN001
            p = after / "rank-1.json.gz"
            data = p.read_bytes()
            p.write_bytes(data[: int(len(data) * frac)])
        diff_case("truncated-after", cut, "rank-1.json.gz")
    for _ in range(2):
        def cutjson(after, r):  # noqa: ANN001
            p = after / "rank-1.json.gz"
            raw = gzip.decompress(p.read_bytes())
            p.unlink()
            (after / "rank-1.json").write_bytes(raw[: len(raw) // 2])
        diff_case("truncated-json-after", cutjson, "rank-1.json")
    def gone(after, r):  # noqa: ANN001
        (after / "rank-1.json.gz").unlink()
        os.mkfifo(after / "rank-1.json")
    diff_case("fifo-after", gone, "rank-1.json")
    def devzero(after, r):  # noqa: ANN001
        (after / "rank-1.json.gz").unlink()
        (after / "rank-1.json").symlink_to("/dev/zero")
    diff_case("dev-zero-after", devzero, "rank-1.json")
    def cutbefore(after, r):  # noqa: ANN001
        p = after.parent / "before" / "rank-0.json.gz"
        p.write_bytes(p.read_bytes()[:300])
    diff_case("truncated-before", cutbefore, "rank-0.json.gz")
    for value in [10**12, "two", 12345678901234567890]:
        r = sub_rng(rng)
        def world(ctx, r=r, value=value):  # noqa: ANN001
            def dmg(after, rr):  # noqa: ANN001
                p = after / "rank-1.json.gz"
                doc = json.loads(gzip.decompress(p.read_bytes()))
                doc["distributedInfo"]["world_size" if value != 12345678901234567890 else "rank"] = value
                p.write_bytes(gzip.compress(json.dumps(doc).encode()))
            _diff_pair(ctx, r, dmg)
        c.add("odd-meta-after", world, [Step(["diff", "{in}/before", "{in}/after", "--json"], expect="either",
                                             names=("rank-1.json.gz",), json_out=True)])
    for _ in range(3):
        r, seq = sub_rng(rng), rng.choice(ANSI)
        def ansi(ctx, r=r, seq=seq):  # noqa: ANN001
            def dmg(after, rr):  # noqa: ANN001
                p = after / "rank-0.json.gz"
                doc = json.loads(gzip.decompress(p.read_bytes()))
                for k in B.events_of(doc, "kernel", "gemm"):
                    k["name"] = f"gemm{seq}{rr.randint(0, 3)}"
                p.write_bytes(gzip.compress(json.dumps(doc).encode()))
            _diff_pair(ctx, r, dmg)
        c.add("ansi-kernel-after", ansi, [Step(["diff", "{in}/before", "{in}/after"])])
    for target in ["/dev/zero", "fifo"]:
        r = sub_rng(rng)
        def side(ctx, r=r, target=target):  # noqa: ANN001
            _diff_pair(ctx, r, lambda a, rr: None)
            if target == "fifo":
                os.mkfifo(ctx.inp / "after.json")
            else:
                (ctx.inp / "after.json").symlink_to(target)
        c.add("after-not-a-file", side, [Step(["diff", "{in}/before", "{in}/after.json"], expect="error",
                                              names=("after.json",), timeout=40)])
    for _ in range(2):
        r, n = sub_rng(rng), rng.randint(2, 5)
        def negdur(ctx, r=r, n=n):  # noqa: ANN001
            def dmg(after, rr):  # noqa: ANN001
                p = after / "rank-1.json.gz"
                doc = json.loads(gzip.decompress(p.read_bytes()))
                for k in _gemms(doc, rr, n):
                    k["dur"] = -1000.0
                p.write_bytes(gzip.compress(json.dumps(doc).encode()))
            _diff_pair(ctx, r, dmg)
        c.add("negative-dur-after", negdur, [Step(["diff", "{in}/before", "{in}/after", "--json"], json_out=True)])
    return c.cases


# --------------------------------------------------------------------------------------------- app requests
def _status(code_ok: Callable[[int], bool], what: str) -> Check:
    return check(what, lambda d: code_ok(int(d["status"])))


def app_cases(seed: int) -> list[Case]:
    c = Corpus("app", seed)
    rng = c.rng

    def runs(ctx: Ctx) -> None:
        B.run_dir(ctx.inp / "runs" / "exp1", [0, 1], random.Random(7), compile_frames=1)

    def request(kind: str, method: str, host: str, origin: str, want_refused: bool, url: str = "/") -> None:
        argv = ["@driver", "app_request", "{in}/runs", method,
                url if method == "GET" else "/_dash-update-component", host, origin, "8050"]
        chk = (_status(lambda s: s == 403, f"{method} with Host {host!r} Origin {origin!r} answered, not refused")
               if want_refused else _status(lambda s: s != 403, "same-origin request refused"))
        c.add(kind, runs, [Step(argv, json_out=True, checks=[chk], timeout=90)])

    for port in rng.sample([80, 443, 3000, 5173, 8000, 8051, 8080, 8888, 9999, 1234, 65535], 5):
        request("origin-other-port", "POST", "127.0.0.1:8050", f"http://127.0.0.1:{port}", True)
    request("origin-other-port", "POST", "localhost:8050", "http://localhost:8051", True)
    request("origin-no-port", "POST", "127.0.0.1:8050", "http://127.0.0.1", True)
    request("origin-other-scheme", "POST", "127.0.0.1:8050", "https://127.0.0.1:8050", True)
    request("origin-null", "POST", "127.0.0.1:8050", "null", True)
    request("origin-evil-host", "POST", "127.0.0.1:8050", "http://evil.example:8050", True)
    request("origin-same", "POST", "127.0.0.1:8050", "http://127.0.0.1:8050", False)
    for host in ["evil.example:8050", "127.0.0.1.evil.example:8050", "localhost.evil.example", "evil.example",
                 "127.0.0.1@evil.example:8050"]:
        request("host-header", "GET", host, "-", True)
    request("host-same", "GET", "127.0.0.1:8050", "-", False)

    def outside_run(ctx: Ctx, how: str) -> None:
        runs(ctx)
        B.run_dir(ctx.outside / "victim", [0, 1], random.Random(8), compile_frames=1)
        if how == "run-link":
            (ctx.inp / "runs" / "linked").symlink_to(ctx.outside / "victim")
        elif how == "group-link":
            (ctx.inp / "runs" / "group").mkdir()
            (ctx.inp / "runs" / "group" / "linked").symlink_to(ctx.outside / "victim")
        elif how == "parent-link":
            (ctx.inp / "runs" / "up").symlink_to(ctx.outside)

    def inside(o: Outcome) -> bool:
        root = o.data["root"]
        return all(e["real"] == root or e["real"].startswith(root + os.sep) for e in o.data["listed"])

    for how in ["run-link", "group-link", "parent-link"]:
        c.add(f"symlinked-run-{how}", lambda ctx, how=how: outside_run(ctx, how), [
            Step(["@driver", "app_store", "{in}/runs"], json_out=True, timeout=90,
                 checks=[Check("lists a run whose real path leaves the roots", inside)])])
    for rid in ["../outside", "..", "../../etc", "/etc", "exp1/../../outside", "exp1\x00", "%2e%2e%2foutside",
                "exp1/../exp1"]:
        c.add("run-id-traversal", lambda ctx: outside_run(ctx, "none"), [
            Step(["@driver", "app_store", "{in}/runs", json.dumps(rid)], json_out=True, timeout=90,
                 checks=[check(f"Apply took run id {rid!r}", lambda d, rid=rid: str(
                     d["applied"].get(rid, "refused")).startswith("refused"))])])
    return c.cases


# --------------------------------------------------------------------------------------------- the corpus
GENERATORS: dict[str, Callable[[int], list[Case]]] = {
    "kineto": kineto_cases, "compile_log": compile_log_cases, "rundir": rundir_cases, "fr": fr_cases,
    "config": config_cases, "diff": diff_cases, "app": app_cases,
}


def build_corpus(seed: int = 0, only: str | None = None) -> list[Case]:
    """Every case of the corpus of ``seed`` (of one class with ``only``)."""
    out: list[Case] = []
    for cls, gen in GENERATORS.items():
        if only is None or only == cls:
            out.extend(gen(seed))
    return out


def fast_subset(cases: list[Case]) -> list[Case]:
    """About 40 cases for CI, chosen by rule across every class: the first variant of each kind (slow ones left
    out), evenly spaced up to the class's :data:`FAST_QUOTA`."""
    out: list[Case] = []
    for cls, quota in FAST_QUOTA.items():
        firsts = [c for c in cases if c.cls == cls and c.id.endswith("-0") and not c.slow]
        step = max(1, len(firsts) / quota)
        out.extend(firsts[int(i * step)] for i in range(min(quota, len(firsts))))
    return out
