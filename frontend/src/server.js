// Server page: the topology graph and matrix, device details, findings, benchmarks,
// placement advice and snapshot history of one server. Everything arrives in one answer from
// GET servers/<hostname>/page/, decided on the server; this module only draws it. The view
// (graph or matrix, matrix mode and direction, selected GPU, NIC groups) lives in the URL, so
// a copied link reopens what is on screen.

import { el, clear, getJSON, postJSON, hostPath, pageData, fmtNumber, fmtTime, fmtAgo, fmtDate, healthBadge, showError } from "./api.js";
import { drawGraph, fitGraph, renderLegend, attachTooltips, highlightPaths, highlightPairs, clearHighlight, colourGroups, classInfo, kindOf, setNicMode, downloadPng, GROUP_COLOURS } from "./graph.js";
import { busbwPlot } from "./plot.js";

const { hostname } = pageData();
const base = hostPath(hostname);
const pagePath = `/servers/${encodeURIComponent(hostname)}/`;
const $ = (id) => document.getElementById(id);

let cy = null;
let state = null; // the page document
let presets = [];
const view = new URLSearchParams(window.location.search);

// --- the view in the URL -----------------------------------------------------------------

function saveView(changes) {
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === "") view.delete(k);
    else view.set(k, v);
  }
  const query = view.toString();
  window.history.replaceState(null, "", pagePath + (query ? `?${query}` : ""));
  refreshExports();
}

function refreshExports() {
  const link = $("share-link");
  if (link) link.href = window.location.href;
  const nics = view.get("nics") || "";
  $("export-svg").href = `${pagePath}graph.svg${nics ? `?nics=${nics}` : ""}`;
  const csv = new URLSearchParams({ mode: $("matrix-mode").value, direction: $("matrix-direction").value });
  $("export-csv").href = `${pagePath}matrix.csv?${csv}`;
}

// --- graph -------------------------------------------------------------------------------

function showDetails(id) {
  const box = clear($("details"));
  const d = state?.devices?.[id];
  if (!d) return;
  const dl = el("dl", { class: "kv" });
  for (const [k, v] of d.rows) dl.append(el("dt", { text: k }), el("dd", { text: v }));
  box.append(dl);
  if (d.warning) box.append(el("p", { class: "warning-note", role: "note" }, el("strong", { text: "⚠ " }), d.warning));
  if (d.hint) box.append(el("p", { class: "muted small" }, "Bind a rank on it: ", el("code", { text: d.hint })));
}

function selectGpu(node) {
  highlightPaths(cy, node);
  showDetails(node.id());
  saveView({ gpu: node.id() });
}

function drawn() {
  const graph = state.graph;
  const status = $("graph-status");
  const t0 = performance.now();
  const nics = view.get("nics");
  const collapsed = nics === "all" ? false : nics === "grouped" ? true : graph.nic_groups.collapsed;
  return drawGraph($("graph"), graph, { collapsed }).then((c) => {
    cy = c;
    window.topowebCy = cy; // the e2e tests and bench/ui.py read the drawn graph here
    // The panel can still settle after the first fit (the panels around it arriving): until
    // the person moves the view, refit to its settled size, so every load draws one picture.
    const panel = $("graph");
    let moved = false;
    for (const type of ["wheel", "mousedown", "touchstart"]) panel.addEventListener(type, () => { moved = true; }, { passive: true });
    new ResizeObserver(() => { if (!moved && !panel.hidden && cy === c) { cy.resize(); fitGraph(cy); } }).observe(panel);
    attachTooltips(cy, $("tooltip"));
    cy.on("tap", "node", (evt) => {
      const n = evt.target;
      if (kindOf(n) === "gpu") selectGpu(n);
      else showDetails(n.id());
    });
    cy.on("tap", (evt) => { if (evt.target === cy) { clearHighlight(cy); saveView({ gpu: null }); } });
    const toggle = $("nic-toggle");
    toggle.hidden = !graph.nic_groups.present;
    const label = () => { toggle.textContent = cy.scratch("_nicCollapsed") ? "Show every NIC" : "Group NICs per switch"; };
    label();
    toggle.addEventListener("click", () => {
      const now = !cy.scratch("_nicCollapsed");
      setNicMode(cy, now);
      fitGraph(cy);
      label();
      saveView({ nics: now ? "grouped" : "all" });
    });
    const gpus = cy.nodes('[kind = "gpu"]').length;
    const nicCount = cy.nodes('[kind = "nic"]').length;
    clear(status).append(`${gpus} GPUs · ${nicCount} NICs · `, el("span", { class: "timing", text: `drawn in ${Math.round(performance.now() - t0)} ms` }));
    window.topowebLayoutMs = performance.now() - t0;
    window.topowebLayoutDone = performance.now();
    const asked = view.get("gpu");
    const node = asked ? cy.getElementById(asked) : null;
    if (node && node.nonempty() && kindOf(node) === "gpu") selectGpu(node);
    document.body.dataset.graphReady = "1";
    return cy;
  });
}

// --- matrix view --------------------------------------------------------------------------

function renderMatrix() {
  const mode = $("matrix-mode").value;
  const wrap = clear($("matrix"));
  const m = state?.matrix;
  if (!m) { wrap.append(el("p", { class: "muted", text: "No topology yet." })); return; }
  const directions = Object.keys(m.directions);
  const direction = directions.includes($("matrix-direction").value) ? $("matrix-direction").value : directions[0];
  const found = direction ? m.directions[direction] : null;
  const table = el("table", { class: `matrix mode-${mode}` });
  const head = el("tr", {}, el("th", { text: "" }));
  for (const label of m.labels) head.append(el("th", { scope: "col", text: label }));
  table.append(el("thead", {}, head));
  const body = el("tbody");
  const gradeColour = { good: "#cfe8d5", fair: "#ffe3a3", poor: "#f6b3ae" };
  m.devices.forEach((a, i) => {
    const tr = el("tr", {}, el("th", { scope: "row", text: m.labels[i] }));
    m.devices.forEach((b, j) => {
      const c = m.classes[i][j];
      const td = el("td", { title: `${m.labels[i]} ↔ ${m.labels[j]}: ${c}` });
      const value = found ? found.measured_gbps[i][j] : null;
      if (mode === "class" || value === null) {
        td.textContent = c;
        if (c === "X") td.classList.add("self");
        const info = classInfo(c);
        if (info) { td.style.background = info.color; td.classList.add("cls", `cls-${info.key}`); }
        if (mode !== "class" && c !== "X") td.classList.add("dim");
      } else if (mode === "measured") {
        const share = value / (found.max_measured_gbps || 1);
        td.textContent = fmtNumber(value, 0);
        td.title += ` · measured ${fmtNumber(value, 1)} GB/s`;
        td.style.background = `hsl(210 70% ${95 - 55 * share}%)`;
        if (share > 0.55) td.style.color = "#fff";
      } else {
        const ratio = found.ratio ? found.ratio[i][j] : null;
        if (ratio !== null) {
          td.textContent = `${Math.round(ratio * 100)}%`;
          td.title += ` · measured ${fmtNumber(value, 1)} of expected ${fmtNumber(found.expected_gbps[i][j], 1)} GB/s`;
          td.style.background = gradeColour[found.grade[i][j]];
        } else {
          td.textContent = "?";
        }
      }
      tr.append(td);
    });
    body.append(tr);
  });
  table.append(body);
  wrap.append(table);
  if (mode !== "class" && !found) wrap.prepend(el("p", { class: "muted", text: "No p2pBandwidthLatencyTest result for this server yet; showing link classes." }));
  else if (mode !== "class") {
    const dir = direction === "bi" ? "bidirectional" : "unidirectional";
    const note = mode === "ratio"
      ? (found.ratio ? `Measured ${dir} P2P bandwidth as a share of the cost model's ${dir} prediction: ≥ 80 % green, ≥ 50 % amber, below red.` : "No cost-model prediction for this server yet (analysis pending).")
      : `Measured ${dir} P2P bandwidth, GB/s.`;
    wrap.prepend(el("p", { class: "muted matrix-note", text: note }));
  }
}

function setView(which, save = true) {
  $("tooltip").hidden = true;
  const matrix = which === "matrix";
  $("view-graph").setAttribute("aria-pressed", String(!matrix));
  $("view-matrix").setAttribute("aria-pressed", String(matrix));
  $("graph").hidden = matrix;
  $("matrix").hidden = !matrix;
  $("matrix-mode-label").hidden = !matrix;
  $("matrix-direction-label").hidden = !matrix;
  $("export-csv").hidden = !matrix;
  $("export-png").hidden = matrix;
  $("export-svg").hidden = matrix;
  if (matrix) renderMatrix();
  else if (cy) { cy.resize(); fitGraph(cy); }
  if (save) saveView({ view: matrix ? "matrix" : null, mode: matrix ? $("matrix-mode").value : null, direction: matrix ? $("matrix-direction").value : null });
}

// --- panels -----------------------------------------------------------------------------

// One line per cause (the server grouped the findings); a cause found on several pairs opens
// to each of its findings, and a click on it shows its pairs on the graph.
function renderFindings(groups, hasTopology, checked, gaveUp) {
  const ul = clear($("findings"));
  if (!hasTopology) { ul.append(el("li", { class: "finding muted", text: "Nothing checked yet: the checks need this server's topology (nvidia-smi topo -m)." })); return; }
  if (!checked && gaveUp) { ul.append(el("li", { class: "finding sev-warning", text: `The health checks gave up on this snapshot (${gaveUp}); its next report asks again.` })); return; }
  if ((!groups || !groups.length) && !checked) { ul.append(el("li", { class: "finding muted", text: "Checks pending: findings appear once the health checks have judged this snapshot." })); return; }
  if (!groups || !groups.length) { ul.append(el("li", { class: "finding ok", text: "No findings: wiring matches expectations." })); return; }
  for (const g of groups) {
    const sev = g.severity || "info";
    const show = () => {
      if (!cy) return;
      if (state.graph && $("graph").hidden) setView("graph");
      highlightPairs(cy, g.pairs);
      for (const item of ul.querySelectorAll(".finding.shown")) item.classList.remove("shown");
      li.classList.add("shown");
    };
    const title = g.pairs.length && state.graph
      ? el("button", { type: "button", class: "link-button finding-title", title: "Show on the graph", onclick: show, text: g.title })
      : el("span", { class: "finding-title", text: g.title });
    const li = el("li", { class: `finding sev-${sev}`, dataset: { cause: g.cause, count: String(g.count) } }, el("span", { class: `badge sev-${sev}`, text: sev }), " ", title);
    if (g.count > 1) {
      const list = el("ul", { class: "finding-pairs" });
      for (const f of g.findings) list.append(el("li", { text: f.message }));
      li.append(el("details", {}, el("summary", { text: `each of the ${g.count} findings` }), list));
    }
    ul.append(li);
  }
}

// The GPU model the advice priced when the capture named none (the analysis's `assumed` list):
// the header shows that model, marked as assumed, rather than contradicting the advice.
function assumedGpu() {
  const lists = [...(state.best_layouts || []).map((d) => d.assumed || []), ...Object.values(state.recommendations || {}).map((r) => r.recommended?.assumed || [])];
  for (const list of lists) {
    const said = list.find((a) => a.startsWith("GPU model: "));
    if (said) return { model: said.slice("GPU model: ".length).split(" (")[0], why: said };
  }
  return null;
}

// The badge counts what the fleet list counts (`findings_count`: critical and warning findings),
// so one server shows one number everywhere; the findings panel below groups them by cause.
function renderSummary(s, analysis) {
  const parts = [];
  if (s.sku) parts.push(`SKU ${s.sku}`);
  const guess = s.gpu_model ? null : assumedGpu();
  const mixed = (s.gpu_models || []).map((m) => `${m.count}x ${m.name}`).join(" + ");
  // GPUs that differ: each model with its count; an uploader's word on them is marked, since
  // the capture does not say which GPU is which.
  if (mixed && s.gpu_models_source === "uploader") parts.push([`${mixed} `, el("span", { class: "assumed-mark", id: "gpu-model-assumed", title: `Given at upload, not read from the capture; advice priced on ${s.gpu_model}`, text: "assumed" })]);
  else if (mixed) parts.push(el("span", { title: `Named by ${s.gpu_models_source === "nvml" ? "NVML" : "the server's benchmark output"}; advice priced on ${s.gpu_model}`, text: mixed }));
  else if (s.gpu_count != null && s.gpu_model) parts.push(`${s.gpu_count}x ${s.gpu_model}`);
  else if (s.gpu_count != null && guess) parts.push([`${s.gpu_count}x ${guess.model} `, el("span", { class: "assumed-mark", id: "gpu-model-assumed", title: `Assumed, not reported: ${guess.why}`, text: "assumed" })]);
  else if (s.gpu_count != null) parts.push(`${s.gpu_count} GPUs (model not reported)`);
  if (s.nvlink_summary) parts.push(s.nvlink_summary);
  if (s.nic_count != null) parts.push(`${s.nic_count} NICs`);
  // The host's CPU names the socket link the page prices (without it, the graph says assumed).
  if (s.cpu_model) parts.push(el("span", { id: "cpu-model", title: "The host's CPU, as its collector read it: its socket link prices the cross-socket paths", text: s.cpu_model }));
  // The age in its own element: the visual check hides what changes with the clock.
  const summary = clear($("server-summary"));
  parts.forEach((p, i) => { if (i) summary.append(" · "); summary.append(...(Array.isArray(p) ? p : [p])); });
  summary.append(" · last seen ", el("span", { class: "age", text: fmtAgo(s.last_seen_at) }));
  const badges = clear($("server-badges"));
  badges.append(healthBadge(s.health, s.findings_count));
  if (analysis) badges.append(el("span", { class: `badge analysis-${analysis.status}`, text: `analysis ${analysis.status}` }));
  if (s.sku) badges.append(el("a", { class: "badge", href: `/compare/?a=${encodeURIComponent(s.sku)}&b=`, text: "compare SKU…" }));
  badges.append(el("a", { class: "badge", href: `/servers/${encodeURIComponent(hostname)}/acceptance/`, text: "acceptance report" }));
  badges.append(el("a", { class: "badge", href: `/upload/?host=${encodeURIComponent(hostname)}`, text: "upload output" }));
}

// Server-wide launch advice: the GPU order and each GPU's NUMA binding and NIC.
function renderAffinity(affinity, leftOut) {
  const box = clear($("affinity"));
  if (!affinity && leftOut) { box.append(el("p", { class: "muted", id: "affinity-left-out", text: `Not computed for this server: ${leftOut}` })); return; }
  if (!affinity) { box.append(el("p", { class: "muted", text: "No affinity information (no topology yet)." })); return; }
  box.append(el("p", {}, "All GPUs, nearest first per NUMA node: ", el("code", { id: "cuda-visible-devices", text: `CUDA_VISIBLE_DEVICES=${affinity.cuda_visible_devices}` })));
  for (const g of (affinity.gpus || []).filter((x) => x.warning)) box.append(el("p", { class: "warning-note" }, el("strong", { text: `⚠ GPU${g.gpu}: ` }), g.warning));
  if (affinity.binding_hints?.length) {
    const list = el("ul", { class: "hints" });
    for (const h of affinity.binding_hints) list.append(el("li", {}, el("code", { text: h })));
    box.append(el("details", {}, el("summary", { text: "Per-GPU binding (numactl, NCCL_IB_HCA)" }), list));
  }
}

function renderBenchmarks(rows) {
  const tbody = clear(document.querySelector("#bench-table tbody"));
  if (!rows.length) tbody.append(el("tr", {}, el("td", { colspan: 5, class: "muted", text: "No benchmark results yet." })));
  for (const b of rows) {
    tbody.append(el("tr", {},
      el("td", { class: "age", title: fmtDate(b.captured_at), text: fmtAgo(b.captured_at) }),
      el("td", { text: b.kind }),
      el("td", { text: b.collective || "–" }),
      el("td", { class: "num", text: b.avg_busbw_gbps != null ? `${fmtNumber(b.avg_busbw_gbps, 1)} GB/s` : "–" }),
      el("td", {}, b.failed ? el("span", { class: "badge sev-critical", text: "failed" }) : el("span", { class: "badge health-ok", text: "ok" }))));
  }
}

function renderPlot(plotDoc) {
  const plot = clear($("bench-plot"));
  const { series, note } = plotDoc;
  if (note) plot.append(el("p", { class: series.length ? "muted small" : "muted", text: note }));
  if (!series.length) return;
  window.topowebBenchPlot = busbwPlot(plot, series); // read by the e2e tests
  window.topowebBenchSeries = series.map((s) => ({ label: s.label, kind: s.kind, points: s.points.filter((p) => p[1] != null).length }));
  document.body.dataset.benchReady = "1";
}

function renderHistory(rows) {
  const tbody = clear(document.querySelector("#history-table tbody"));
  for (const s of rows) {
    const changed = s.changes === null
      ? el("span", { class: "muted", text: "first" })
      : s.changes.length ? el("span", { class: "badge sev-warning", text: s.changes.join("; ") }) : el("span", { class: "muted", text: "no change" });
    tbody.append(el("tr", {},
      el("td", { class: "age", title: s.captured_at, text: fmtDate(s.captured_at) }),
      el("td", { text: s.source }),
      el("td", { class: "num", text: s.gpu_count }),
      el("td", { class: "num", text: s.nic_count }),
      el("td", { text: s.nvlink_summary }),
      el("td", {}, changed)));
  }
}

function renderPresets(list) {
  presets = list;
  const select = document.querySelector("#placement-form select[name=model]");
  for (const m of presets) select.append(el("option", { value: m.key, text: m.name, title: `${m.layers} layers, hidden ${m.hidden}` }));
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
    `weights ${gb(m.weights_gb)}, gradients ${gb(m.gradients_gb)}, optimizer ${gb(m.optimizer_gb)} (ZeRO-${m.zero}), activations ${gb(m.activations_gb)}${m.recompute ? ` (${m.recompute} recomputation)` : ""}${m.kept_back ? `; ${m.kept_back}` : ""}`));
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
  // The memory levers pulled for it to fit, beyond what was asked, named as the API names them.
  if (res.levers?.length) out.append(el("p", { class: "small placement-levers", text: `Fits with ${res.levers.join(", ")}.` }));
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
  const notes = [res.search && `search: ${res.search}`, res.calibrated ? "calibrated on this class's measurements" : "uncalibrated model", res.assumption, res.assumed?.length && `assumed: ${res.assumed.join("; ")}`].filter(Boolean);
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

// The stored layouts of the default preset, fitting ones first, fastest first (the server's
// order); a click shows that placement. Below: each preset's recommendation, or why it fits
// on no layout here.
function renderBestLayouts(layouts, recs, assumptions) {
  const box = clear($("best-layouts"));
  if (!layouts.length) {
    const analysis = state.analysis;
    const why = !state.graph ? "Placement needs this server's topology: none captured yet."
      : analysis?.status === "failed" ? `The analysis failed${analysis.error ? `: ${analysis.error}` : ""}; no stored layouts.`
      : analysis?.status === "done" ? "The analysis stored no layouts for this topology."
      : "Stored layouts appear once the analysis is done.";
    box.append(el("p", { class: "muted small", id: "best-layouts-empty", text: why }));
    return;
  }
  const stepOf = (d) => d.predicted_step_time_us ?? d.predicted_step_comm_us;
  box.append(el("h3", { text: `Fastest layouts for ${layouts[0].model}` }));
  if (assumptions) box.append(el("p", { class: "muted small", text: `Predicted step time: ${assumptions}.` }));
  const list = el("ol", { class: "best-layouts" });
  for (const doc of layouts) {
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
  if (Object.keys(recs).length) {
    const ul = el("ul", { class: "recommendations small", "aria-label": "Recommended layout per preset" });
    for (const [key, rec] of Object.entries(recs)) {
      const r = rec.recommended;
      // The levers pulled and the memory per GPU it plans, with what is left (the API's words).
      const m = r?.memory;
      const text = r
        ? `TP${r.layout.tp} · PP${r.layout.pp} · DP${r.layout.dp}${r.layout.ep > 1 ? ` · EP${r.layout.ep}` : ""}, ${fmtTime(r.predicted_step_time_us)} per step${rec.levers?.length ? ` with ${rec.levers.join(", ")}` : ""}; ${fmtNumber(m.total_gb, 1)} of ${fmtNumber(m.usable_gb, 1)} GB usable a GPU, ${fmtNumber(m.left_gb, 1)} GB left`
        : (rec.no_fit?.message || "fits no layout");
      ul.append(el("li", { dataset: { preset: key } }, el("strong", { text: `${rec.model?.name || key}: ` }), text));
    }
    box.append(el("h3", { text: "Recommended per model" }), ul);
    // Advice on a guessed GPU (model, generation or memory size) says so.
    const assumed = Object.values(recs).find((rec) => rec.assumed?.length)?.assumed;
    if (assumed) box.append(el("p", { class: "assumed small", id: "recommendations-assumed" }, el("strong", { text: "Assumed: " }), assumed.join("; ")));
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
  for (const id of ["view-graph", "view-matrix", "fit-graph", "clear-selection", "export-png", "nic-toggle"]) $(id).disabled = true;
  for (const id of ["export-svg", "export-csv", "share-link"]) $(id).hidden = true;
  const note = $("no-topology");
  note.hidden = false;
  note.querySelector("a").href = `/upload/?host=${encodeURIComponent(hostname)}`;
}

// Ask again every few seconds while the first assessment is pending; reload when it is there.
async function waitForAssessment(tries = 60) {
  for (let i = 0; i < tries; i++) {
    await new Promise((resolve) => setTimeout(resolve, 2000));
    try {
      const next = await getJSON(`${base}/page/`);
      if (!next.left_out?.assessment) { location.reload(); return; }
    } catch { /* a failed ask is retried */ }
  }
}

async function main() {
  renderLegend($("legend"));
  $("view-graph").addEventListener("click", () => setView("graph"));
  $("view-matrix").addEventListener("click", () => setView("matrix"));
  $("matrix-mode").value = view.get("mode") || "class";
  $("matrix-direction").value = view.get("direction") || "uni";
  $("matrix-mode").addEventListener("change", () => { renderMatrix(); saveView({ mode: $("matrix-mode").value }); });
  $("matrix-direction").addEventListener("change", () => { renderMatrix(); saveView({ direction: $("matrix-direction").value }); });
  $("fit-graph").addEventListener("click", () => cy && fitGraph(cy));
  $("clear-selection").addEventListener("click", () => { if (cy) { clearHighlight(cy); colourGroups(cy, []); } clear($("placement-result")); saveView({ gpu: null }); });
  $("export-png").addEventListener("click", () => cy && downloadPng(cy, `${hostname}-graph.png`));
  $("placement-form").addEventListener("submit", place);
  refreshExports();
  try {
    state = await getJSON(`${base}/page/`);
  } catch (err) {
    showError($("server-error"), err);
    $("server-summary").textContent = "";
    document.body.dataset.graphReady = "1";
    return;
  }
  if (state.left_out?.assessment) {
    // The worker has not assessed this server yet: say so, and reload once it has.
    $("assessment-pending").hidden = false;
    waitForAssessment();
  }
  // An assessment stored before findings were grouped: one group per finding until the worker
  // stores a newer one.
  state.groups ??= (state.findings || []).map((f) => ({ cause: `${f.kind}|${f.devices.join(",")}`, kind: f.kind, severity: f.severity, title: f.message, count: 1, pairs: [f.devices], devices: f.devices, findings: [f] }));
  renderSummary(state.server, state.analysis);
  renderFindings(state.groups, Boolean(state.graph || state.left_out?.assessment), state.findings_checked, state.gave_up?.health);
  renderReaderWarnings(state.reader_warnings);
  if (state.graph) {
    await drawn();
    setView(view.get("view") === "matrix" ? "matrix" : "graph", false);
  } else if (state.left_out?.assessment) {
    $("graph").hidden = true;
    document.body.dataset.graphReady = "1";
  } else {
    renderNoTopology();
    document.body.dataset.graphReady = "1";
  }
  renderAffinity(state.affinity, state.left_out?.affinity);
  renderPresets(state.presets);
  renderBestLayouts(state.best_layouts, state.recommendations, state.step_assumptions);
  renderBenchmarks(state.benchmarks);
  renderPlot(state.plot);
  renderHistory(state.history);
}

main();
