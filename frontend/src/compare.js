// Compare page: two SKUs or two servers side by side, the same scale, a point-by-point table
// with differences marked, and both AllReduce bus bandwidth curves on one plot.

import { el, clear, getJSON, hostPath, pageData, fmtNumber, fmtTime, showError } from "./api.js";
import { drawGraph, renderLegend, attachTooltips } from "./graph.js";
import { busbwPlot } from "./plot.js";

const $ = (id) => document.getElementById(id);
const page = pageData();
const form = $("compare-form");

// A name is a SKU when the SKU list knows it, otherwise a hostname.
async function resolve(name, skus) {
  const sku = skus.find((s) => s.sku_name === name);
  if (sku) {
    const d = await getJSON(`skus/${encodeURIComponent(sku.sku_name)}/`);
    const members = d.servers || d.members || [];
    const host = members.length ? (members[0].hostname ?? members[0]) : null;
    const server = host ? await getJSON(`${hostPath(host)}/`) : null;
    return { kind: "SKU", name, sku: d, host, server };
  }
  const server = await getJSON(`${hostPath(name)}/`);
  return { kind: "server", name, host: name, server };
}

function facts(x) {
  const s = x.server || {};
  const r = s.analysis?.result || x.sku?.analysis?.result || {};
  const summary = r.summary || {};
  const bw = r.allreduce_busbw_gbps || {};
  const best = r.best_layout || {};
  return [
    ["GPU model", s.gpu_model || summary.gpu_model],
    ["GPU count", s.gpu_count ?? summary.gpu_count],
    ["NVLink per GPU per direction", summary.nvlink_gbps_per_gpu_per_direction != null ? `${fmtNumber(summary.nvlink_gbps_per_gpu_per_direction, 0)} GB/s` : s.nvlink_summary || "none"],
    ["PCIe generation", summary.pcie_generation ? `Gen${summary.pcie_generation}` : null],
    ["NICs per GPU (class)", summary.nics_per_gpu != null ? `${fmtNumber(summary.nics_per_gpu, 2)} (${summary.nic_class || "?"})` : s.nic_count != null && s.gpu_count ? `${fmtNumber(s.nic_count / s.gpu_count, 2)}` : null],
    ["Largest NVLink domain", summary.largest_nvlink_domain != null ? `${summary.largest_nvlink_domain} GPUs` : null],
    ["AllReduce busbw @ 1 MiB", bw["1MiB"] != null ? `${fmtNumber(bw["1MiB"], 1)} GB/s` : null],
    ["AllReduce busbw @ 64 MiB", bw["64MiB"] != null ? `${fmtNumber(bw["64MiB"], 1)} GB/s` : null],
    ["AllReduce busbw @ 1 GiB", bw["1GiB"] != null ? `${fmtNumber(bw["1GiB"], 1)} GB/s` : null],
    ["Best layout", best.layout || (best.tp ? `TP${best.tp} PP${best.pp} DP${best.dp}` : null)],
    ["Comm time per step", best.step_comm_us != null ? fmtTime(best.step_comm_us) : null],
    ["Findings", s.findings ? String(s.findings.length) : null],
  ];
}

function renderTable(a, b) {
  const tbody = clear(document.querySelector("#compare-table tbody"));
  $("head-a").textContent = `${a.name} (${a.kind})`;
  $("head-b").textContent = `${b.name} (${b.kind})`;
  const fa = facts(a);
  const fb = facts(b);
  let differences = 0;
  fa.forEach(([label, va], i) => {
    const vb = fb[i][1];
    const differ = String(va ?? "–") !== String(vb ?? "–");
    if (differ) differences += 1;
    tbody.append(el("tr", { class: differ ? "differs" : null, dataset: { property: label } },
      el("th", { scope: "row" }, label, differ ? el("span", { class: "badge sev-warning diff-mark", text: "differs" }) : null),
      el("td", { text: va ?? "–" }),
      el("td", { text: vb ?? "–" })));
  });
  $("compare-status").textContent = `${differences} difference${differences === 1 ? "" : "s"}`;
}

async function drawSide(x, container, title) {
  $(title).textContent = `${x.kind} ${x.name}${x.kind === "SKU" && x.host ? ` — e.g. ${x.host}` : ""}`;
  if (!x.host) { clear(container).append(el("p", { class: "muted", text: "No server of this SKU to draw." })); return null; }
  const data = await getJSON(`${hostPath(x.host)}/graph/`);
  const elements = Array.isArray(data) ? data : data.elements || [...(data.nodes || []), ...(data.edges || [])];
  const cy = await drawGraph(container, elements);
  return cy;
}

function curve(x) {
  const r = x.server?.analysis?.result || {};
  const c = r.allreduce_curve || r.busbw_curve || [];
  return c.map((p) => [p.bytes ?? p[0], p.busbw_gbps ?? p[1]]);
}

async function main() {
  renderLegend($("legend"));
  form.elements.a.value = page.a || "";
  form.elements.b.value = page.b || "";
  let skus = [];
  try {
    const data = await getJSON("skus/", { page_size: 200 });
    skus = data.results || data;
    const options = $("compare-options");
    for (const s of skus) options.append(el("option", { value: s.sku_name, label: `SKU · ${s.server_count} servers` }));
  } catch (err) { showError($("compare-status"), err); }
  if (!page.a || !page.b) { $("compare-status").textContent = "Pick two SKUs or servers."; return; }
  let a; let b;
  try {
    [a, b] = await Promise.all([resolve(page.a, skus), resolve(page.b, skus)]);
  } catch (err) { showError($("compare-status"), err); return; }
  renderTable(a, b);
  const [cyA, cyB] = await Promise.all([drawSide(a, $("graph-a"), "title-a"), drawSide(b, $("graph-b"), "title-b")]);
  // The same scale on both sides: the smaller zoom of the two fitted graphs.
  if (cyA && cyB) {
    const z = Math.min(cyA.zoom(), cyB.zoom());
    for (const cy of [cyA, cyB]) { cy.zoom(z); cy.center(); attachTooltips(cy, document.body.appendChild(el("div", { class: "tooltip", hidden: true }))); }
  }
  window.topowebCompare = { a: cyA, b: cyB };
  const series = [];
  const ca = curve(a);
  const cb = curve(b);
  if (ca.length) series.push({ label: a.name, points: ca });
  if (cb.length) series.push({ label: b.name, points: cb, dashed: true });
  const plot = clear($("compare-plot"));
  if (series.length) busbwPlot(plot, series);
  else plot.append(el("p", { class: "muted", text: "No modelled curves yet (analysis pending)." }));
  document.body.dataset.compareReady = "1";
}

main();
