"""The app's Hangs page in a real browser (Debian's chromium, Playwright): each rank's end state, last step and
last collective for the killed-rank fault, and the rank_died finding with its fix."""

from __future__ import annotations

import threading

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

@pytest.fixture()
def chromium_page(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    ctx.set_default_timeout(120_000)   # a bound for a page that never comes, far above a busy machine's time
    yield ctx.new_page()
    ctx.close()


def test_hangs_page_shows_each_ranks_last_step_and_collective(hang_runs, chromium_page):
    import logging

    from werkzeug.serving import make_server

    from workbench.app.main import create_app

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    app = create_app([hang_runs.path("hang_rank_killed")], background=False)
    server = make_server("127.0.0.1", 0, app.server, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        page = chromium_page
        page.goto(f"http://127.0.0.1:{server.server_port}/hangs")
        page.wait_for_selector("#hang-ranks-grid tbody tr", timeout=120_000)
        rows = page.evaluate("""() => [...document.querySelectorAll('#hang-ranks-grid tbody tr')].map(r =>
            Object.fromEntries([...r.querySelectorAll('td')].map(c => [c.dataset.col, c.textContent.trim()])))""")
        by_rank = {r["rank"]: r for r in rows}
        assert by_rank["2"]["state"] == "gone" and by_rank["2"]["last_step"] == "4", by_rank["2"]
        for r in ("0", "1"):
            assert by_rank[r]["step_reached"] == "5", by_rank[r]
            assert "seq 6" in by_rank[r]["last_collective"] and "all_reduce" in by_rank[r]["last_collective"]
        text = page.text_content("#hang-findings")
        assert "rank_died" in text and "rank 2" in text, text
        # what to do: the rank_died fixer's fix, as `workbench recommend` ranks it
        fixes = page.eval_on_selector_all("#hang-findings .hang-fix", "els => els.map(e => e.textContent)")
        assert fixes and fixes[0].startswith("Fix: Find why the rank ended"), fixes
        assert page.is_visible("#nav-hangs")
    finally:
        server.shutdown()
        thread.join(timeout=5)
