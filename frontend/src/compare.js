// Compare page: two SKUs or two servers side by side. One answer from GET compare/?a=&b=
// holds both graphs, the point-by-point table with its differences and which side is ahead,
// and both AllReduce curves; the server decides all of it, this module draws it. Both graphs
// are drawn at one legible scale (the server's layout units, labels at their set sizes), each
// in a panel that scrolls when its server is wider or taller than the panel.

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
    // One name per part, as the fleet list gives it; the names as reported in the title.
    const cell = (text, side) => el("td", { class: row.ahead === side ? "ahead" : null, title: row.detail?.[side] || null }, text,
      row.ahead === side ? el("span", { class: "ahead-mark", text: ` ${row.ahead_mark}` }) : null);
    tbody.append(el("tr", { class: row.differs ? "differs" : null, dataset: { property: row.label } },
      el("th", { scope: "row" }, row.label, row.differs ? el("span", { class: "badge sev-warning diff-mark", text: "≠ differs" }) : null),
      cell(row.a, "a"), cell(row.b, "b")));
  }
  $("compare-status").textContent = `${doc.differences} difference${doc.differences === 1 ? "" : "s"}`;
}

// One scale for both sides: the server's own units, so an 8-GPU H200 is not shrunk to fit
// beside a 2-GPU box. The drawing area is sized to the drawing; its panel scrolls.
const SCALE = 1;
const MARGIN = 24;

async function drawSide(side, container, title) {
  $(title).textContent = side.title;
  if (!side.graph) { clear(container).append(el("p", { class: "muted", text: "No topology to draw." })); return null; }
  const area = container.appendChild(el("div", { class: "compare-drawing" }));
  area.style.width = "100%"; // the panel's size until the drawing's is known
  area.style.height = "100%";
  const cy = await drawGraph(area, side.graph);
  const box = cy.elements(":visible").boundingBox({ includeLabels: false, includeOverlays: false, includeUnderlays: false });
  area.style.width = `${Math.ceil(box.w * SCALE + 2 * MARGIN)}px`;
  area.style.height = `${Math.ceil(box.h * SCALE + 2 * MARGIN)}px`;
  cy.resize();
  cy.viewport({ zoom: SCALE, pan: { x: MARGIN - box.x1 * SCALE, y: MARGIN - box.y1 * SCALE } });
  // The panel scrolls; the wheel scrolls it rather than zooming one side away from the other.
  cy.userZoomingEnabled(false);
  cy.userPanningEnabled(false);
  return cy;
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
  const drawn = [cyA, cyB].filter(Boolean);
  const tooltip = document.body.appendChild(el("div", { class: "tooltip", hidden: true }));
  for (const cy of drawn) attachTooltips(cy, tooltip);
  $("scale-note").textContent = drawn.length === 2 ? "Both graphs at one scale; scroll a panel to see all of its server." : "";
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
