// Server page: the topology graph and matrix, device details, findings, benchmarks,
// placement advice and snapshot history of one server, all from the JSON API.

import { el, clear, getJSON, hostPath, pageData, fmtNumber, fmtBytes, fmtTime, fmtAgo, healthBadge, showError } from "./api.js";
import { drawGraph, renderLegend, attachTooltips, highlightPaths, clearHighlight, colourGroups, classInfo, kindOf, GROUP_COLOURS } from "./graph.js";
import { busbwPlot } from "./plot.js";

const { hostname } = pageData();
const base = hostPath(hostname);
const $ = (id) => document.getElementById(id);

let cy = null;
let topology = null; // the core topology document: devices + links
let detail = null;
let p2p = null;
// The graph is drawn before the detail arrives; device details wait for the topology.
let topologyLoaded;
const topologyReady = new Promise((resolve) => { topologyLoaded = resolve; });

function deviceIndex() {
  const m = new Map();
  for (const d of topology?.devices || []) m.set(d.id, d);
  return m;
}

function linkClass(a, b) {
  if (a === b) return "X";
  for (const l of topology?.links || []) if ((l.a === a && l.b === b) || (l.a === b && l.b === a)) return l.class;
  return null;
}

const RANK = ["X", "NV", "PIX", "PXB", "PHB", "NODE", "SYS"];
const rank = (c) => RANK.indexOf(/^NV\d+$/.test(c) ? "NV" : c);

function nearestNics(gpuId) {
  const nics = (topology?.devices || []).filter((d) => d.kind === "nic");
  if (!nics.length) return [];
  const scored = nics.map((n) => ({ nic: n, cls: linkClass(gpuId, n.id) })).filter((x) => x.cls);
  const best = Math.min(...scored.map((x) => rank(x.cls)));
  return scored.filter((x) => rank(x.cls) === best);
}

function showDetails(node) {
  const box = clear($("details"));
  const d = node.data();
  const dev = deviceIndex().get(d.device || d.id) || deviceIndex().get(d.label) || {};
  const rows = [
    ["Device", d.label || d.id],
    ["Kind", kindOf(node)],
    ["NUMA node", dev.numa_affinity ?? d.numa_affinity ?? d.numa ?? "–"],
    ["CPU list", dev.cpu_affinity ?? d.cpu_affinity ?? "–"],
  ];
  if (dev.gpu_numa_id) rows.push(["GPU NUMA ID", dev.gpu_numa_id]);
  if (kindOf(node) === "gpu") {
    const near = nearestNics(dev.id || d.id);
    rows.push(["Nearest NIC", near.length ? near.map((x) => `${x.nic.nic_name || x.nic.id} (${x.cls})`).join(", ") : "none"]);
    const peers = (topology?.devices || []).filter((x) => x.kind === "gpu" && x.id !== (dev.id || d.id));
    const byClass = {};
    for (const p of peers) {
      const c = linkClass(dev.id || d.id, p.id);
      if (c) (byClass[c] = byClass[c] || []).push(p.id);
    }
    rows.push(["GPU peers", Object.entries(byClass).sort((a, b) => rank(a[0]) - rank(b[0])).map(([c, ids]) => `${c}: ${ids.length}`).join(" · ") || "–"]);
  }
  const dl = el("dl", { class: "kv" });
  for (const [k, v] of rows) dl.append(el("dt", { text: k }), el("dd", { text: String(v) }));
  box.append(dl);
}

async function loadGraph() {
  const status = $("graph-status");
  status.textContent = "Laying out…";
  const data = await getJSON(`${base}/graph/`);
  const elements = Array.isArray(data) ? data : data.elements || [...(data.nodes || []), ...(data.edges || [])];
  const t0 = performance.now();
  cy = await drawGraph($("graph"), elements);
  window.topowebCy = cy; // the e2e tests and bench/ui.py read the drawn graph here
  attachTooltips(cy, $("tooltip"));
  cy.on("tap", "node", (evt) => {
    const n = evt.target;
    if (kindOf(n) === "gpu") highlightPaths(cy, n);
    topologyReady.then(() => showDetails(n));
  });
  cy.on("tap", (evt) => { if (evt.target === cy) clearHighlight(cy); });
  const gpus = cy.nodes().filter((n) => kindOf(n) === "gpu").length;
  const nics = cy.nodes().filter((n) => kindOf(n) === "nic").length;
  status.textContent = `${gpus} GPUs · ${nics} NICs · ${cy.edges().length} edges · laid out in ${Math.round(performance.now() - t0)} ms`;
  window.topowebLayoutMs = performance.now() - t0;
  window.topowebLayoutDone = performance.now();
  document.body.dataset.graphReady = "1";
}

// --- matrix view ------------------------------------------------------------------------

function measuredMatrix() {
  if (!p2p) return null;
  const m = p2p.matrices || {};
  return m.unidirectional_p2p_enabled_gbps || m.bidirectional_p2p_enabled_gbps || null;
}

function renderMatrix(mode) {
  const wrap = clear($("matrix"));
  const devices = topology?.devices || [];
  if (!devices.length) { wrap.append(el("p", { class: "muted", text: "No topology yet." })); return; }
  const measured = measuredMatrix();
  const expected = detail?.analysis?.result?.expected_bandwidth_gbps || null;
  const table = el("table", { class: `matrix mode-${mode}` });
  const head = el("tr", {}, el("th", { text: "" }));
  for (const d of devices) head.append(el("th", { scope: "col", text: d.id }));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  const gpuPos = new Map(devices.filter((d) => d.kind === "gpu").map((d) => [d.id, d.index]));
  let maxMeasured = 0;
  if (measured) for (const r of measured) for (const v of r) maxMeasured = Math.max(maxMeasured, v);
  for (const a of devices) {
    const tr = el("tr", {}, el("th", { scope: "row", text: a.id }));
    for (const b of devices) {
      const c = linkClass(a.id, b.id);
      const td = el("td", { title: `${a.id} ↔ ${b.id}: ${c}` });
      const i = gpuPos.get(a.id);
      const j = gpuPos.get(b.id);
      const value = measured && i !== undefined && j !== undefined && measured[i] ? measured[i][j] : null;
      if (mode === "class" || value === null || a.id === b.id) {
        td.textContent = c === "X" ? "X" : c || "";
        if (c === "X") td.classList.add("self");
        const info = classInfo(c);
        if (info) { td.style.background = info.color; td.classList.add("cls", `cls-${info.key}`); }
        if (mode !== "class" && c !== "X") td.classList.add("dim");
      } else if (mode === "measured") {
        td.textContent = fmtNumber(value, 0);
        td.title += ` · measured ${fmtNumber(value, 1)} GB/s`;
        td.style.background = `hsl(210 70% ${95 - 55 * (value / (maxMeasured || 1))}%)`;
        if (value / (maxMeasured || 1) > 0.55) td.style.color = "#fff";
      } else {
        const exp = expected && expected[i] ? expected[i][j] : null;
        if (exp) {
          const ratio = value / exp;
          td.textContent = `${Math.round(ratio * 100)}%`;
          td.title += ` · measured ${fmtNumber(value, 1)} of expected ${fmtNumber(exp, 1)} GB/s`;
          td.style.background = ratio >= 0.8 ? "#cfe8d5" : ratio >= 0.5 ? "#ffe3a3" : "#f6b3ae";
        } else {
          td.textContent = "?";
        }
      }
      tr.append(td);
    }
    body.append(tr);
  }
  table.append(body);
  wrap.append(table);
  if (mode !== "class" && !measured) wrap.prepend(el("p", { class: "muted", text: "No p2pBandwidthLatencyTest result for this server yet; showing link classes." }));
}

function setView(view) {
  $("tooltip").hidden = true;
  const matrix = view === "matrix";
  $("view-graph").setAttribute("aria-pressed", String(!matrix));
  $("view-matrix").setAttribute("aria-pressed", String(matrix));
  $("graph").hidden = matrix;
  $("matrix").hidden = !matrix;
  $("matrix-mode-label").hidden = !matrix;
  if (matrix) renderMatrix($("matrix-mode").value);
  else if (cy) { cy.resize(); cy.fit(undefined, 24); }
}

// --- panels -----------------------------------------------------------------------------

function renderFindings(findings) {
  const ul = clear($("findings"));
  if (!findings || !findings.length) { ul.append(el("li", { class: "finding ok", text: "No findings: wiring matches expectations." })); return; }
  for (const f of findings) {
    const sev = f.severity || f.level || "info";
    ul.append(el("li", { class: `finding sev-${sev}` }, el("span", { class: `badge sev-${sev}`, text: sev }), " ", el("span", { text: f.message || f.title || f.code || JSON.stringify(f) })));
  }
}

function renderSummary(s) {
  const parts = [];
  const sku = s.sku ?? s.sku_name;
  if (sku) parts.push(`SKU ${sku}`);
  if (s.gpu_count != null) parts.push(`${s.gpu_count}x ${s.gpu_model || "GPU"}`);
  if (s.nvlink_summary) parts.push(s.nvlink_summary);
  if (s.nic_count != null) parts.push(`${s.nic_count} NICs`);
  parts.push(`last seen ${fmtAgo(s.last_seen_at || s.last_seen)}`);
  $("server-summary").textContent = parts.join(" · ");
  const badges = clear($("server-badges"));
  badges.append(healthBadge(s.health, (s.findings || []).length));
  const a = s.analysis;
  if (a) badges.append(el("span", { class: `badge analysis-${a.status}`, text: `analysis ${a.status}` }));
  if (sku) badges.append(el("a", { class: "badge", href: `/compare/?a=${encodeURIComponent(sku)}&b=`, text: "compare SKU…" }));
  badges.append(el("a", { class: "badge", href: `/servers/${encodeURIComponent(hostname)}/acceptance/`, text: "acceptance report" }));
  badges.append(el("a", { class: "badge", href: `/upload/?host=${encodeURIComponent(hostname)}`, text: "upload output" }));
}

async function loadBenchmarks() {
  const tbody = document.querySelector("#bench-table tbody");
  const data = await getJSON("benchmarks/", { hostname });
  const list = (data.results || data).slice(0, 12);
  clear(tbody);
  if (!list.length) tbody.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No benchmark results yet." })));
  const series = [];
  for (const b of list) {
    // The list leaves the parsed document out; the newest few are fetched for the plot.
    const doc = b.document || (b.id != null ? (await getJSON(`benchmarks/${b.id}/`).catch(() => ({}))).document : null);
    const failed = doc && doc.errors && doc.errors.length;
    tbody.append(el("tr", {},
      el("td", { title: b.captured_at, text: fmtAgo(b.captured_at) }),
      el("td", { text: b.kind }),
      el("td", { text: b.collective || doc?.collective || "–" }),
      el("td", { class: "num", text: b.avg_busbw_gbps != null ? `${fmtNumber(b.avg_busbw_gbps, 1)} GB/s` : "–" }),
      el("td", {}, failed ? el("span", { class: "badge sev-critical", text: "failed" }) : el("span", { class: "badge health-ok", text: "ok" }))));
    if (doc && doc.kind === "nccl-tests" && doc.rows && doc.rows.length) {
      series.push({
        label: `measured ${doc.collective || "nccl"} (${fmtAgo(b.captured_at)})`,
        points: doc.rows.map((r) => [r.bytes, r.out_of_place?.busbw_gbps ?? null]),
      });
    }
    if (doc && doc.kind === "p2p-bandwidth-latency" && !p2p) p2p = doc;
  }
  const modelled = detail?.analysis?.result?.allreduce_curve || detail?.analysis?.result?.busbw_curve;
  if (modelled && modelled.length) {
    series.push({ label: "modelled AllReduce", dashed: true, points: modelled.map((p) => [p.bytes ?? p[0], p.busbw_gbps ?? p[1]]) });
  }
  const plot = clear($("bench-plot"));
  if (series.length) busbwPlot(plot, series);
  else plot.append(el("p", { class: "muted", text: "Upload nccl-tests output to see bus bandwidth against message size." }));
}

async function loadHistory() {
  const tbody = document.querySelector("#history-table tbody");
  const data = await getJSON(`${base}/snapshots/`);
  const list = data.results || data;
  clear(tbody);
  list.forEach((s, i) => {
    const older = list[i + 1];
    const changes = [];
    if (older) {
      if (older.gpu_count !== s.gpu_count) changes.push(`GPUs ${older.gpu_count}→${s.gpu_count}`);
      if (older.nic_count !== s.nic_count) changes.push(`NICs ${older.nic_count}→${s.nic_count}`);
      if ((older.nvlink_summary || "") !== (s.nvlink_summary || "")) changes.push(`NVLink ${older.nvlink_summary || "none"}→${s.nvlink_summary || "none"}`);
      if (older.topology_fingerprint && older.topology_fingerprint !== s.topology_fingerprint) changes.push("wiring changed");
    }
    tbody.append(el("tr", {},
      el("td", { title: s.captured_at, text: new Date(s.captured_at).toLocaleString() }),
      el("td", { text: s.source }),
      el("td", { class: "num", text: s.gpu_count }),
      el("td", { class: "num", text: s.nic_count }),
      el("td", { text: s.nvlink_summary || "none" }),
      el("td", {}, older ? (changes.length ? el("span", { class: "badge sev-warning", text: changes.join("; ") }) : el("span", { class: "muted", text: "no change" })) : el("span", { class: "muted", text: "first" }))));
  });
}

async function loadPresets() {
  try {
    const data = await getJSON("models/");
    const select = document.querySelector("#placement-form select[name=model]");
    for (const m of data.results || data) select.append(el("option", { value: m.name || m.id, text: m.label || m.name || m.id }));
  } catch { /* presets are optional: the default one is used */ }
}

async function place(evt) {
  evt.preventDefault();
  const out = clear($("placement-result"));
  const f = new FormData(evt.target);
  const params = Object.fromEntries([...f.entries()].filter(([, v]) => v !== ""));
  out.append(el("p", { class: "muted", text: "Computing…" }));
  try {
    const res = await getJSON(`${base}/placement/`, params);
    clear(out);
    const groups = res.groups || (res.tp_groups || []);
    if (cy) colourGroups(cy, groups.map((g) => g.gpus || g), res.group_kind || "TP");
    const list = el("ol", { class: "groups" });
    groups.forEach((g, i) => {
      const sw = el("span", { class: "swatch-box", "aria-hidden": "true" });
      sw.style.background = GROUP_COLOURS[i % GROUP_COLOURS.length];
      list.append(el("li", {}, sw, el("span", { text: `${res.group_kind || "TP"} ${i}: ${(g.gpus || g).map((x) => (typeof x === "number" ? `GPU${x}` : x)).join(", ")}` })));
    });
    out.append(list);
    const times = res.predicted || res.times || {};
    const dl = el("dl", { class: "kv" });
    for (const [k, v] of Object.entries(times)) dl.append(el("dt", { text: k.replace(/_/g, " ") }), el("dd", { text: typeof v === "number" ? fmtTime(v) : String(v) }));
    if (dl.childNodes.length) out.append(dl);
    document.body.dataset.placementReady = "1";
  } catch (err) {
    clear(out);
    out.append(el("p", { class: "error", text: `Placement unavailable: ${err.message}` }));
  }
}

async function main() {
  renderLegend($("legend"));
  $("view-graph").addEventListener("click", () => setView("graph"));
  $("view-matrix").addEventListener("click", () => setView("matrix"));
  $("matrix-mode").addEventListener("change", () => renderMatrix($("matrix-mode").value));
  $("fit-graph").addEventListener("click", () => cy && cy.fit(undefined, 24));
  $("clear-selection").addEventListener("click", () => { if (cy) { clearHighlight(cy); colourGroups(cy, []); } clear($("placement-result")); });
  $("placement-form").addEventListener("submit", place);
  // The graph needs nothing from the detail: start it at once, it is what people wait for.
  const graph = loadGraph().catch((err) => showError($("graph-status"), err));
  try {
    detail = await getJSON(`${base}/`);
  } catch (err) {
    showError($("server-error"), err);
    $("server-summary").textContent = "";
    topologyLoaded();
    return;
  }
  renderSummary(detail);
  renderFindings(detail.findings);
  topology = detail.snapshot?.document || null;
  if (!topology && detail.latest_snapshot_id != null) {
    const snap = await getJSON(`snapshots/${detail.latest_snapshot_id}/`).catch(() => null);
    topology = snap ? snap.document : null;
  }
  topologyLoaded();
  await Promise.all([
    graph,
    loadBenchmarks().catch((err) => showError($("bench-plot"), err)),
    loadHistory().catch((err) => showError($("history-diff"), err)),
    loadPresets(),
  ]);
}

main();
