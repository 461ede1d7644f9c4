// Load plotly.js while the browser is idle on a page that has no figure (the landing page draws its bars in
// HTML), so the next page with a figure does not wait for 4.8 MB of script to compile. While it loads,
// window.Plotly is a promise of it: dcc.Graph waits on window.Plotly when it is set (Promise.resolve), so plotly
// is never loaded twice; plotly.js then replaces window.Plotly with itself.
(function () {
  // a promise of plotly.js: loads it unless it is loaded, or loading (here or by dcc.Graph's own script tag)
  window.wbPlotly = function () {
    var url = window._dashPlotlyJSURL;
    var tag = !window.Plotly && url && [].find.call(document.scripts, function (s) {
      return s.getAttribute("src") === url;
    });
    if (tag) {
      return new Promise(function (resolve, reject) {
        tag.addEventListener("load", function () { resolve(window.Plotly); });
        tag.addEventListener("error", reject);
      });
    }
    if (!window.Plotly) prefetch();
    return Promise.resolve(window.Plotly).then(function () { return window.Plotly; });
  };
  function prefetch() {
    if (window.Plotly || !window._dashPlotlyJSURL) return;
    window.Plotly = new Promise(function (resolve, reject) {
      var s = document.createElement("script");
      s.src = window._dashPlotlyJSURL;
      s.async = true;
      s.onload = function () { resolve(); };
      s.onerror = function (e) { window.Plotly = undefined; reject(e); };
      document.body.appendChild(s);
    });
    window.Plotly.catch(function () {});
  }
  window.addEventListener("load", function () {
    setTimeout(function () {
      if (window.requestIdleCallback) window.requestIdleCallback(prefetch, {timeout: 3000});
      else prefetch();
    }, 1500);
  });
})();
