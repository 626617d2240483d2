// Fabric page: draws the positions core/fabric_layout.py decided (spines on top, leaves in rail
// rows and unit columns, hosts under their unit), colours uplinks by speed class, dashes the
// leaf-spine pairs short of their peers' cables, lists the findings, and shows a host's rails;
// with more than one capture, their history and what changed between each and the one before.

import { clear, el, fmtDate, getJSON, pageData, showError } from "./api.js";

const SVG = "http://www.w3.org/2000/svg";
const SPEED = {
  xdr: ["#5b2a86", "800 Gb/s per link (XDR)"],
  ndr: ["#2f6db5", "400 Gb/s (NDR)"],
  hdr: ["#c27c0e", "200 Gb/s (HDR)"],
  slow: ["#c8322d", "below 200 Gb/s"],
  short: ["#c27c0e", "fewer links than peer leaves"],
  missing: ["#c8322d", "no link where peer leaves have one"],
};
const SEVERITY = { critical: "#c8322d", warning: "#b86e00", info: "#2d4a7a" };
const $ = (id) => document.getElementById(id);
const data = pageData();
let state = null;

function svg(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  }
  if (text !== undefined) node.textContent = text;
  return node;
}

function summaryLine(s) {
  if (!s) return "";
  const sw = Object.entries(s.switches).map(([t, n]) => `${n} ${t === "leaf" ? (n === 1 ? "leaf" : "leaves") : `${t}${n === 1 ? "" : "s"}`}`);
  const f = s.findings || {};
  const judged = ["critical", "warning", "info"].filter((k) => f[k]).map((k) => `${f[k]} ${k}`);
  return [
    `${sw.join(", ")} (${s.tiers} tier${s.tiers === 1 ? "" : "s"})`,
    `${s.hosts} hosts on ${s.rails} rail${s.rails === 1 ? "" : "s"}${s.servers ? `, ${s.servers} known server${s.servers === 1 ? "" : "s"}` : ""}`,
    `${s.unnamed_hcas} HCAs with no host name`,
    `${s.links} links`,
    judged.length ? `findings: ${judged.join(", ")}` : "no findings",
  ].join(" · ");
}

function legend(page) {
  const box = clear($("fabric-legend"));
  box.append(el("span", { class: "legend-title", text: "Uplinks" }));
  for (const key of ["ndr", "hdr", "slow", "short", "missing"]) {
    const [colour, label] = SPEED[key];
    const line = svg("svg", { width: 26, height: 10 });
    line.append(svg("line", { x1: 1, y1: 5, x2: 25, y2: 5, stroke: colour, "stroke-width": 2.5, "stroke-dasharray": key === "short" || key === "missing" ? "4 3" : null }));
    box.append(el("span", { class: "legend-item" }, line, label));
  }
  if (page.bundled) box.append(el("span", { class: "legend-item muted", text: "(one line per leaf and spine group: too many pairs to draw each)" }));
}

function draw(page) {
  const [sw, sh] = page.sizes.spine;
  const [lw, lh] = page.sizes.leaf;
  const [hw, hh] = page.sizes.host;
  const root = svg("svg", { viewBox: `0 0 ${page.width} ${page.height}`, width: page.width, height: page.height, class: page.collapsed ? "fabric-svg large" : "fabric-svg", role: "img" });
  const links = svg("g", { class: "uplinks" });
  const overlay = svg("g", { class: "overlay" });
  const nodes = svg("g", { class: "switches" });
  const hostLayer = svg("g", { class: "hosts" });
  root.append(links, nodes, hostLayer, overlay);
  const at = page.switches;
  for (const r of page.rail_rows) {
    nodes.append(svg("text", { x: 2, y: r.y + 3, class: "rail-label" }, `r${r.rail}`));
  }
  for (const [lo, hi, count, speed, style] of page.uplinks) {
    const a = at[lo];
    const b = at[hi];
    const colour = SPEED[style || speed] ? SPEED[style || speed][0] : SPEED.slow[0];
    links.append(svg("line", {
      x1: a.x, y1: a.y - lh / 2, x2: b.x, y2: b.y + sh / 2,
      stroke: colour, "stroke-width": style ? 2.2 : 0.9 + 0.5 * Math.min(count, 4),
      "stroke-opacity": style ? 0.95 : 0.35, "stroke-dasharray": style ? "5 4" : null,
      class: `uplink ${style || speed}`, "data-leaf": a.name, "data-spine": b.name,
    }));
  }
  at.forEach((s, i) => {
    const [w, h] = s.tier === "leaf" ? [lw, lh] : [sw, sh];
    const g = svg("g", { class: `switch ${s.tier}`, "data-name": s.name, "data-index": i });
    g.append(svg("rect", { x: s.x - w / 2, y: s.y - h / 2, width: w, height: h, rx: 3, stroke: s.severity ? SEVERITY[s.severity] : "#5f6b7d", "stroke-width": s.severity ? 2 : 1 }));
    g.append(svg("text", { x: s.x, y: s.y + 3, "text-anchor": "middle" }, s.name));
    nodes.append(g);
  });
  // One tooltip for every switch (a <title> each would double a large fabric's elements).
  const tip = $("fabric-tip");
  nodes.addEventListener("mouseover", (event) => {
    const g = event.target.closest(".switch");
    if (!g) return;
    const s = at[Number(g.dataset.index)];
    const lines = [`${s.name} (${s.tier}${s.rail !== null && s.rail !== undefined ? `, rail ${s.rail}` : ""})`];
    if (s.unnamed) lines.push(`${s.unnamed} HCA(s) whose NodeDescription names no host`);
    tip.textContent = lines.join(" · ");
    tip.hidden = false;
  });
  nodes.addEventListener("mouseout", () => { tip.hidden = true; });
  const shown = new Set(page.collapsed ? [] : page.units.map((u) => u.unit));
  // A large fabric's hosts come per unit, when a unit is opened (see FabricPageApi).
  const hosts = new Map((page.hosts || []).map((h) => [h.hostname, h]));
  const fetched = new Set(page.hosts ? page.units.map((u) => u.unit) : []);
  const fetchUnits = async (params) => {
    const got = await getJSON(`fabrics/${encodeURIComponent(data.name)}/page/`, params);
    for (const h of got.hosts) hosts.set(h.hostname, h);
    if (got.unit === "*") for (const u of page.units) fetched.add(u.unit);
    else fetched.add(got.unit);
    return got.unit;
  };
  const openUnits = async (units) => {
    const missing = units.filter((u) => !fetched.has(u));
    if (missing.length > 1) await fetchUnits({ unit: "*" });
    else if (missing.length === 1) await fetchUnits({ unit: missing[0] });
    for (const u of units) shown.add(u);
    drawHosts();
  };
  const drawHosts = () => {
    hostLayer.replaceChildren();
    for (const u of page.units) {
      if (!shown.has(u.unit)) {
        const g = svg("g", { class: "unit-chip", "data-unit": u.unit, tabindex: 0 });
        g.append(svg("rect", { x: u.x - hw / 2, y: u.y - hh / 2, width: hw, height: hh, rx: 7, stroke: u.severity ? SEVERITY[u.severity] : "#5f6b7d" }));
        g.append(svg("text", { x: u.x, y: u.y + 3, "text-anchor": "middle" }, `${u.hosts} hosts ▾`));
        g.addEventListener("click", () => openUnits([u.unit]).catch((err) => showError($("fabric-summary"), err)));
        hostLayer.append(g);
      }
    }
    for (const h of hosts.values()) {
      if (!shown.has(h.unit)) continue;
      const g = svg("g", { class: "host", "data-host": h.hostname, tabindex: 0 });
      g.append(svg("rect", { x: h.x - hw / 2, y: h.y - hh / 2, width: hw, height: hh, rx: 7, stroke: h.severity ? SEVERITY[h.severity] : "#9aa5b5", "stroke-width": h.severity ? 1.6 : 1 }));
      g.append(svg("text", { x: h.x, y: h.y + 3, "text-anchor": "middle" }, h.hostname));
      g.addEventListener("click", () => selectHost(h.hostname));
      hostLayer.append(g);
    }
  };
  drawHosts();
  const expand = $("fabric-expand");
  expand.hidden = !page.collapsed;
  expand.onclick = () => openUnits(page.units.map((u) => u.unit)).then(() => { expand.hidden = true; }).catch((err) => showError($("fabric-summary"), err));
  state = { page, overlay, root, shown, hosts, drawHosts, openUnits, fetchUnits };
  clear($("fabric-canvas")).append(root);
}

async function selectHost(name) {
  const { page, overlay, shown, hosts, openUnits, fetchUnits } = state;
  if (!hosts.has(name)) await fetchUnits({ host: name });
  const h = hosts.get(name) || [...hosts.values()].find((x) => x.server === name);
  if (!h) return;
  if (!shown.has(h.unit)) await openUnits([h.unit]);
  overlay.replaceChildren();
  const [, lh] = page.sizes.leaf;
  const [, hh] = page.sizes.host;
  for (const [idx, , rail] of h.rails) {
    if (idx === null || idx === undefined) continue;
    const leaf = page.switches[idx];
    overlay.append(svg("line", { x1: h.x, y1: h.y - hh / 2, x2: leaf.x, y2: leaf.y + lh / 2, class: "rail-line", "data-rail": rail }));
  }
  for (const node of state.root.querySelectorAll(".host.selected")) node.classList.remove("selected");
  const chip = state.root.querySelector(`.host[data-host="${CSS.escape(h.hostname)}"]`);
  if (chip) chip.classList.add("selected");
  $("host-panel").hidden = false;
  $("host-title").textContent = h.hostname;
  const rows = clear($("host-rails"));
  for (const [idx, port, rail, device, rate] of h.rails) {
    const leaf = idx === null || idx === undefined ? "–" : page.switches[idx].name;
    rows.append(el("tr", {}, el("td", { text: device || "–" }), el("td", { text: rail ?? "–" }), el("td", { text: leaf }), el("td", { text: port ?? "–" }), el("td", { text: rate || "–" })));
  }
  const link = clear($("host-link"));
  if (h.server) link.append(el("a", { href: `/servers/${encodeURIComponent(h.server)}/`, text: `Open ${h.server}'s server page` }));
  else link.append(el("span", { class: "muted", text: "No server of this name reports to topoweb." }));
  document.body.dataset.hostSelected = h.hostname;
}

function findings(list) {
  const ul = clear($("fabric-findings"));
  if (!list.length) { ul.append(el("li", { class: "finding ok", text: "No findings: every leaf has its peers' uplinks and every host its rails." })); return; }
  for (const f of list) {
    const li = el("li", { class: `finding sev-${f.severity}`, dataset: { kind: f.kind } },
      el("span", { class: `badge sev-${f.severity}`, text: f.severity }), " ", f.message);
    li.addEventListener("click", () => {
      for (const node of state.root.querySelectorAll(".switch.flagged")) node.classList.remove("flagged");
      for (const name of f.switches) {
        const node = state.root.querySelector(`.switch[data-name="${CSS.escape(name)}"]`);
        if (node) node.classList.add("flagged");
      }
      const host = f.hosts.find((name) => !name.startsWith("H-"));
      if (host) selectHost(host).catch((err) => showError($("fabric-summary"), err));
    });
    ul.append(li);
  }
}

const plural = (n, one, many) => `${n} ${n === 1 ? one : many}`;
const end = (name, port) => `${name} port ${port}`;

// One line per kind of change between two captures (GET fabrics/NAME/diff/), the first few
// rate changes and moved HCAs named.
function changesText(d) {
  const parts = [];
  const counted = [
    [d.switches.added, "switch added", "switches added"],
    [d.switches.removed, "switch removed", "switches removed"],
    [d.links.added, "link added", "links added"],
    [d.links.removed, "link removed", "links removed"],
    [d.hcas.added, "HCA added", "HCAs added"],
    [d.hcas.removed, "HCA removed", "HCAs removed"],
  ];
  for (const [listed, one, many] of counted) if (listed.count) parts.push(plural(listed.count, one, many));
  const rates = d.links.rate_changed;
  if (rates.count) {
    const named = rates.items.slice(0, 3).map((l) => `${end(l.a, l.a_port)} - ${end(l.b, l.b_port)} ${l.was} → ${l.rate}`);
    parts.push(`${plural(rates.count, "link", "links")} at another rate: ${named.join(", ")}${rates.count > 3 ? ", …" : ""}`);
  }
  const moved = d.hcas.moved;
  if (moved.count) {
    const named = moved.items.slice(0, 3).map((h) => `${h.host || h.guid} ${h.hca || ""} ${end(h.was_switch, h.was_port)} → ${end(h.switch, h.port)}`);
    parts.push(`${plural(moved.count, "HCA", "HCAs")} moved: ${named.join(", ")}${moved.count > 3 ? ", …" : ""}`);
  }
  return parts.length ? parts.join("; ") : "no change";
}

async function showChanges(cell, name, older, newer) {
  cell.replaceChildren(el("span", { class: "muted", text: "comparing…" }));
  const d = await getJSON(`fabrics/${name}/diff/`, { from: older, to: newer });
  const text = changesText(d);
  cell.replaceChildren(el("span", { class: text === "no change" ? "muted" : "badge sev-warning", text }));
}

// The captures, newest first (the API's first page); hidden while there is only one. The newest
// change is compared at once, older ones on request: each comparison reads both captures.
async function captures(name) {
  const listed = (await getJSON(`fabrics/${name}/captures/`)).results;
  if (listed.length < 2) return;
  $("captures-card").hidden = false;
  const rows = clear(document.querySelector("#captures-table tbody"));
  for (const [i, c] of listed.entries()) {
    const older = listed[i + 1];
    const changed = el("td", { class: "changes" });
    if (!older) changed.append(el("span", { class: "muted", text: "first" }));
    else if (i > 0) {
      const ask = el("button", { type: "button", class: "link-button", text: "What changed?" });
      ask.addEventListener("click", () => showChanges(changed, name, older.id, c.id).catch((err) => showError(changed, err)));
      changed.append(ask);
    }
    rows.append(el("tr", { dataset: { capture: c.id } },
      el("td", { class: "age", title: c.captured_at, text: fmtDate(c.captured_at) }),
      el("td", { text: c.hostname || c.source }),
      el("td", { class: "num", text: c.switch_count }),
      el("td", { class: "num", text: c.link_count }),
      changed));
    if (i === 0 && older) await showChanges(changed, name, older.id, c.id);
  }
  document.body.dataset.capturesReady = "1";
}

async function load() {
  const name = encodeURIComponent(data.name);
  try {
    const doc = await getJSON(`fabrics/${name}/page/`);
    if (doc.status !== "done" || !doc.page) {
      $("fabric-summary").textContent = doc.status === "failed" ? "The analysis of this capture failed." : "The worker is analysing this capture…";
      if (doc.status !== "failed") setTimeout(load, 2000);
      return;
    }
    $("fabric-summary").textContent = summaryLine(doc.summary);
    if (doc.warnings.length) {
      const box = $("fabric-warnings");
      box.hidden = false;
      box.replaceChildren(el("strong", { text: "Reader warnings" }), el("ul", {}, doc.warnings.slice(0, 20).map((w) => el("li", { text: w }))));
    }
    legend(doc.page);
    draw(doc.page);
    findings(doc.findings);
    if (data.host) await selectHost(data.host);
    window.topowebFabricReady = performance.now(); // bench/fabric_page.py reads it
    document.body.dataset.fabricReady = "1";
  } catch (err) {
    showError($("fabric-summary"), err);
    return;
  }
  captures(name).catch((err) => showError($("fabric-summary"), err));
}

load();
