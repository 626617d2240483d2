// Compare page: two SKUs or two servers side by side. One answer from GET compare/?a=&b=
// holds both graphs, the point-by-point table with its differences and which side is ahead,
// and both AllReduce curves; the server decides all of it, this module draws it. Each graph
// is fitted to its own panel.

import { el, clear, getJSON, showError } from "./api.js";
import { drawGraph, renderLegend, attachTooltips } from "./graph.js";
import { busbwPlot } from "./plot.js";

const $ = (id) => document.getElementById(id);
const form = $("compare-form");
const query = new URLSearchParams(window.location.search);

function renderTable(doc) {
  const [a, b] = doc.sides;
  const tbody = clear(document.querySelector("#compare-table tbody"));
  $("head-a").textContent = a.heading;
  $("head-b").textContent = b.heading;
  for (const row of doc.rows) {
    // Which side is ahead, said in words next to the figure: colour is only a second cue.
    const cell = (text, side) => el("td", { class: row.ahead === side ? "ahead" : null }, text,
      row.ahead === side ? el("span", { class: "ahead-mark", text: ` ${row.ahead_mark}` }) : null);
    tbody.append(el("tr", { class: row.differs ? "differs" : null, dataset: { property: row.label } },
      el("th", { scope: "row" }, row.label, row.differs ? el("span", { class: "badge sev-warning diff-mark", text: "≠ differs" }) : null),
      cell(row.a, "a"), cell(row.b, "b")));
  }
  $("compare-status").textContent = `${doc.differences} difference${doc.differences === 1 ? "" : "s"}`;
}

async function drawSide(side, container, title) {
  $(title).textContent = side.title;
  if (!side.graph) { clear(container).append(el("p", { class: "muted", text: "No topology to draw." })); return null; }
  return drawGraph(container, side.graph);
}

async function main() {
  renderLegend($("legend"));
  const names = [query.get("a") || "", query.get("b") || ""];
  form.elements.a.value = names[0];
  form.elements.b.value = names[1];
  for (const k of ["tp", "pp", "dp"]) form.elements[k].value = query.get(k) || "";
  const params = {};
  for (const k of ["a", "b", "model", "tp", "pp", "dp"]) params[k] = query.get(k) || "";
  let doc;
  try {
    doc = await getJSON("compare/", params);
  } catch (err) { showError($("compare-status"), err); return; }
  const options = $("compare-options");
  for (const s of doc.skus) options.append(el("option", { value: s.name, label: `SKU · ${s.server_count} server${s.server_count === 1 ? "" : "s"}` }));
  const select = form.elements.model;
  for (const p of doc.presets) select.append(el("option", { value: p.key, text: p.name }));
  select.value = query.get("model") || "";
  if (!names[0] || !names[1]) { $("compare-status").textContent = "Pick two SKUs or servers."; return; }
  $("layout-note").textContent = doc.layout_note;
  renderTable(doc);

  const [a, b] = doc.sides;
  const [cyA, cyB] = await Promise.all([drawSide(a, $("graph-a"), "title-a"), drawSide(b, $("graph-b"), "title-b")]);
  // Each graph fills its own panel; the scale note appears only when the two differ a lot.
  const drawn = [cyA, cyB].filter(Boolean);
  const tooltip = document.body.appendChild(el("div", { class: "tooltip", hidden: true }));
  for (const cy of drawn) attachTooltips(cy, tooltip);
  const zooms = drawn.map((cy) => cy.zoom());
  $("scale-note").textContent = drawn.length === 2 && Math.max(...zooms) > 1.5 * Math.min(...zooms)
    ? `Each graph is fitted to its own panel: A is drawn at ${Math.round(zooms[0] * 100)} %, B at ${Math.round(zooms[1] * 100)} %.`
    : "";
  window.topowebCompare = { a: cyA, b: cyB };

  const series = [];
  if (a.curve.length) series.push({ label: `${a.name} (modelled)`, points: a.curve });
  if (b.curve.length) series.push({ label: `${b.name} (modelled)`, points: b.curve, dashed: true });
  const plot = clear($("compare-plot"));
  if (series.length) busbwPlot(plot, series);
  else plot.append(el("p", { class: "muted", text: "No modelled curves yet (analysis pending)." }));
  document.body.dataset.compareReady = "1";
}

main();
