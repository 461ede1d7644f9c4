// Grid cell formatters (dash-ag-grid calls them by name from a column's valueFormatter).
var dagfuncs = (window.dashAgGridFunctions = window.dashAgGridFunctions || {});

// A duration in ns as the CLI prints it (workbench.analyses.findings.format_ns): "2.57 s", "312 ms", "4.1 ms",
// "85 µs", "307 ns"; a sign when negative; "–" when missing.
dagfuncs.wbDuration = function (ns) {
  if (ns === null || ns === undefined || Number.isNaN(ns)) return "–";
  var a = Math.abs(ns), sign = ns < 0 ? "-" : "";
  var f = function (x, d) {
    return sign + x.toLocaleString("en-US", {minimumFractionDigits: d, maximumFractionDigits: d, useGrouping: false});
  };
  if (a >= 1e9) return f(a / 1e9, 2) + " s";
  if (a >= 1e8) return f(a / 1e6, 0) + " ms";
  if (a >= 1e6) return f(a / 1e6, 1) + " ms";
  if (a >= 1e3) return f(a / 1e3, 0) + " µs";
  return f(a, 0) + " ns";
};
