// Upload page: paste or choose output, preview the parsed graph, then save and go to the
// server's page. Parse errors name the line and show it.

import { el, clear, postForm, pageData, lineOf, showError } from "./api.js";
import { drawGraph, renderLegend } from "./graph.js";

const $ = (id) => document.getElementById(id);
const form = $("upload-form");
let previewCy = null;

async function text() {
  const file = $("upload-file").files[0];
  return file ? await file.text() : $("upload-text").value;
}

// Text a person can read: no replacement characters or control bytes (a binary file read as
// text shows only those).
const unreadable = (c) => c === 0xfffd || c < 0x09 || (c > 0x0d && c < 0x20);
const readable = (lines) => !lines.some((l) => [...l].some((ch) => unreadable(ch.codePointAt(0))));

function showParseError(err, source) {
  const line = lineOf(err);
  // The API answers the line apart from the message; the reader wants both in one sentence.
  showError($("upload-error"), line ? `line ${line}: ${err.message}` : err);
  const ctx = $("upload-error-context");
  const near = source ? source.split(/\r?\n/).slice(Math.max(0, (line || 1) - 3), (line || 1) + 2) : [];
  if (line && source && readable(near)) {
    const lines = source.split(/\r?\n/);
    clear(ctx);
    for (let n = Math.max(1, line - 2); n <= Math.min(lines.length, line + 2); n += 1) {
      ctx.append(el("span", { class: n === line ? "bad-line" : null, text: `${String(n).padStart(4)} | ${lines[n - 1]}\n` }));
    }
    ctx.hidden = false;
  } else {
    ctx.hidden = true;
  }
}

function resetErrors() {
  $("upload-error").hidden = true;
  $("upload-error-context").hidden = true;
}

// Each thing the reader guessed or repaired, listed (not only counted in the summary).
function showWarnings(warnings) {
  const list = clear($("preview-warning-list"));
  for (const w of warnings) list.append(el("li", { text: w }));
  $("preview-warnings").hidden = !warnings.length;
}

// A hostname with no server of that name: said at preview, with the closest existing name to
// take in one click, rather than as a failure at Save.
function showHost(host) {
  const box = clear($("preview-host"));
  box.hidden = !host || host.known || $("upload-create").checked;
  if (box.hidden) return;
  box.append(el("strong", { text: `No server named ${host.hostname}. ` }));
  if (host.suggestion) {
    box.append("Did you mean ", el("button", { type: "button", class: "link-button", id: "use-suggestion", text: host.suggestion, onclick: () => { $("upload-hostname").value = host.suggestion; box.hidden = true; } }), "? ");
  }
  box.append("Tick “This is a new server” to add it as a new one.");
}

async function preview() {
  resetErrors();
  $("save-button").disabled = true;
  const file = $("upload-file").files[0];
  const source = await text();
  // The file itself when one is chosen: the API then applies the same UTF-8 and size rules
  // as the upload.
  const body = new FormData();
  if (file) body.append("file", file);
  else body.append("text", source);
  body.append("hostname", $("upload-hostname").value.trim());
  // The model the save will record where the output names none: drawn for it, as saved.
  const gpuModel = $("upload-gpu-model").value.trim();
  if (gpuModel) body.append("gpu_model", gpuModel);
  $("preview-summary").textContent = "Parsing…";
  try {
    const res = await postForm("uploads/preview/", body);
    $("preview-summary").textContent = res.summary;
    showWarnings(res.warnings || []);
    showHost(res.host);
    if (previewCy) previewCy.destroy();
    previewCy = null;
    clear($("preview-graph"));
    // A topology is drawn, with its legend; a benchmark has no graph: its summary says it all.
    const drawn = Boolean(res.elements && res.elements.length);
    $("preview-graph").hidden = !drawn;
    $("legend").hidden = !drawn;
    // Both NIC drawings arrive; the document says which one the positions are for.
    if (drawn) previewCy = await drawGraph($("preview-graph"), { elements: res.elements, paths: {}, nic_groups: res.nic_groups });
    window.topowebPreviewCy = previewCy; // read by the e2e tests
    $("save-button").disabled = false;
    document.body.dataset.previewReady = "1";
  } catch (err) {
    $("preview-summary").textContent = "Could not parse this output.";
    showWarnings([]);
    showParseError(err, source);
  }
}

async function save(evt) {
  evt.preventDefault();
  resetErrors();
  const source = await text();
  const hostname = $("upload-hostname").value.trim();
  const file = $("upload-file").files[0];
  const body = new FormData();
  body.append("hostname", hostname);
  body.append("create", $("upload-create").checked ? "true" : "false");
  const gpuModel = $("upload-gpu-model").value.trim();
  if (gpuModel) body.append("gpu_model", gpuModel);
  if (file) body.append("file", file);
  else body.append("text", source);
  $("save-button").disabled = true;
  try {
    const res = await postForm("uploads/", body);
    window.location.assign(`/servers/${encodeURIComponent(res.hostname || hostname)}/`);
  } catch (err) {
    const hostProblem = err.body?.error?.details?.hostname;
    if (hostProblem) showError($("upload-error"), hostProblem.join(" "));
    else showParseError(err, source);
    $("save-button").disabled = false;
  }
}

renderLegend($("legend"));
$("preview-button").addEventListener("click", preview);
$("upload-file").addEventListener("change", () => { $("save-button").disabled = true; });
$("upload-text").addEventListener("input", () => { $("save-button").disabled = true; });
form.addEventListener("submit", save);
if (pageData().hostname) $("upload-text").focus();
