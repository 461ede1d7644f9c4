"""How fast the web UI is, measured in a real headless browser (Debian's chromium via Playwright).

Prints, for every page on every sample run: the time from navigation until the page has rendered with all its
figures ("ready"), cold (first visit: the run is opened and analysed) and warm (cached in the server process).
Then, on a synthetic run of 1M kernels (8 ranks × 2 streams): the first Timeline draw and the zoom round trip
(relayout in the browser → server reduction → new figure drawn), for windows from the whole run down to a few
hundred kernels.

Before the browser: the server's answer to each page's Dash callback over HTTP (what the browser waits for before
it draws), first and warm, and its size (``--server-only`` stops there).

First, the app's first load: a freshly started app (its background thread analysing the runs, as ``workbench app``
does) opened in a new browser — the landing page with the run list.

Targets (issue 16): every page ≤ 1 s warm, the first load ≤ 2 s; a Timeline zoom round trip ≤ 1 s on 1M events.
The machine's load average is printed before and after: every wall-clock figure scales with it; the CPU seconds of
a warm load (the server's and chromium's together) much less, so compare those across loaded machines.

    python bench/app_speed.py [RUN_ROOT ...] [--runs a,b] [--kernels 1000000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "app"))

from app_synthetic import synthetic_run  # noqa: E402
from browser_util import READY_JS, goto_ready  # noqa: E402
from conftest import Served  # noqa: E402  (tests/app/conftest.py)


def _root_conftest():
    """tests/conftest.py (where the chromium path and flags are defined), by path: its name clashes."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_tests_conftest", REPO / "tests" / "conftest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


CHROMIUM, CHROMIUM_ARGS = _root_conftest().CHROMIUM, _root_conftest().CHROMIUM_ARGS

from workbench.app.main import PAGES, create_app  # noqa: E402
from workbench.app.store import RunStore, find_runs  # noqa: E402

META_JS = ("() => { const m = document.querySelector('#timeline-graph .js-plotly-plot').layout.meta;"
           " return {exact: m.exact, visible_kernels: m.visible_kernels, spans: m.spans}; }")


def cpu_seconds() -> float:
    """CPU seconds used so far by this process (the app's server threads) and every child (chromium)."""
    import psutil

    me = psutil.Process()
    t = me.cpu_times()
    total = t.user + t.system
    for c in me.children(recursive=True):
        try:
            ct = c.cpu_times()
            total += ct.user + ct.system
        except psutil.Error:
            pass
    return total


def first_load(browser, roots: list[Path]) -> float:
    """Seconds from opening a freshly started app in a new browser to the landing page drawn."""
    app = create_app(roots)
    served = Served(app)
    try:
        ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = ctx.new_page()
        secs = goto_ready(page, served.url("/"), "overview", timeout_ms=120_000)
        ctx.close()
    finally:
        served.close()
    return secs


def page_timings(browser, roots: list[Path] | None, repeats: int = 3, store: RunStore | None = None,
                 only: list[str] | None = None) -> list[dict]:
    app = create_app(roots, store=store, background=store is None)
    served = Served(app)
    rows = []
    if store is None:  # warm means every cached result is there: wait for the background run-list analysis
        from workbench.app import compute

        t = time.perf_counter()
        for rid in app.workbench_store.ids():
            compute.headline(app.workbench_store, rid)
        print(f"  (the run list's background analysis of {len(app.workbench_store.ids())} runs: "
              f"{time.perf_counter() - t:.1f} s, before any page is timed)", flush=True)
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        ids = [r for r in app.workbench_store.ids() if not only or r in only]
        for i, rid in enumerate(ids):
            for p in PAGES:
                other = f"&other={ids[(i + 1) % len(ids)]}" if p.KEY == "compare" and len(ids) > 1 else ""
                url = served.url(f"{p.PATH}?run={rid}{other}")
                cold = goto_ready(page, url, p.KEY, timeout_ms=120_000)
                warm, cpu = [], []
                for _ in range(repeats):
                    c0 = cpu_seconds()
                    warm.append(goto_ready(page, url, p.KEY))
                    cpu.append(cpu_seconds() - c0)
                # in-app navigation: click the page's link in the header from another page (no reload)
                navs = []
                for _ in range(repeats):
                    start = PAGES[1] if p is PAGES[0] else PAGES[0]
                    goto_ready(page, served.url(f"{start.PATH}?run={rid}{other}"), start.KEY)
                    t = time.perf_counter()
                    page.click(f"#nav-{p.KEY}")
                    page.wait_for_function(READY_JS, arg=p.KEY, timeout=60_000, polling=20)
                    navs.append(time.perf_counter() - t)
                rows.append({"run": rid, "page": p.NAME, "cold_s": round(cold, 3),
                             "warm_s": round(statistics.median(warm), 3), "warm_cpu_s": round(statistics.median(cpu), 3),
                             "nav_s": round(statistics.median(navs), 3)})
                print(f"  {rid:<24} {p.NAME:<22} cold {cold:6.2f} s   warm {statistics.median(warm):6.2f} s"
                      f" ({statistics.median(cpu):5.2f} CPU s)   in-app {statistics.median(navs):6.2f} s", flush=True)
        page.close()
    finally:
        served.close()
    return rows


def _route_request(app, path: str, rid: str, other: str | None) -> bytes:
    """The Dash request a browser sends to draw page ``path`` of run ``rid`` (the router callback, by HTTP)."""
    key = next(k for k in app.callback_map if ".page.children" in k or k.startswith("page.children"))
    outputs = [{"id": o.split(".")[0], "property": o.split(".")[1]} for o in key.strip(".").split("...")]
    search = f"?run={rid}" + (f"&other={other}" if other else "")
    return json.dumps({
        "output": key, "outputs": outputs, "changedPropIds": ["url.pathname"], "state": [],
        "inputs": [{"id": "url", "property": "pathname", "value": path},
                   {"id": "url", "property": "search", "value": search},
                   {"id": "run-select", "property": "value", "value": rid}],
    }).encode()


def server_timings(roots: list[Path], repeats: int = 3, only: list[str] | None = None) -> list[dict]:
    """Per run and page: the server's answer to the page's Dash callback, by HTTP (no browser): the first (the run
    opened and analysed there) and the median of ``repeats`` warm ones, wall seconds and the bytes sent."""
    import urllib.request

    app = create_app(roots, background=False)
    served = Served(app)
    rows = []
    try:
        ids = [r for r in app.workbench_store.ids() if not only or r in only]

        def post(body: bytes) -> tuple[float, int]:
            req = urllib.request.Request(served.url("/_dash-update-component"), data=body,
                                         headers={"Content-Type": "application/json"})
            t = time.perf_counter()
            with urllib.request.urlopen(req, timeout=600) as res:
                n = len(res.read())
            return time.perf_counter() - t, n

        for i, rid in enumerate(ids):
            for p in PAGES:
                other = ids[(i + 1) % len(ids)] if p.KEY == "compare" and len(ids) > 1 else None
                body = _route_request(app, p.PATH, rid, other)
                first, size = post(body)
                warm = statistics.median(post(body)[0] for _ in range(repeats))
                rows.append({"run": rid, "page": p.NAME, "first_s": round(first, 3), "warm_s": round(warm, 3),
                             "bytes": size})
                print(f"  {rid:<24} {p.NAME:<22} first {first:6.2f} s   warm {warm:6.3f} s   {size / 1e3:7.0f} kB",
                      flush=True)
    finally:
        served.close()
    return rows


def zoom_timings(browser, n: int) -> dict:
    t = time.perf_counter()
    run = synthetic_run(n)
    build_s = time.perf_counter() - t
    app = create_app(store=RunStore.preloaded({"synthetic": run}), background=False)
    served = Served(app)
    out: dict = {"kernels": n, "build_s": round(build_s, 2), "zooms": []}
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        first = goto_ready(page, served.url("/timeline?run=synthetic"), "timeline", timeout_ms=120_000)
        first_warm = goto_ready(page, served.url("/timeline?run=synthetic"), "timeline", timeout_ms=120_000)
        out["first_draw_s"] = round(first, 3)
        out["first_draw_warm_s"] = round(first_warm, 3)
        x0, x1 = page.evaluate("() => document.querySelector('#timeline-graph .js-plotly-plot').layout.xaxis.range")
        print(f"  first draw {first:.2f} s (warm {first_warm:.2f} s), {page.evaluate(META_JS)}", flush=True)
        span = x1 - x0
        for frac in (0.5, 0.1, 0.01, 0.001, 0.0002, 1.0):
            a = x0 + span * 0.3
            b = a + span * frac if frac < 1 else x1
            a = x0 if frac == 1.0 else a
            before = page.text_content("#timeline-info")
            t = time.perf_counter()
            page.evaluate("([a, b]) => Plotly.relayout(document.querySelector('#timeline-graph .js-plotly-plot'),"
                          " {'xaxis.range[0]': a, 'xaxis.range[1]': b})", [a, b])
            # done when the server's new figure and caption have arrived and nothing is loading
            page.wait_for_function(
                "(before) => { const info = document.getElementById('timeline-info').textContent;"
                " return info !== before && !document.querySelector('[data-dash-is-loading=\"true\"]'); }",
                arg=before, timeout=60_000, polling=10)
            secs = time.perf_counter() - t
            meta = page.evaluate(META_JS)
            size = page.evaluate("() => JSON.stringify(document.querySelector('#timeline-graph .js-plotly-plot').data).length")
            row = {"window_fraction": frac, "round_trip_s": round(secs, 3), **meta, "figure_json_bytes": size}
            out["zooms"].append(row)
            print(f"  zoom to {frac:>7.2%} of the run: {secs:5.2f} s  {meta}  figure {size / 1e3:.0f} kB", flush=True)
        page.close()
    finally:
        served.close()
    return out


def summary_table(result: dict) -> str:
    """A markdown table to paste: per page, each run's warm reload (wall s / CPU s) and in-app navigation (wall s),
    with the first load and the load average above it."""
    pages = result["pages"]
    runs = list(dict.fromkeys(r["run"] for r in pages))
    names = list(dict.fromkeys(r["page"] for r in pages))
    by = {(r["run"], r["page"]): r for r in pages}
    la = result["loadavg_before"][0], result.get("loadavg_after", result["loadavg_before"])[0]
    lines = [f"first load {result['first_load_s']:.2f} s (target 2 s); load average {la[0]:.1f} before, {la[1]:.1f} "
             f"after, {result['cpus']} CPUs; warm reload wall s / CPU s (server + chromium) · in-app wall s (target 1 s)",
             "", "| page | " + " | ".join(runs) + " |", "| --- |" + " --- |" * len(runs)]
    for n in names:
        cells = []
        for rid in runs:
            r = by.get((rid, n))
            cells.append("–" if r is None else f"{r['warm_s']:.2f} / {r['warm_cpu_s']:.2f} · {r['nav_s']:.2f}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("roots", nargs="*", type=Path, default=[REPO / "sample_traces"])
    ap.add_argument("--kernels", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--copy", action="store_true", help="add a copy of the first run (for Compare)")
    ap.add_argument("--runs", default="", help="comma-separated run ids to time (default: every run found)")
    ap.add_argument("--server-only", action="store_true",
                    help="only the server's answers to each page's Dash callback, by HTTP (no browser)")
    args = ap.parse_args()

    import logging

    from playwright.sync_api import sync_playwright

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    import os

    result: dict = {"loadavg_before": os.getloadavg(), "cpus": os.cpu_count()}
    print(f"load average {result['loadavg_before'][0]:.1f} on {result['cpus']} CPUs (timings scale with it)")
    only = [r for r in args.runs.split(",") if r]
    print("the server's answer to each page's Dash callback, by HTTP (fresh app: first = run opened and analysed):")
    result["server"] = server_timings(list(args.roots), args.repeats, only=only)
    if args.server_only:
        result["loadavg_after"] = os.getloadavg()
        worst = max((r["warm_s"] for r in result["server"]), default=0)
        print(f"\nworst warm server answer {worst:.3f} s (target ≤ 1 s); load average "
              f"{result['loadavg_after'][0]:.1f} after")
        if args.json:
            args.json.write_text(json.dumps(result, indent=2))
        return
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        roots = list(args.roots)
        with tempfile.TemporaryDirectory() as tmp:
            result["first_load_s"] = round(first_load(browser, roots), 3)
            print(f"first load (fresh app, new browser, landing page): {result['first_load_s']:.2f} s (target ≤ 2 s)")
            if args.copy:  # a second run of the same job, so Compare shows a real diff
                first = next((e for e in find_runs(roots) if e.path.is_dir()), None)
                if first is not None:
                    dst = Path(tmp) / f"{first.id}-copy"
                    shutil.copytree(first.path, dst, ignore=shutil.ignore_patterns(".workbench"))
                    roots.append(dst)
            print(f"pages ({', '.join(map(str, roots))}):")
            result["pages"] = page_timings(browser, roots, args.repeats, only=only)
        result["timeline"] = {"zooms": []}
        if args.kernels > 0:  # --kernels 0 skips the synthetic run
            print(f"timeline on {args.kernels:,} synthetic kernels:")
            result["timeline"] = zoom_timings(browser, args.kernels)
            print(f"every page on the synthetic run of {args.kernels:,} kernels (8 ranks, 50 steps):")
            result["pages_synthetic"] = page_timings(
                browser, None, args.repeats, store=RunStore.preloaded({"synthetic-1M": synthetic_run(args.kernels)}))
        browser.close()
    worst_page = max((r["warm_s"] for r in result["pages"]), default=0)
    warm_all = [r["warm_s"] for r in result["pages"]]
    median_page = statistics.median(warm_all) if warm_all else 0
    worst_nav = max((r["nav_s"] for r in result["pages"]), default=0)
    worst_zoom = max((z["round_trip_s"] for z in result["timeline"]["zooms"]), default=0)
    result["loadavg_after"] = os.getloadavg()
    slow = [f"{r['page']} on {r['run']} ({r['warm_s']:.2f} s)" for r in result["pages"] if r["warm_s"] > 1.0]
    print(f"\nfirst load {result.get('first_load_s', float('nan')):.2f} s (target ≤ 2 s); worst page warm reload "
          f"{worst_page:.2f} s (median {median_page:.2f} s), in-app navigation {worst_nav:.2f} s (target ≤ 1 s); worst zoom round trip "
          f"{worst_zoom:.2f} s (target ≤ 1 s); load average {result['loadavg_after'][0]:.1f} after")
    if slow:
        print("warm pages over 1 s: " + ", ".join(slow))
    print("\n" + summary_table(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
