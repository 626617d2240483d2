// Server page: the topology graph and matrix, device details, findings, benchmarks,
// placement advice and snapshot history of one server, all from the JSON API.

import { el, clear, getJSON, postJSON, hostPath, pageData, fmtNumber, fmtTime, fmtAgo, fmtDate, healthBadge, showError } from "./api.js";
import { drawGraph, renderLegend, attachTooltips, highlightPaths, clearHighlight, colourGroups, classInfo, kindOf, GROUP_COLOURS } from "./graph.js";
import { busbwPlot } from "./plot.js";

const { hostname } = pageData();
const base = hostPath(hostname);
const $ = (id) => document.getElementById(id);

let cy = null;
let topology = null; // the core topology document: devices + links
let detail = null;
let p2p = null;
let presets = []; // model presets: [{key, name, layers, hidden, ...}]
// GPU affinity (NUMA node, CPU list, nearest NICs) from the API, fetched once on first use.
let affinityPromise = null;
const affinityDoc = () => (affinityPromise ||= getJSON(`${base}/affinity/`).catch(() => null));
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

function showDetails(node, affinity) {
  const box = clear($("details"));
  const d = node.data();
  const dev = deviceIndex().get(d.device || d.id) || deviceIndex().get(d.label) || {};
  const isGpu = kindOf(node) === "gpu";
  const index = dev.index ?? d.index;
  const aff = isGpu ? (affinity?.gpus || []).find((g) => g.gpu === index) : null;
  const rows = [
    ["Device", d.label || d.id],
    ["Kind", kindOf(node)],
    ["NUMA node", aff?.numa_node ?? dev.numa_affinity ?? d.numa_affinity ?? d.numa ?? "–"],
    ["CPU list", aff?.cpu_list ?? dev.cpu_affinity ?? d.cpu_affinity ?? "–"],
  ];
  if (dev.gpu_numa_id) rows.push(["GPU NUMA ID", dev.gpu_numa_id]);
  if (isGpu) {
    if (aff) {
      rows.push(["Nearest NIC", aff.nearest_nics.length ? aff.nearest_nics.map((n) => `${n} (${aff.nic_class})`).join(", ") : "none"]);
    } else {
      const near = nearestNics(dev.id || d.id);
      rows.push(["Nearest NIC", near.length ? near.map((x) => `${x.nic.nic_name || x.nic.id} (${x.cls})`).join(", ") : "none"]);
    }
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
  if (aff?.warning) box.append(el("p", { class: "warning-note", role: "note" }, el("strong", { text: "⚠ " }), aff.warning));
  const hint = isGpu ? (affinity?.binding_hints || [])[affinity.gpus.indexOf(aff)] : null;
  if (hint) box.append(el("p", { class: "muted small" }, "Bind a rank on it: ", el("code", { text: hint.replace(/^GPU\d+:\s*/, "") })));
}

// Server-wide launch advice: the GPU order and each GPU's NUMA binding and NIC.
function renderAffinity(affinity) {
  const box = clear($("affinity"));
  if (!affinity) { box.append(el("p", { class: "muted", text: "No affinity information (no topology yet)." })); return; }
  box.append(el("p", {}, "All GPUs, nearest first per NUMA node: ", el("code", { id: "cuda-visible-devices", text: `CUDA_VISIBLE_DEVICES=${affinity.cuda_visible_devices}` })));
  const warned = (affinity.gpus || []).filter((g) => g.warning);
  for (const g of warned) box.append(el("p", { class: "warning-note" }, el("strong", { text: `⚠ GPU${g.gpu}: ` }), g.warning));
  if (affinity.binding_hints?.length) {
    const list = el("ul", { class: "hints" });
    for (const h of affinity.binding_hints) list.append(el("li", {}, el("code", { text: h })));
    box.append(el("details", {}, el("summary", { text: "Per-GPU binding (numactl, NCCL_IB_HCA)" }), list));
  }
}

async function loadGraph() {
  const status = $("graph-status");
  status.textContent = "Laying out…";
  const data = await getJSON(`${base}/graph/`);
  const t0 = performance.now();
  cy = await drawGraph($("graph"), data);
  window.topowebCy = cy; // the e2e tests and bench/ui.py read the drawn graph here
  attachTooltips(cy, $("tooltip"));
  cy.on("tap", "node", (evt) => {
    const n = evt.target;
    if (kindOf(n) === "gpu") highlightPaths(cy, n);
    Promise.all([topologyReady, kindOf(n) === "gpu" ? affinityDoc() : null]).then(([, aff]) => showDetails(n, aff));
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

// The measured p2p matrix of one direction ("uni" or "bi"); the other one when only it exists.
function measuredMatrix(direction) {
  if (!p2p) return null;
  const m = p2p.matrices || {};
  const uni = m.unidirectional_p2p_enabled_gbps ? { values: m.unidirectional_p2p_enabled_gbps, direction: "uni" } : null;
  const bi = m.bidirectional_p2p_enabled_gbps ? { values: m.bidirectional_p2p_enabled_gbps, direction: "bi" } : null;
  return direction === "bi" ? bi || uni : uni || bi;
}

// What the cost model expects between two GPUs in the same direction as the measurement.
function expectedMatrix(direction) {
  const pred = detail?.analysis?.result?.p2p_prediction;
  if (!pred) return null;
  return direction === "bi" ? pred.bidirectional_gbps : pred.unidirectional_gbps;
}

function renderMatrix(mode) {
  const wrap = clear($("matrix"));
  const devices = topology?.devices || [];
  if (!devices.length) { wrap.append(el("p", { class: "muted", text: "No topology yet." })); return; }
  const found = measuredMatrix($("matrix-direction").value);
  const measured = found ? found.values : null;
  const expected = found ? expectedMatrix(found.direction) : null;
  const table = el("table", { class: `matrix mode-${mode}` });
  const head = el("tr", {}, el("th", { text: "" }));
  // One NIC naming on every view: the legend's RDMA name (mlx5_0) when the capture has one.
  const nameOf = (d) => (d.kind === "nic" && d.nic_name) || d.id;
  for (const d of devices) head.append(el("th", { scope: "col", text: nameOf(d) }));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  const gpuPos = new Map(devices.filter((d) => d.kind === "gpu").map((d) => [d.id, d.index]));
  let maxMeasured = 0;
  if (measured) for (const r of measured) for (const v of r) maxMeasured = Math.max(maxMeasured, v);
  for (const a of devices) {
    const tr = el("tr", {}, el("th", { scope: "row", text: nameOf(a) }));
    for (const b of devices) {
      const c = linkClass(a.id, b.id);
      const td = el("td", { title: `${nameOf(a)} ↔ ${nameOf(b)}: ${c}` });
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
  else if (mode !== "class") {
    const dir = found.direction === "bi" ? "bidirectional" : "unidirectional";
    const note = mode === "ratio"
      ? (expected ? `Measured ${dir} P2P bandwidth as a share of the cost model's ${dir} prediction: ≥ 80 % green, ≥ 50 % amber, below red.` : "No cost-model prediction for this server yet (analysis pending).")
      : `Measured ${dir} P2P bandwidth, GB/s.`;
    wrap.prepend(el("p", { class: "muted matrix-note", text: note }));
  }
}

function setView(view) {
  $("tooltip").hidden = true;
  const matrix = view === "matrix";
  $("view-graph").setAttribute("aria-pressed", String(!matrix));
  $("view-matrix").setAttribute("aria-pressed", String(matrix));
  $("graph").hidden = matrix;
  $("matrix").hidden = !matrix;
  $("matrix-mode-label").hidden = !matrix;
  $("matrix-direction-label").hidden = !matrix;
  if (matrix) renderMatrix($("matrix-mode").value);
  else if (cy) { cy.resize(); cy.fit(undefined, 24); }
}

// --- panels -----------------------------------------------------------------------------

function renderFindings(findings, hasTopology) {
  const ul = clear($("findings"));
  if (!hasTopology) { ul.append(el("li", { class: "finding muted", text: "Nothing checked yet: the checks need this server's topology (nvidia-smi topo -m)." })); return; }
  if (!findings || !findings.length) { ul.append(el("li", { class: "finding ok", text: "No findings: wiring matches expectations." })); return; }
  for (const f of findings) {
    const sev = f.severity || f.level || "info";
    ul.append(el("li", { class: `finding sev-${sev}` }, el("span", { class: `badge sev-${sev}`, text: sev }), " ", el("span", { text: f.message || f.kind || JSON.stringify(f) })));
  }
}

function renderSummary(s) {
  const parts = [];
  const sku = s.sku;
  if (sku) parts.push(`SKU ${sku}`);
  if (s.gpu_count != null) parts.push(s.gpu_model ? `${s.gpu_count}x ${s.gpu_model}` : `${s.gpu_count} GPUs (model not reported)`);
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

// The benchmark table (newest runs), and the p2p run the matrix view compares with.
async function loadBenchmarkTable() {
  const tbody = document.querySelector("#bench-table tbody");
  const data = await getJSON("benchmarks/", { hostname });
  const list = (data.results || data).slice(0, 12);
  clear(tbody);
  if (!list.length) tbody.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No benchmark results yet." })));
  for (const b of list) {
    // The list leaves the parsed document out; the newest few are fetched for their status.
    const doc = b.document || (b.id != null ? (await getJSON(`benchmarks/${b.id}/`).catch(() => ({}))).document : null);
    const failed = doc && doc.errors && doc.errors.length;
    tbody.append(el("tr", {},
      el("td", { title: fmtDate(b.captured_at), text: fmtAgo(b.captured_at) }),
      el("td", { text: b.kind }),
      el("td", { text: b.collective || doc?.collective || "–" }),
      el("td", { class: "num", text: b.avg_busbw_gbps != null ? `${fmtNumber(b.avg_busbw_gbps, 1)} GB/s` : "–" }),
      el("td", {}, failed ? el("span", { class: "badge sev-critical", text: "failed" }) : el("span", { class: "badge health-ok", text: "ok" }))));
    if (doc && doc.kind === "p2p-bandwidth-latency" && !p2p) p2p = doc;
  }
}

// Bus bandwidth against message size: the cost model's all_reduce curve over all GPUs
// (and its calibrated copy), with every measured nccl-tests sweep of this server.
async function loadBenchmarkPlot() {
  const doc = await getJSON(`${base}/cost-tables/`);
  const series = [];
  const add = (costs, label, dashed) => {
    const c = costs?.curves?.all_reduce;
    if (!c) return;
    series.push({ label, kind: "modelled", dashed, points: costs.sizes.map((x, i) => [x, c.busbw_gbps[i]]) });
  };
  const gpus = doc.costs?.curve_gpus?.length;
  add(doc.costs, `modelled all_reduce, ${gpus} GPUs`, true);
  add(doc.calibrated_costs, `modelled all_reduce, calibrated on measurements`, true);
  for (const m of doc.measured || []) {
    series.push({ label: `measured ${m.collective}, ${m.gpu_count} GPUs (run ${m.benchmark_id})`, kind: "measured", points: m.bytes.map((x, i) => [x, m.busbw_gbps[i]]) });
  }
  const plot = clear($("bench-plot"));
  if (!series.length) {
    const why = doc.analysis_status === "done" ? "" : ` (analysis ${doc.analysis_status || "not run"})`;
    plot.append(el("p", { class: "muted", text: `No modelled curve yet${why}; upload nccl-tests output to see measured bus bandwidth.` }));
    return;
  }
  if (!(doc.measured || []).length) plot.append(el("p", { class: "muted small", text: "Modelled only: upload nccl-tests output to compare with a measurement." }));
  window.topowebBenchPlot = busbwPlot(plot, series); // read by the e2e tests
  window.topowebBenchSeries = series.map((s) => ({ label: s.label, kind: s.kind, points: s.points.filter((p) => p[1] != null).length }));
  document.body.dataset.benchReady = "1";
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
      if (older.fingerprint && older.fingerprint !== s.fingerprint) changes.push("wiring changed");
    }
    tbody.append(el("tr", {},
      el("td", { title: s.captured_at, text: fmtDate(s.captured_at) }),
      el("td", { text: s.source }),
      el("td", { class: "num", text: s.gpu_count }),
      el("td", { class: "num", text: s.nic_count }),
      el("td", { text: s.nvlink_summary || "none" }),
      el("td", {}, older ? (changes.length ? el("span", { class: "badge sev-warning", text: changes.join("; ") }) : el("span", { class: "muted", text: "no change" })) : el("span", { class: "muted", text: "first" }))));
  });
}

async function loadPresets() {
  const select = document.querySelector("#placement-form select[name=model]");
  try {
    presets = await getJSON("model-presets/");
  } catch { return; /* the API's default preset is used */ }
  for (const m of presets) {
    const shape = `${m.layers} layers, hidden ${m.hidden}`;
    select.append(el("option", { value: m.key, text: m.name, title: shape }));
  }
}

const dimensionName = { tp: "TP", pp: "PP", dp: "DP", ep: "EP" };

// Where the predicted step time goes: compute, communication left exposed per dimension, the
// pipeline bubble (all figures from the API; nothing is computed here).
function stepBreakdown(b) {
  const table = el("table", { class: "grid compact step-breakdown", "aria-label": "Step time breakdown" });
  const body = el("tbody");
  const row = (label, us, title) => body.append(el("tr", { dataset: { part: label } }, el("td", { text: label, title: title || "" }), el("td", { class: "num", text: fmtTime(us) })));
  row("compute", b.compute_us, `${b.micro_batches} micro-batches`);
  for (const [dim, us] of Object.entries(b.exposed_comm_us || {})) {
    row(`${dimensionName[dim] || dim} exposed`, us, dim === "dp" ? `${fmtTime(b.dp_hidden_us)} of ${fmtTime(b.dp_reduction_us)} hidden behind the backward pass` : "");
  }
  row("pipeline bubble", b.bubble_us);
  table.append(el("thead", {}, el("tr", {}, el("th", { text: "Step part" }), el("th", { text: "Time" }))), body);
  return table;
}

// Per-GPU memory of the layout against what the GPU offers, with a fits / does not fit badge.
function memoryFit(m, gpu) {
  const box = el("div", { class: "memory-fit", dataset: { fits: String(m.fits) } });
  const badge = el("span", { class: `badge ${m.fits ? "health-ok" : "sev-critical"}`, text: m.fits ? "fits" : "does not fit" });
  const gb = (x) => `${fmtNumber(x, 1)} GB`;
  box.append(el("p", { class: "small" }, badge, ` ${gb(m.total_gb)} of ${gb(m.usable_gb)} usable per GPU${gpu ? ` (${gpu.name})` : ""}: `,
    `weights ${gb(m.weights_gb)}, gradients ${gb(m.gradients_gb)}, optimizer ${gb(m.optimizer_gb)} (ZeRO-${m.zero}), activations ${gb(m.activations_gb)}`));
  return box;
}

// Draws one placement answer (from the API or a stored layout): TP groups coloured and
// labelled on the graph, the groups listed, the times and the per-dimension costs.
function renderPlacement(res) {
  const out = clear($("placement-result"));
  const groups = res.groups || {};
  const tp = groups.tp || [];
  if (cy) colourGroups(cy, tp, "TP");
  const head = `TP${res.layout.tp} · PP${res.layout.pp} · DP${res.layout.dp}${res.layout.ep > 1 ? ` · EP${res.layout.ep}` : ""}`;
  out.append(el("p", { class: "placement-head" }, el("strong", { text: head }), ` for ${res.model}`));
  const list = el("ol", { class: "groups", "aria-label": "TP groups" });
  tp.forEach((g, i) => {
    const sw = el("span", { class: "swatch-box", "aria-hidden": "true" });
    sw.style.background = GROUP_COLOURS[i % GROUP_COLOURS.length];
    list.append(el("li", { dataset: { gpus: g.join(",") } }, sw, el("strong", { text: `TP ${i}` }), `: ${g.map((x) => `GPU${x}`).join(", ")}`));
  });
  out.append(list);
  const others = ["pp", "dp", "ep"].filter((k) => groups[k] && groups[k].some((g) => g.length > 1));
  for (const k of others) {
    out.append(el("p", { class: "muted small other-groups" }, `${dimensionName[k]} groups: `, groups[k].map((g) => `{${g.join(",")}}`).join(" ")));
  }
  const dl = el("dl", { class: "kv" });
  const improvement = res.improvement > 0
    ? `${fmtNumber(res.improvement * 100, 1)} % faster than the naive order`
    : res.uniform ? "none: every order costs the same here" : "none: GPU index order is already the best here";
  const rows = [
    ["Predicted step time", fmtTime(res.predicted_step_time_us)],
    ["Naive order (0..n-1)", fmtTime(res.naive_step_time_us)],
    ["Improvement", improvement],
  ];
  if (res.leftover && res.free && res.free.length > res.gpus.length) {
    rows.push(["GPUs taken", res.gpus.map((g) => `GPU${g}`).join(", ")], ["Left free", res.leftover.map((g) => `GPU${g}`).join(", ") || "none"]);
  }
  for (const [k, v] of rows) dl.append(el("dt", { text: k }), el("dd", { text: v }));
  out.append(dl);
  if (res.breakdown) out.append(stepBreakdown(res.breakdown));
  if (res.memory) out.append(memoryFit(res.memory, res.gpu));
  const table = el("table", { class: "grid compact per-dimension" });
  table.append(el("thead", {}, el("tr", {}, ...["Dim", "Each × count", "Total", "Limit"].map((t) => el("th", { text: t })))));
  const body = el("tbody");
  for (const d of res.per_dimension || []) {
    body.append(el("tr", { dataset: { dimension: d.dimension } },
      el("td", {}, el("strong", { text: dimensionName[d.dimension] || d.dimension }), el("br"), el("span", { class: "muted small", text: d.collective })),
      el("td", { class: "num", text: `${fmtTime(d.each_us)} × ${d.count}` }),
      el("td", { class: "num", text: fmtTime(d.total_us) }),
      el("td", { title: d.bottleneck }, el("span", { class: `badge bottleneck bn-${d.bottleneck_class}`, text: d.bottleneck_class }))));
  }
  table.append(body);
  out.append(table);
  if (res.mapping) out.append(el("p", { class: "small" }, "Rank order: ", el("code", { class: "mapping", text: `CUDA_VISIBLE_DEVICES=${res.mapping.join(",")}` })));
  const notes = [res.search && `search: ${res.search}`, res.calibrated ? "calibrated on this class's measurements" : "uncalibrated model", res.assumption].filter(Boolean);
  out.append(el("p", { class: "muted small", text: notes.join(" · ") }));
  document.body.dataset.placementReady = String(Number(document.body.dataset.placementReady || 0) + 1);
}

async function place(evt) {
  evt.preventDefault();
  const out = clear($("placement-result"));
  const f = new FormData(evt.target);
  const body = {};
  for (const k of ["tp", "pp", "dp", "ep", "seq", "global_batch", "micro_batch", "zero"]) if (f.get(k) !== "" && f.get(k) !== null) body[k] = Number(f.get(k));
  if (f.get("model")) body.model = f.get("model");
  if (f.get("free")) body.free = String(f.get("free")).split(",").map((x) => Number(x.trim())).filter((x) => Number.isInteger(x));
  out.append(el("p", { class: "muted", text: "Computing…" }));
  try {
    renderPlacement(await postJSON(`${base}/placement/`, body));
  } catch (err) {
    if (cy) colourGroups(cy, []);
    clear(out).append(el("p", { class: "error", role: "alert", id: "placement-error", text: `Cannot place this job: ${err.message}` }));
    document.body.dataset.placementError = "1";
  }
}

// The stored layouts of the default preset, fitting ones first, fastest first; a click shows
// that placement. Below: each preset's recommendation, or why it fits on no layout here.
function renderBestLayouts() {
  const box = clear($("best-layouts"));
  const result = detail?.analysis?.result || {};
  const stepOf = (d) => d.predicted_step_time_us ?? d.predicted_step_comm_us;
  const layouts = [...(result.layouts || [])].sort((a, b) => (b.fits !== false) - (a.fits !== false) || stepOf(a) - stepOf(b));
  if (!layouts.length) {
    const status = detail?.analysis?.status;
    const why = !detail?.latest_snapshot_id ? "Placement needs this server's topology: none captured yet."
      : status === "failed" ? `The analysis failed${detail.analysis.error ? `: ${detail.analysis.error}` : ""}; no stored layouts.`
      : status === "done" ? "The analysis stored no layouts for this topology."
      : "Stored layouts appear once the analysis is done.";
    box.append(el("p", { class: "muted small", id: "best-layouts-empty", text: why }));
    return;
  }
  box.append(el("h3", { text: `Fastest layouts for ${layouts[0].model}` }));
  if (result.step_assumptions) box.append(el("p", { class: "muted small", text: `Predicted step time: ${result.step_assumptions}.` }));
  const list = el("ol", { class: "best-layouts" });
  for (const doc of layouts.slice(0, 5)) {
    const { tp, pp, dp } = doc.layout;
    const apply = () => {
      const form = $("placement-form");
      form.elements.tp.value = tp; form.elements.pp.value = pp; form.elements.dp.value = dp; form.elements.ep.value = "";
      const preset = presets.find((m) => m.name === doc.model);
      form.elements.model.value = preset ? preset.key : "";
      renderPlacement(doc);
    };
    list.append(el("li", {}, el("button", { type: "button", class: "link-button", dataset: { layout: `${tp}x${pp}x${dp}` }, onclick: apply },
      el("strong", { text: `TP${tp} · PP${pp} · DP${dp}` }), " ", el("span", { class: "muted", text: fmtTime(stepOf(doc)) }),
      doc.fits === false ? el("span", { class: "badge sev-critical", text: "does not fit" }) : "")));
  }
  box.append(list);
  const recs = result.recommendations || {};
  if (Object.keys(recs).length) {
    const ul = el("ul", { class: "recommendations small", "aria-label": "Recommended layout per preset" });
    for (const [key, rec] of Object.entries(recs)) {
      const r = rec.recommended;
      const text = r
        ? `TP${r.layout.tp} · PP${r.layout.pp} · DP${r.layout.dp}${r.layout.ep > 1 ? ` · EP${r.layout.ep}` : ""}, ${fmtTime(r.predicted_step_time_us)} per step`
        : (rec.no_fit?.message || "fits no layout");
      ul.append(el("li", { dataset: { preset: key } }, el("strong", { text: `${rec.model?.name || key}: ` }), text));
    }
    box.append(el("h3", { text: "Recommended per model" }), ul);
  }
}

// What the topo -m reader had to guess or repair in this capture, listed where people look.
function renderReaderWarnings(warnings) {
  const panel = $("reader-warnings-panel");
  panel.hidden = !warnings.length;
  const list = clear($("reader-warnings"));
  for (const w of warnings) list.append(el("li", { text: w }));
}

// A host known only by its benchmarks: no empty graph, and say what would fill the page.
function renderNoTopology() {
  $("graph").hidden = true;
  $("graph-status").textContent = "";
  for (const id of ["view-graph", "view-matrix", "fit-graph", "clear-selection"]) $(id).disabled = true;
  const note = $("no-topology");
  note.hidden = false;
  note.querySelector("a").href = `/upload/?host=${encodeURIComponent(hostname)}`;
}

async function main() {
  renderLegend($("legend"));
  $("view-graph").addEventListener("click", () => setView("graph"));
  $("view-matrix").addEventListener("click", () => setView("matrix"));
  $("matrix-mode").addEventListener("change", () => renderMatrix($("matrix-mode").value));
  $("matrix-direction").addEventListener("change", () => renderMatrix($("matrix-mode").value));
  $("fit-graph").addEventListener("click", () => cy && cy.fit(undefined, 24));
  $("clear-selection").addEventListener("click", () => { if (cy) { clearHighlight(cy); colourGroups(cy, []); } clear($("placement-result")); });
  $("placement-form").addEventListener("submit", place);
  // The graph needs nothing from the detail: start it at once, it is what people wait for.
  // A 404 means no topology yet: the detail below says so in place of an empty graph.
  const graph = loadGraph().catch((err) => { if (err.status !== 404) showError($("graph-status"), err); });
  const presetsLoaded = loadPresets();
  try {
    detail = await getJSON(`${base}/`);
  } catch (err) {
    showError($("server-error"), err);
    $("server-summary").textContent = "";
    topologyLoaded();
    return;
  }
  renderSummary(detail);
  const hasTopology = detail.latest_snapshot_id != null;
  renderFindings(detail.findings, hasTopology);
  if (!hasTopology) renderNoTopology();
  topology = detail.snapshot?.document || null;
  if (!topology && detail.latest_snapshot_id != null) {
    const snap = await getJSON(`snapshots/${detail.latest_snapshot_id}/`).catch(() => null);
    topology = snap ? snap.document : null;
  }
  topologyLoaded();
  renderReaderWarnings(topology?.warnings || []);
  await Promise.all([
    graph,
    presetsLoaded.then(renderBestLayouts),
    affinityDoc().then(renderAffinity),
    loadBenchmarkTable().catch((err) => showError($("bench-error"), err)),
    loadBenchmarkPlot().catch((err) => showError($("bench-error"), err)),
    loadHistory().catch((err) => showError($("history-diff"), err)),
  ]);
}

main();
