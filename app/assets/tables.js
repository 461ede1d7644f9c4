// Draws the app's tables (components.grid): a <div class="table-box" data-table="{columns, rows, note}"> gets
// its <table> here, cell by cell as text (textContent: never parsed as HTML). One Dash component per table keeps
// React's work per page small; a table is redrawn when its data-table changes.
(function () {
  function draw(box) {
    var text = box.getAttribute("data-table");
    if (!text || box._wbDrawn === text) return;
    var spec = JSON.parse(text);
    var table = document.createElement("table");
    table.className = "data-table";
    var head = table.createTHead().insertRow();
    spec.columns.forEach(function (c) {
      var th = document.createElement("th");
      th.textContent = c.header;
      if (c.cls) th.className = c.cls;
      head.appendChild(th);
    });
    var body = table.createTBody();
    spec.rows.forEach(function (row) {
      var tr = body.insertRow();
      row.forEach(function (v, i) {
        var td = tr.insertCell();
        td.textContent = v;
        td.dataset.col = spec.columns[i].field;
        if (spec.columns[i].cls) td.className = spec.columns[i].cls;
      });
    });
    var wrap = document.createElement("div");
    wrap.className = "table-wrap" + (spec.rows.length > 25 ? " table-scroll" : "");
    wrap.appendChild(table);
    var parts = [wrap];
    // "CSV": the rows shown, headed by the fields' names (cost_ns, idle_pct: the unit in the name), numbers raw
    // (spec.raw: ns, %, counts; an unknown value empty), the rest as shown; quoted per RFC 4180
    var csv = document.createElement("a");
    csv.className = "csv-link";
    csv.textContent = "CSV";
    csv.title = "download this table as CSV";
    csv.href = "#";
    csv.addEventListener("click", function (ev) {
      ev.preventDefault();
      var q = function (v) { v = v == null ? "" : String(v); return /[",\n\r]/.test(v) ? '"' + v.replace(/"/g, '""') + '"' : v; };
      var raw = spec.raw || {};
      var lines = [spec.columns.map(function (c) { return q(c.field); }).join(",")];
      spec.rows.forEach(function (row, r) {
        lines.push(row.map(function (v, i) { return q(raw[i] ? raw[i][r] : v); }).join(","));
      });
      var blob = new Blob([lines.join("\r\n") + "\r\n"], {type: "text/csv"});
      var a = document.createElement("a");
      a.href = URL.createObjectURL(blob);
      a.download = (box.id || "table") + ".csv";
      document.body.appendChild(a); a.click(); a.remove();
      setTimeout(function () { URL.revokeObjectURL(a.href); }, 1000);
    });
    parts.push(csv);
    if (spec.note) {
      var note = document.createElement("div");
      note.className = "muted";
      note.textContent = spec.note;
      parts.push(note);
    }
    box.replaceChildren.apply(box, parts);
    box._wbDrawn = text;
  }
  function drawAll(root) {
    (root.querySelectorAll ? root : document).querySelectorAll(".table-box[data-table]").forEach(draw);
    if (root.matches && root.matches(".table-box[data-table]")) draw(root);
  }
  new MutationObserver(function (records) {
    records.forEach(function (r) {
      if (r.type === "attributes") draw(r.target);
      else r.addedNodes.forEach(function (n) { if (n.nodeType === 1) drawAll(n); });
    });
  }).observe(document.documentElement, {childList: true, subtree: true, attributes: true,
                                         attributeFilter: ["data-table"]});
})();
