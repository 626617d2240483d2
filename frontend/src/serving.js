// The server page's serving panel: asks POST /api/v1/servers/<host>/serving/ how this server
// would serve a model (GPUs per replica, replicas, memory per GPU, limits, latency) and shows
// the answer, with what it assumed. Every figure comes from the API; nothing is computed here.
import { el, clear, getJSON, postJSON, hostPath, pageData, fmtNumber } from "./api.js";

const $ = (id) => document.getElementById(id);
const base = hostPath(pageData().hostname);
const gb = (x) => `${fmtNumber(x, 1)} GB`;
const ms = (x) => `${fmtNumber(x, x < 10 ? 2 : 1)} ms`;

function replicaText(r) {
  const shape = `TP${r.tp}${r.pp > 1 ? ` · PP${r.pp}` : ""}`;
  return `${shape} × ${r.replicas} replica${r.replicas === 1 ? "" : "s"}`;
}

function renderServing(doc) {
  const out = clear($("serving-result"));
  const r = doc.recommended;
  if (doc.assumed && doc.assumed.length) {
    const note = el("div", { class: "assumed small", id: "serving-assumed" }, el("strong", { text: "Assumed: " }));
    note.append(doc.assumed.join("; "));
    out.append(note);
  }
  // What the question asks beyond the model itself (a context past its window), said first.
  for (const n of doc.notes || []) out.append(el("p", { class: "assumed small serving-note", role: "note", text: n }));
  if (!r) {
    out.append(el("p", { class: "error", role: "alert", id: "serving-misfit", text: doc.message || "fits no replica here" }));
    document.body.dataset.servingReady = String(Number(document.body.dataset.servingReady || 0) + 1);
    return;
  }
  out.append(el("p", { class: "placement-head", id: "serving-head" }, el("strong", { text: replicaText(r) }),
    ` for ${doc.model.name} (${doc.dtype}), ${doc.concurrency} × ${doc.context_tokens} tokens`));
  const dl = el("dl", { class: "kv" });
  const m = r.memory_per_gpu;
  const rows = [
    ["GPUs", r.replica_gpus.map((g) => g.map((x) => `GPU${x}`).join("+")).join(" | ")],
    ["Per GPU", `${gb(m.total_gb)} of ${gb(m.usable_gb)} usable: weights ${gb(m.weights_gb)}, KV cache ${gb(m.kv_cache_gb)}, activations ${gb(m.activations_gb)}`],
    ["Largest concurrency", `${r.max_concurrency} at ${doc.context_tokens} tokens`],
    ["Largest context", `${r.max_context} tokens at ${doc.concurrency} sequences`],
    ["Time per output token", ms(r.time_per_output_token_ms)],
    ["Time to first token", ms(r.time_to_first_token_ms)],
  ];
  for (const [k, v] of rows) dl.append(el("dt", { text: k }), el("dd", { text: v }));
  out.append(dl);
  const others = doc.options.filter((o) => o.fits).slice(1, 5);
  if (others.length) {
    const ul = el("ul", { class: "small serving-options", "aria-label": "Other replica shapes that fit" });
    for (const o of others) {
      ul.append(el("li", {}, `${replicaText(o)}: ${ms(o.time_per_output_token_ms)} a token, first after ${ms(o.time_to_first_token_ms)}`));
    }
    out.append(el("p", { class: "muted small", text: "Also fits:" }), ul);
  }
  out.append(el("p", { class: "muted small", text: `KV cache: ${doc.kv_bytes_per_token} bytes a token. ${doc.assumptions}.` }));
  document.body.dataset.servingReady = String(Number(document.body.dataset.servingReady || 0) + 1);
}

async function serve(evt) {
  evt.preventDefault();
  const out = clear($("serving-result"));
  const f = new FormData(evt.target);
  const body = { dtype: f.get("dtype") || "bf16" };
  if (f.get("model")) body.model = f.get("model");
  for (const k of ["context_tokens", "concurrency"]) if (f.get(k)) body[k] = Number(f.get(k));
  out.append(el("p", { class: "muted", text: "Computing…" }));
  try {
    renderServing(await postJSON(`${base}/serving/`, body));
  } catch (err) {
    clear(out).append(el("p", { class: "error", role: "alert", id: "serving-error", text: `Cannot answer: ${err.message}` }));
  }
}

async function main() {
  const form = $("serving-form");
  if (!form) return;
  form.addEventListener("submit", serve);
  try {
    const presets = await getJSON("model-presets/");
    for (const m of presets) form.elements.model.append(el("option", { value: m.key, text: m.name }));
  } catch {
    // The form still works with the default preset.
  }
}

main();
