// Fleet page: the server list from GET /api/v1/servers/ (filtered, sorted and paginated by the
// server), with counts per health state and per SKU at the top.

import { el, clear, getJSON, fmtAgo, fmtDate, healthBadge, pageData, showError } from "./api.js";

const form = document.getElementById("fleet-filters");
const tbody = document.querySelector("#fleet-table tbody");
const status = document.getElementById("fleet-status");
const pageInfo = document.getElementById("page-info");
const prev = document.getElementById("prev-page");
const next = document.getElementById("next-page");
const FILTERS = ["search", "sku", "health", "has_nvlink", "ordering", "finding"];
const HEALTH_STATES = ["ok", "warning", "critical", "unknown"];

const state = { page: 1, pageSize: null, ...pageData().query };
state.page = Number(state.page) || 1;

const skuOf = (s) => s.sku ?? "";
// Where a server's GPU models come from, in words (the summary's `gpu_models_source`).
const MODELS_FROM = { nvml: "reported by NVML", benchmark: "named by its benchmark output", uploader: "given at upload, assumed: the capture does not say which GPU is which" };

function linkSummary(s) {
  if (s.link_summary) return s.link_summary;
  const parts = [];
  if (s.gpu_models?.length) parts.push(s.gpu_models.map((m) => `${m.count}x ${m.family}`).join(" + "));
  else if (s.gpu_count) parts.push(`${s.gpu_count}x ${s.gpu_family || "GPU"}`);
  parts.push(s.nvlink_summary || (s.has_nvlink === false ? "PCIe only" : ""));
  if (s.nic_count != null) parts.push(`${s.nic_count} NIC${s.nic_count === 1 ? "" : "s"}`);
  return parts.filter(Boolean).join(", ");
}

function syncForm() {
  for (const name of FILTERS) {
    const field = form.elements[name];
    if (field && state[name] !== undefined) field.value = state[name];
  }
}

function params() {
  const p = { page: state.page };
  for (const name of FILTERS) if (state[name]) p[name] = state[name];
  if (p.ordering === "hostname") delete p.ordering; // the API's default: keep URLs short
  return p;
}

function pushUrl() {
  const u = new URL(window.location.href);
  u.search = "";
  for (const [k, v] of Object.entries(params())) if (!(k === "page" && v === 1)) u.searchParams.set(k, v);
  window.history.replaceState(null, "", u);
}

// A server whose GPUs differ says so: each model with its count, the reported names (and
// where they come from) in the title, as a uniform server's one name is.
function gpuCell(s) {
  const mixed = s.gpu_models || [];
  if (mixed.length) {
    const title = `${mixed.map((m) => `${m.count}x ${m.name}`).join(" + ")} (${MODELS_FROM[s.gpu_models_source] || s.gpu_models_source}; advice priced on ${s.gpu_model})`;
    return el("td", { class: "num gpu-model", title }, el("span", { text: s.gpu_count ?? "–" }), el("span", { class: "muted", text: ` (${mixed.map((m) => `${m.count}x ${m.family}`).join(" + ")})` }));
  }
  return el("td", { class: "num gpu-model", title: s.gpu_model || "no GPU model reported" }, el("span", { text: s.gpu_count ?? "–" }), el("span", { class: "muted", text: s.gpu_family ? ` ${s.gpu_family}` : " (model not reported)" }));
}

function row(s) {
  const href = `/servers/${encodeURIComponent(s.hostname)}/`;
  const sku = skuOf(s);
  return el(
    "tr",
    { dataset: { hostname: s.hostname } },
    el("th", { scope: "row" }, el("a", { href, text: s.hostname })),
    el("td", {}, sku ? el("button", { type: "button", class: "link sku-link", text: sku, title: `Show only ${sku}`, onclick: () => setFilter("sku", sku) }) : el("span", { class: "muted", text: "—" })),
    // One name per part (the server's own spelling is its title here and on its page).
    gpuCell(s),
    el("td", { class: "links-summary", text: linkSummary(s) }),
    el("td", {}, healthBadge(s.health, s.findings_count ?? s.finding_count)),
    el("td", { class: "age", title: fmtDate(s.last_seen_at || s.last_seen), text: fmtAgo(s.last_seen_at || s.last_seen) }),
  );
}

function setFilter(name, value) {
  state[name] = value;
  state.page = 1;
  syncForm();
  load();
}

let seq = 0;
async function load() {
  const mine = ++seq;
  status.textContent = "Loading…";
  pushUrl();
  try {
    const data = await getJSON("servers/", params());
    if (mine !== seq) return;
    if (!state.pageSize && data.results.length && data.next) state.pageSize = data.results.length;
    clear(tbody);
    if (!data.results.length) tbody.append(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No server matches these filters." })));
    for (const s of data.results) tbody.append(row(s));
    const pages = state.pageSize ? Math.max(1, Math.ceil(data.count / state.pageSize)) : 1;
    pageInfo.textContent = `Page ${state.page} of ${pages} · ${data.count} server${data.count === 1 ? "" : "s"}`;
    prev.disabled = !data.previous;
    next.disabled = !data.next;
    status.textContent = "";
    document.body.dataset.fleetReady = String(mine);
  } catch (err) {
    if (mine === seq) showError(status, err);
  }
}

function chip(label, count, onclick, extraClass = "") {
  return el("button", { type: "button", class: `chip ${extraClass}`, onclick }, el("span", { text: label }), el("strong", { text: String(count) }));
}

async function loadFacets() {
  const health = document.getElementById("health-counts");
  const skus = document.getElementById("sku-counts");
  try {
    const counts = await Promise.all(HEALTH_STATES.map((h) => getJSON("servers/", { health: h, page_size: 1 }).then((d) => d.count)));
    clear(health);
    HEALTH_STATES.forEach((h, i) => health.append(chip(h, counts[i], () => setFilter("health", h), `health-${h}`)));
    // Servers whose collector stopped reporting (the collector_silent finding): a toggle.
    const silent = (await getJSON("servers/", { finding: "collector_silent", page_size: 1 })).count;
    if (silent) {
      const toggle = () => setFilter("finding", state.finding === "collector_silent" ? "" : "collector_silent");
      health.append(chip("collector silent", silent, toggle, "health-warning collector-silent"));
    }
  } catch (err) {
    showError(health, err);
  }
  try {
    const data = await getJSON("skus/", { page_size: 200 });
    const list = data.results || data;
    clear(skus);
    const select = form.elements.sku;
    for (const s of list) {
      const name = s.name ?? s.sku ?? "";
      if (!name) continue;
      const count = s.server_count ?? s.servers ?? "";
      skus.append(chip(name, count, () => setFilter("sku", name)));
      if (![...select.options].some((o) => o.value === name)) select.append(el("option", { value: name, text: name }));
    }
    syncForm();
  } catch (err) {
    showError(skus, err);
  }
}

let typing;
form.addEventListener("input", (evt) => {
  const name = evt.target.name;
  if (!FILTERS.includes(name)) return;
  clearTimeout(typing);
  typing = setTimeout(() => setFilter(name, evt.target.value), name === "search" ? 250 : 0);
});
form.addEventListener("submit", (evt) => evt.preventDefault());
prev.addEventListener("click", () => { state.page = Math.max(1, state.page - 1); load(); });
next.addEventListener("click", () => { state.page += 1; load(); });

syncForm();
load();
loadFacets();
