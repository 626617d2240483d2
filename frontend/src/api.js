// Shared helpers of the page modules: JSON API calls, DOM building that never parses data
// as HTML, and number formatting.

export const API = "/api/v1";

export class ApiError extends Error {
  constructor(status, body) {
    super(messageOf(body) || `HTTP ${status}`);
    this.status = status;
    this.body = body;
  }
}

// One JSON error shape is promised by the backend; older or proxy errors may be plain text.
// A refused field says what is wrong with it in `details`: that sentence, not the generic one.
function messageOf(body) {
  if (!body) return "";
  if (typeof body === "string") return body.slice(0, 300);
  if (body.error && typeof body.error === "object") return fieldMessages(body.error.details) || body.error.message || body.error.detail || "";
  return body.message || body.detail || body.error || "";
}

function fieldMessages(details) {
  if (!details || typeof details !== "object" || Array.isArray(details)) return "";
  const said = Object.values(details).flatMap((v) => (Array.isArray(v) ? v : [])).filter((v) => typeof v === "string");
  return said.join(" ");
}

export function lineOf(err) {
  const b = err && err.body;
  if (!b || typeof b !== "object") return null;
  const e = b.error && typeof b.error === "object" ? b.error : b;
  const line = e.line ?? (e.details && e.details.line);
  return Number.isInteger(line) ? line : null;
}

export function pageData() {
  const node = document.getElementById("page-data");
  return node ? JSON.parse(node.textContent) : {};
}

function csrfToken() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  if (input) return input.value;
  const m = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return m ? decodeURIComponent(m[1]) : "";
}

export function url(path, params) {
  const u = new URL(path.startsWith("/") ? path : `${API}/${path}`, window.location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, v);
  }
  return u.pathname + u.search;
}

async function send(method, path, { params, json, form } = {}) {
  const headers = { Accept: "application/json" };
  let body;
  if (json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(json);
  } else if (form !== undefined) {
    body = form;
  }
  if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
  const res = await fetch(url(path, params), { method, headers, body, credentials: "same-origin" });
  const type = res.headers.get("Content-Type") || "";
  const data = type.includes("json") ? await res.json().catch(() => null) : await res.text();
  if (!res.ok) throw new ApiError(res.status, data);
  return data;
}

export const getJSON = (path, params) => send("GET", path, { params });
export const postJSON = (path, json) => send("POST", path, { json });
export const postForm = (path, form) => send("POST", path, { form });

export const hostPath = (hostname) => `servers/${encodeURIComponent(hostname)}`;

// Builds elements with text content only: whatever a hostname or label holds stays text.
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k === "dataset") Object.assign(node.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

export function clear(node) {
  node.replaceChildren();
  return node;
}

export function fmtNumber(v, digits = 1) {
  if (v === null || v === undefined || Number.isNaN(v)) return "–";
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits });
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  let v = Number(n);
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i += 1; }
  return `${fmtNumber(v, v < 10 ? 1 : 0)} ${units[i]}`;
}

export function fmtTime(us) {
  if (us === null || us === undefined) return "–";
  if (us >= 1e6) return `${fmtNumber(us / 1e6, 2)} s`;
  if (us >= 1e3) return `${fmtNumber(us / 1e3, 2)} ms`;
  return `${fmtNumber(us, 1)} µs`;
}

// A date people read: "30 Nov 2026, 11:40" in the browser's time zone, never raw ISO.
export function fmtDate(iso) {
  if (!iso) return "–";
  const t = new Date(iso);
  if (Number.isNaN(t.getTime())) return String(iso);
  return t.toLocaleString("en-GB", { day: "numeric", month: "short", year: "numeric", hour: "2-digit", minute: "2-digit" });
}

export function fmtAgo(iso) {
  if (!iso) return "never";
  const t = new Date(iso);
  const s = (Date.now() - t.getTime()) / 1000;
  if (s < 90) return "just now";
  if (s < 5400) return `${Math.round(s / 60)} min ago`;
  if (s < 129600) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

export function healthBadge(health, count) {
  const state = health || "unknown";
  const label = count ? `${state} · ${count}` : state;
  const icon = { ok: "✓", warning: "!", critical: "✕", unknown: "?" }[state] || "?";
  return el("span", { class: `badge health-${state}`, title: `health: ${state}` }, el("span", { "aria-hidden": "true", text: icon }), " ", label);
}

export function showError(node, err) {
  node.hidden = false;
  node.textContent = err instanceof Error ? err.message : String(err);
}
