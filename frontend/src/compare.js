// Compare page: two SKUs or two servers side by side, the same scale, a point-by-point table
// from the stored analyses with differences marked, and both AllReduce bus bandwidth curves on
// one plot. A SKU stands for its first member server that has an analysis.

import { el, clear, getJSON, postJSON, hostPath, fmtNumber, fmtTime, fmtBytes, showError } from "./api.js";
import { drawGraph, renderLegend, attachTooltips } from "./graph.js";
import { busbwPlot } from "./plot.js";

const $ = (id) => document.getElementById(id);
const form = $("compare-form");
const query = new URLSearchParams(window.location.search);
const MiB = 1 << 20;
const BUSBW_SIZES = [MiB, 64 * MiB, 1024 * MiB];
// Rendered label height the graphs keep at the shared zoom, in screen pixels.
const MIN_LABEL_PX = { node: 9, edge: 8, parent: 10 };

const analysed = (server) => server?.analysis?.status === "done" && server.analysis.result;

// A name is a SKU when the SKU list knows it, otherwise a hostname.
async function resolve(name, skus) {
  const sku = skus.find((s) => s.sku === name);
  if (!sku) return { kind: "server", name, host: name, server: await getJSON(`${hostPath(name)}/`) };
  const detail = await getJSON(`skus/${encodeURIComponent(sku.sku)}/`);
  let first = null;
  for (const member of detail.servers) {
    const server = await getJSON(`${hostPath(member.hostname)}/`);
    first ??= server;
    if (analysed(server)) return { kind: "SKU", name, host: member.hostname, server, count: detail.servers.length };
  }
  return { kind: "SKU", name, host: first?.hostname ?? null, server: first, count: detail.servers.length };
}

// NVLink bundles per GPU: the links on its edges (to peers, or one edge to the NVSwitch fabric).
function nvlinksPerGpu(elements) {
  const gpus = new Set(elements.filter((e) => e.group === "nodes" && e.data.kind === "gpu").map((e) => e.data.id));
  const links = new Map([...gpus].map((g) => [g, 0]));
  for (const e of elements) {
    const d = e.data;
    if (e.group !== "edges" || !(d.nvlinks > 0)) continue;
    for (const end of [d.source, d.target]) if (links.has(end)) links.set(end, links.get(end) + d.nvlinks);
  }
  return links.size ? Math.max(...links.values()) : 0;
}

function busbwAt(costs, gpuCount, nbytes) {
  const table = costs?.table?.all_reduce;
  if (!table || !costs.table_columns) return null;
  const col = Object.fromEntries(costs.table_columns.map((c, i) => [c, i]));
  const row = table.find((r) => r[col.group_size] === gpuCount && r[col.bytes] === nbytes);
  return row ? row[col.busbw_gbps] : null;
}

const layoutText = (l) => `TP${l.tp} × PP${l.pp} × DP${l.dp}`;

function nicClasses(summary) {
  const counts = {};
  for (const cls of Object.values(summary.nearest_nic_class || {})) if (cls) counts[cls] = (counts[cls] || 0) + 1;
  const entries = Object.entries(counts);
  if (entries.length === 1) return entries[0][0];
  return entries.map(([cls, n]) => `${cls} ×${n}`).join(", ");
}

// Each row: label, shown text, and a number for the "better" mark where a comparison makes
// sense (+1: higher is better, -1: lower is better).
function facts(x) {
  const s = x.server || {};
  const r = analysed(s) || {};
  const summary = r.summary || {};
  const hw = r.hardware || {};
  const gpuCount = summary.gpu_count ?? s.gpu_count;
  const nicCount = summary.nic_count ?? s.nic_count;
  const links = x.nvlinks;
  const perGpu = links && hw.nvlink_per_link_gbps_per_direction ? links * hw.nvlink_per_link_gbps_per_direction : 0;
  const rows = [
    { label: "GPU model", text: summary.gpu_model || s.gpu_model },
    { label: "GPU count", text: gpuCount, value: gpuCount, better: 1 },
    { label: "Links", text: summary.description || s.nvlink_summary },
    {
      label: "NVLink per GPU per direction",
      text: !r.hardware
        ? null
        : perGpu
          ? `${fmtNumber(perGpu, 0)} GB/s effective, ${fmtNumber(links * (hw.nvlink_line_rate_per_link_gbps_per_direction || 0), 0)} line rate (${links} × ${hw.nvlink || "NVLink"} link${links === 1 ? "" : "s"})`
          : "none (PCIe only)",
      value: r.hardware ? perGpu : null,
      better: 1,
    },
    {
      label: "PCIe generation",
      text: hw.pcie
        ? `${hw.pcie} · ${fmtNumber(hw.pcie_gbps_per_direction, 1)} GB/s effective per direction (${fmtNumber(hw.pcie_line_rate_gbps_per_direction, 1)} line rate)`
        : null,
    },
    {
      label: "NICs per GPU (nearest class)",
      text: nicCount == null || !gpuCount ? null : nicCount ? `${fmtNumber(nicCount / gpuCount, 2)} (${nicCount} NICs; nearest ${nicClasses(summary)})` : "none",
      value: nicCount != null && gpuCount ? nicCount / gpuCount : null,
      better: 1,
    },
    {
      label: "Largest NVLink domain",
      text: summary.largest_nvlink_domain == null ? null : summary.largest_nvlink_domain > 1 ? `${summary.largest_nvlink_domain} GPUs` : "none (no NVLink)",
      value: summary.largest_nvlink_domain,
      better: 1,
    },
    ...BUSBW_SIZES.map((n) => {
      const v = busbwAt(r.costs, gpuCount, n);
      return { label: `AllReduce busbw @ ${fmtBytes(n)}`, text: v == null ? null : `${fmtNumber(v, 1)} GB/s`, value: v, better: 1 };
    }),
    { label: "Best layout", text: x.placement ? layoutText(x.placement.layout) : x.placementError ? "–" : null },
    {
      label: "Step time",
      text: x.placement ? fmtTime(x.placement.predicted_step_time_us) : x.placementError,
      value: x.placement?.predicted_step_time_us,
      better: -1,
    },
    {
      label: "Comm time per step",
      text: x.placement ? fmtTime(x.placement.predicted_step_comm_us) : x.placementError ? "–" : null,
      value: x.placement?.predicted_step_comm_us,
      better: -1,
    },
    { label: "Fits in memory", text: x.placement ? (x.placement.fits ? "yes" : "no") : x.placementError ? "no" : null },
    { label: "Findings", text: s.findings ? String(s.findings.length) : null, value: s.findings?.length, better: -1 },
  ];
  return rows;
}

function renderTable(a, b) {
  const tbody = clear(document.querySelector("#compare-table tbody"));
  $("head-a").textContent = a.kind === "SKU" ? `${a.name} (SKU, via ${a.host})` : `${a.name} (server)`;
  $("head-b").textContent = b.kind === "SKU" ? `${b.name} (SKU, via ${b.host})` : `${b.name} (server)`;
  const fa = facts(a);
  const fb = facts(b);
  let differences = 0;
  fa.forEach((ra, i) => {
    const rb = fb[i];
    const ta = ra.text == null || ra.text === "" ? "–" : String(ra.text);
    const tb = rb.text == null || rb.text === "" ? "–" : String(rb.text);
    const differ = ta !== tb;
    if (differ) differences += 1;
    // Which side is ahead, said in words next to the figure: colour is only a second cue.
    let ahead = null;
    if (differ && ra.better && ra.value != null && rb.value != null && ra.value !== rb.value) {
      ahead = (ra.value - rb.value) * ra.better > 0 ? "a" : "b";
    }
    const cell = (text, side) => el("td", { class: ahead === side ? "ahead" : null }, text,
      ahead === side ? el("span", { class: "ahead-mark", text: ra.better > 0 ? " ▲ higher" : " ▼ lower" }) : null);
    tbody.append(el("tr", { class: differ ? "differs" : null, dataset: { property: ra.label } },
      el("th", { scope: "row" }, ra.label, differ ? el("span", { class: "badge sev-warning diff-mark", text: "≠ differs" }) : null),
      cell(ta, "a"), cell(tb, "b")));
  });
  $("compare-status").textContent = `${differences} difference${differences === 1 ? "" : "s"}`;
}

// fcose may lay NUMA boxes over one another; lay the top-level boxes out on a grid instead,
// keeping each box's inside as it was, and put what hangs between them (the NVSwitch fabric)
// in the middle.
function separateBoxes(cy) {
  const boxes = cy.nodes(":parent").filter((n) => n.parent().empty());
  if (boxes.length < 2) return;
  const free = cy.nodes().filter((n) => n.parent().empty() && !n.isParent());
  const freeWidth = free.reduce((w, n) => w + n.boundingBox().w + 20, 0);
  const gap = Math.max(60, Math.min(freeWidth, 220) + 40);
  const cols = Math.ceil(Math.sqrt(boxes.length));
  const rows = Math.ceil(boxes.length / cols);
  const cellW = Math.max(...boxes.map((n) => n.boundingBox().w)) + gap;
  const cellH = Math.max(...boxes.map((n) => n.boundingBox().h)) + gap;
  boxes.forEach((box, i) => {
    const bb = box.boundingBox();
    const cx = (i % cols) * cellW;
    const cy0 = Math.floor(i / cols) * cellH;
    box.descendants().filter((d) => !d.isParent()).shift({ x: cx - (bb.x1 + bb.w / 2), y: cy0 - (bb.y1 + bb.h / 2) });
  });
  const centre = { x: ((cols - 1) * cellW) / 2, y: ((rows - 1) * cellH) / 2 };
  const width = free.reduce((w, n) => w + n.boundingBox().w + 20, -20);
  let x = centre.x - width / 2;
  free.forEach((n) => {
    const w = n.boundingBox().w;
    n.position({ x: x + w / 2, y: centre.y });
    x += w + 20;
  });
}

// The server page's layout spreads a graph over a large panel; two graphs side by side at one
// scale need them tight, so a second pass from the first one's positions pulls them in.
function compact(cy) {
  if (!window.cytoscapeFcose) return Promise.resolve();
  const layout = cy.layout({
    name: "fcose",
    quality: "proof",
    randomize: false,
    animate: false,
    fit: false,
    nodeDimensionsIncludeLabels: true,
    nodeRepulsion: () => 3500,
    idealEdgeLength: (edge) => (edge.data("nvlinks") > 0 ? 85 : 36),
    edgeElasticity: () => 0.45,
    nestingFactor: 0.1,
    gravity: 0.9,
    gravityCompound: 1.6,
    gravityRangeCompound: 1.2,
    nodeSeparation: 24,
    numIter: 2500,
    tile: true,
    packComponents: true,
  });
  const done = new Promise((resolve) => layout.one("layoutstop", resolve));
  layout.run();
  return done;
}

// Labels keep a readable on-screen size at the shared zoom instead of vanishing.
function readableLabels(cy, zoom) {
  const px = (min, base) => Math.max(base, min / zoom);
  cy.style()
    .selector("node").style({ "font-size": px(MIN_LABEL_PX.node, 11), "min-zoomed-font-size": 0 })
    .selector("node[kind = \"nic\"]").style({ "font-size": px(MIN_LABEL_PX.node - 1, 10) })
    .selector("node[kind = \"switch\"], node[kind = \"switch_tree\"], node[kind = \"host_bridge\"], node[kind = \"nvswitch\"], node[kind = \"nvlink_fabric\"]")
    .style({ "text-wrap": "wrap", "text-max-width": 70 })
    // A box's title wraps within the box rather than running over its neighbour's.
    .selector(":parent").style({ "font-size": px(MIN_LABEL_PX.parent, 12), "text-wrap": "wrap", "text-max-width": (n) => `${Math.max(80, n.width())}px` })
    .selector("edge").style({ "font-size": px(MIN_LABEL_PX.edge, 9), "min-zoomed-font-size": 0 })
    .update();
}

async function drawSide(x, container, title) {
  $(title).textContent = x.kind === "SKU" ? `SKU ${x.name} — e.g. ${x.host ?? "no server"}` : `Server ${x.name}`;
  if (!x.elements) { clear(container).append(el("p", { class: "muted", text: "No topology to draw." })); return null; }
  const cy = await drawGraph(container, x.elements);
  await compact(cy);
  separateBoxes(cy);
  cy.fit(undefined, 16);
  return cy;
}

function curve(x) {
  const costs = analysed(x.server)?.costs;
  const busbw = costs?.curves?.all_reduce?.busbw_gbps;
  if (!busbw) return [];
  return costs.sizes.map((n, i) => [n, busbw[i]]);
}

// The predicted step time of the chosen preset on each side: the tp x pp x dp asked for, or
// the layout the API recommends (fastest that fits in memory; none when nothing fits).
async function place(x, preset, asked) {
  if (!x.host) return;
  const body = preset ? { model: preset } : {};
  try {
    if (asked) {
      x.placement = await postJSON(`${hostPath(x.host)}/placement/`, { ...body, tp: asked.tp, pp: asked.pp, dp: asked.dp });
    } else {
      const rec = await postJSON(`${hostPath(x.host)}/recommendation/`, body);
      if (rec.recommended) x.placement = rec.recommended;
      else x.placementError = rec.no_fit?.message || "fits no layout";
    }
  } catch (err) {
    x.placementError = `not possible: ${err.message}`;
  }
}

async function loadPresets() {
  const select = form.elements.model;
  try {
    const presets = await getJSON("model-presets/");
    for (const p of presets) select.append(el("option", { value: p.key, text: p.name }));
  } catch { /* the default preset still works */ }
  select.value = query.get("model") || "";
}

function askedLayout() {
  const [tp, pp, dp] = ["tp", "pp", "dp"].map((k) => Number(query.get(k)));
  return tp > 0 && pp > 0 && dp > 0 ? { tp, pp, dp } : null;
}

async function main() {
  renderLegend($("legend"));
  const names = [query.get("a") || "", query.get("b") || ""];
  form.elements.a.value = names[0];
  form.elements.b.value = names[1];
  for (const k of ["tp", "pp", "dp"]) form.elements[k].value = query.get(k) || "";
  const presets = loadPresets();
  let skus = [];
  try {
    const data = await getJSON("skus/", { page_size: 200 });
    skus = data.results || data;
    const options = $("compare-options");
    for (const s of skus) options.append(el("option", { value: s.sku, label: `SKU · ${s.server_count} server${s.server_count === 1 ? "" : "s"}` }));
  } catch (err) { showError($("compare-status"), err); }
  if (!names[0] || !names[1]) { $("compare-status").textContent = "Pick two SKUs or servers."; return; }
  let sides;
  try {
    sides = await Promise.all(names.map((n) => resolve(n, skus)));
    await Promise.all(sides.map(async (x) => {
      if (!x.host) return;
      x.elements = (await getJSON(`${hostPath(x.host)}/graph/`)).elements;
      x.nvlinks = nvlinksPerGpu(x.elements);
    }));
  } catch (err) { showError($("compare-status"), err); return; }
  const [a, b] = sides;
  await presets;
  const asked = askedLayout();
  await Promise.all(sides.map((x) => place(x, form.elements.model.value, asked)));
  const presetName = a.placement?.model || b.placement?.model || "default preset";
  $("layout-note").textContent = asked
    ? `Layout ${layoutText(asked)} as asked, for ${presetName}.`
    : `Best layout: the lowest predicted step time that fits in memory (compute, exposed communication and pipeline bubble), for ${presetName}.`;
  renderTable(a, b);

  const [cyA, cyB] = await Promise.all([drawSide(a, $("graph-a"), "title-a"), drawSide(b, $("graph-b"), "title-b")]);
  // The same scale on both sides: the smaller zoom of the two fitted graphs.
  const drawn = [cyA, cyB].filter(Boolean);
  const zoom = Math.min(...drawn.map((cy) => cy.zoom()));
  const tooltip = document.body.appendChild(el("div", { class: "tooltip", hidden: true }));
  for (const cy of drawn) {
    cy.zoom(zoom);
    cy.center();
    readableLabels(cy, zoom);
    attachTooltips(cy, tooltip);
  }
  $("scale-note").textContent = drawn.length === 2 ? `Both graphs at the same scale (${Math.round(zoom * 100)}%).` : "";
  window.topowebCompare = { a: cyA, b: cyB };

  const series = [];
  const ca = curve(a);
  const cb = curve(b);
  if (ca.length) series.push({ label: `${a.name} (modelled)`, points: ca });
  if (cb.length) series.push({ label: `${b.name} (modelled)`, points: cb, dashed: true });
  const plot = clear($("compare-plot"));
  if (series.length) busbwPlot(plot, series);
  else plot.append(el("p", { class: "muted", text: "No modelled curves yet (analysis pending)." }));
  document.body.dataset.compareReady = "1";
}

main();
