"""Helpers for the browser tests and bench/app_speed.py: wait for a page, read grids and stats."""

from __future__ import annotations

import time


READY_JS = """
(key) => {
  const root = document.getElementById('page-' + key);
  if (!root) return false;
  // the run list refreshing itself in the background does not count as loading
  for (const el of document.querySelectorAll('[data-dash-is-loading="true"]')) {
    if (!el.closest('#runs-section')) return false;
  }
  // every table has been drawn (assets/tables.js) for the data it now holds
  for (const t of root.querySelectorAll('.table-box[data-table]')) { if (t._wbDrawn !== t.getAttribute('data-table')) return false; }
  // every figure drawn on scrolling (assets/lazy_figures.js) that is on the screen, or within its 200 px margin,
  // has drawn
  for (const f of root.querySelectorAll('.lazy-figure')) {
    if (f.getBoundingClientRect().top < window.innerHeight + 200 && !f.querySelector('.main-svg')) return false;
  }
  // every plotly graph on the page has drawn
  const graphs = root.querySelectorAll('.dash-graph');
  for (const g of graphs) { if (!g.querySelector('.main-svg')) return false; }
  return true;
}
"""


def goto_ready(page, url: str, key: str, timeout_ms: int = 60_000) -> float:
    """Open ``url`` and wait until page ``key`` has rendered with all its graphs; returns the seconds it took."""
    t = time.perf_counter()
    page.goto(url)
    page.wait_for_function(READY_JS, arg=key, timeout=timeout_ms, polling=50)
    return time.perf_counter() - t


def draw_lazy(page, timeout_ms: int = 30_000) -> None:
    """Draw the figures below the fold now (``assets/lazy_figures.js`` draws them when scrolled near) and wait
    until every one has drawn: before reading them or taking a full-page screenshot."""
    page.evaluate("() => window.wbDrawLazyFigures && window.wbDrawLazyFigures()")
    page.wait_for_function("() => [...document.querySelectorAll('.lazy-figure')].every(e => e.querySelector('.main-svg'))",
                           timeout=timeout_ms, polling=50)


def shot(page, path: str, full_page: bool = True) -> None:
    """A screenshot of the whole page with every figure drawn (below the fold too)."""
    draw_lazy(page)
    page.screenshot(path=path, full_page=full_page)


#: Ready (as :data:`READY_JS`) and showing run ``arg.run``: the page root carries the run it was drawn for.
_NAV_READY_JS = READY_JS.replace("(key) => {", "(arg) => { const key = arg.key;").replace(
    "if (!root) return false;", "if (!root || root.dataset.run !== arg.run) return false;")


def navigate_ready(page, path: str, key: str, run: str, timeout_ms: int = 60_000) -> float:
    """Go to ``path`` inside the already loaded app, as its header links do (history push, no reload: the
    scripts are not loaded again) and wait until page ``key`` of ``run`` has rendered; returns the seconds."""
    t = time.perf_counter()
    page.evaluate("(p) => { window.history.pushState({}, '', p);"
                  " window.dispatchEvent(new CustomEvent('_dashprivate_pushstate')); }", path)
    page.wait_for_function(_NAV_READY_JS, arg={"key": key, "run": run}, timeout=timeout_ms, polling=50)
    return time.perf_counter() - t


def grid_rows(page, grid_id: str) -> list[dict[str, str]]:
    """The rows a table (``components.grid``) shows, as {column field: text}, in display order."""
    page.wait_for_selector(f"#{grid_id} tbody tr", timeout=120_000, state="attached")
    return page.evaluate(
        """(id) => [...document.querySelectorAll('#' + id + ' tbody tr')].map(r => Object.fromEntries(
               [...r.querySelectorAll('td')].map(c => [c.dataset.col, c.textContent.trim()])))""",
        grid_id,
    )


def stat(page, key: str) -> str:
    return page.text_content(f"#stat-{key}").strip()


def graph_layout_meta(page, graph_id: str):
    return page.evaluate("(id) => document.getElementById(id).querySelector('.js-plotly-plot').layout.meta", graph_id)


def pick(page, dropdown_id: str, value: str) -> None:
    """Choose ``value`` in a Dash 4 ``dcc.Dropdown``: open it and click the option."""
    page.click(f"#{dropdown_id}")
    page.click(f".dash-dropdown-option:has(input[value='{value}'])", timeout=120_000)


#: Elements that spill out of their card, and texts cut short: a list of "what · where" strings (empty = fine).
#: Inside a card, every rendered element must lie within the card's left and right edges; a table must fit its
#: card's width (no sideways scrolling) and each header word its column; a plotly text (tick label, bar label,
#: annotation) must lie within its figure.
OVERFLOW_JS = """
() => {
  const bad = [];
  const name = (el) => (el.id ? '#' + el.id : el.tagName.toLowerCase() + '.' + (el.className.baseVal ?? el.className))
                         .slice(0, 60) + ' "' + (el.textContent || '').trim().slice(0, 40) + '"';
  // inside a table's box (checked as a whole below), dropdowns, the TOML box and SVG (checked below)
  const inside = '.table-wrap, .modebar, .dash-dropdown, .toml, svg';
  for (const card of document.querySelectorAll('.section, .stat-card, .rec, .panel')) {
    const r = card.getBoundingClientRect();
    for (const el of card.querySelectorAll('*')) {
      if (el.closest(inside)) continue;
      const b = el.getBoundingClientRect();
      if (b.width === 0 || b.height === 0) continue;
      if (b.right > r.right + 1 || b.left < r.left - 1) bad.push('spills: ' + name(el));
    }
  }
  for (const w of document.querySelectorAll('.table-wrap')) {
    if (w.scrollWidth > w.clientWidth + 1) bad.push('table wider than its card: ' + name(w.parentElement));
  }
  for (const h of document.querySelectorAll('.data-table th')) {
    if (h.scrollWidth > h.clientWidth + 1) bad.push('header cut: ' + name(h));
  }
  for (const svg of document.querySelectorAll('.js-plotly-plot .main-svg:first-of-type')) {
    const r = svg.getBoundingClientRect();
    for (const t of svg.parentElement.querySelectorAll('svg text')) {
      const b = t.getBoundingClientRect();
      if (b.width === 0 || !t.textContent.trim()) continue;
      if (b.right > r.right + 2 || b.left < r.left - 2) bad.push('plot text cut: ' + name(t));
    }
  }
  return bad;
}
"""
