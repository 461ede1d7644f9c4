"""Helpers for the browser tests and bench/app_speed.py: wait for a page, read grids and stats."""

from __future__ import annotations

import time

READY_JS = """
(key) => {
  const root = document.getElementById('page-' + key);
  if (!root) return false;
  if (document.querySelector('[data-dash-is-loading="true"]')) return false;
  // every plotly graph on the page has drawn
  const graphs = root.querySelectorAll('.dash-graph');
  for (const g of graphs) { if (!g.querySelector('.main-svg')) return false; }
  return true;
}
"""


def goto_ready(page, url: str, key: str, timeout_ms: int = 30_000) -> float:
    """Open ``url`` and wait until page ``key`` has rendered with all its graphs; returns the seconds it took."""
    t = time.perf_counter()
    page.goto(url)
    page.wait_for_function(READY_JS, arg=key, timeout=timeout_ms, polling=50)
    return time.perf_counter() - t


def grid_rows(page, grid_id: str) -> list[dict[str, str]]:
    """The rows an AG Grid shows, as {col-id: text}, in display order."""
    page.wait_for_selector(f"#{grid_id} .ag-row", timeout=15_000)
    return page.evaluate(
        """(id) => {
            const rows = [...document.querySelectorAll('#' + id + ' .ag-center-cols-container .ag-row')];
            rows.sort((a, b) => (+a.getAttribute('row-index')) - (+b.getAttribute('row-index')));
            return rows.map(r => Object.fromEntries([...r.querySelectorAll('.ag-cell')].map(
                c => [c.getAttribute('col-id'), c.textContent.trim()])));
        }""",
        grid_id,
    )


def stat(page, key: str) -> str:
    return page.text_content(f"#stat-{key}").strip()


def graph_layout_meta(page, graph_id: str):
    return page.evaluate("(id) => document.getElementById(id).querySelector('.js-plotly-plot').layout.meta", graph_id)


def pick(page, dropdown_id: str, value: str) -> None:
    """Choose ``value`` in a Dash 4 ``dcc.Dropdown``: open it and click the option."""
    page.click(f"#{dropdown_id}")
    page.click(f".dash-dropdown-option:has(input[value='{value}'])", timeout=10_000)
