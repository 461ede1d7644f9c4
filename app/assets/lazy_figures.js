// Figures below the fold (components.lazy_graph): <div class="lazy-figure" data-figure="{data, layout}"> is
// drawn by plotly.js when it comes within 200 px of the screen (or when wbDrawLazyFigures() is called), with
// the config dcc.Graph gets. plotly.js is loaded once, through the same promise as prefetch_plotly.js.
(function () {
  var CONFIG = {displaylogo: false, responsive: true};
  function draw(el) {
    var text = el.getAttribute("data-figure");
    if (!text || el._wbDrawn === text) return el._wbDone || Promise.resolve();
    el._wbDrawn = text;
    if (io) io.unobserve(el);
    var fig = JSON.parse(text);
    el._wbDone = window.wbPlotly().then(function (P) { return P.newPlot(el, fig.data, fig.layout, CONFIG); });
    return el._wbDone;
  }
  var io = window.IntersectionObserver ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) { if (e.isIntersecting) draw(e.target); });
  }, {rootMargin: "200px"}) : null;
  function watch(el) { if (io) io.observe(el); else draw(el); }
  function scan(root) {
    if (root.matches && root.matches(".lazy-figure[data-figure]")) watch(root);
    if (root.querySelectorAll) root.querySelectorAll(".lazy-figure[data-figure]").forEach(watch);
  }
  new MutationObserver(function (records) {
    records.forEach(function (r) {
      if (r.type === "attributes") { r.target._wbDrawn = null; watch(r.target); }
      else r.addedNodes.forEach(function (n) { if (n.nodeType === 1) scan(n); });
    });
  }).observe(document.documentElement, {childList: true, subtree: true, attributes: true,
                                         attributeFilter: ["data-figure"]});
  // draw every lazy figure now (tests and screenshots): resolves once all are drawn
  window.wbDrawLazyFigures = function () {
    return Promise.all([].map.call(document.querySelectorAll(".lazy-figure[data-figure]"), draw));
  };
})();
