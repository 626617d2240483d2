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

async function drawSide(x, container, title) {
  $(title).textContent = x.kind === "SKU" ? `SKU ${x.name} — e.g. ${x.host ?? "no server"}` : `Server ${x.name}`;
  if (!x.elements) { clear(container).append(el("p", { class: "muted", text: "No topology to draw." })); return null; }
  return drawGraph(container, x.graph);
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
      x.graph = await getJSON(`${hostPath(x.host)}/graph/`);
      x.elements = x.graph.elements;
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
  // Each graph fills its own panel; the scale note says so only when the two differ a lot.
  const drawn = [cyA, cyB].filter(Boolean);
  const tooltip = document.body.appendChild(el("div", { class: "tooltip", hidden: true }));
  for (const cy of drawn) attachTooltips(cy, tooltip);
  const zooms = drawn.map((cy) => cy.zoom());
  $("scale-note").textContent = drawn.length === 2 && Math.max(...zooms) > 1.5 * Math.min(...zooms)
    ? `Each graph is fitted to its panel: A at ${Math.round(zooms[0] * 100)} %, B at ${Math.round(zooms[1] * 100)} % of its size.`
    : "";
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
