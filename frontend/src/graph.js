// The topology graph shared by the server, compare and upload pages. It only draws: positions,
// sizes, edge routes and the path from a GPU to each peer all come from the server
// (`core.layout`, `core.export.graph_document`), so the same topology looks the same on every
// load. Here: Cytoscape styles keyed on the link classes, the legend, tooltips, the NIC-group
// toggle, path highlighting, placement-group colouring and the PNG export.

import { el, clear, fmtNumber } from "./api.js";

// The one style sheet (core/graphstyle.py), rendered into the page by the server: each class
// has a colour AND a line pattern AND a text label, so colour never carries the meaning alone;
// the exported SVG draws from the same document.
const STYLE = JSON.parse(document.getElementById("graph-style")?.textContent || "null") || { link_classes: [], nodes: {}, edge_width: 2, sys_width: 3, source_label_offset: { fabric: 34, crossing: 14 }, caption_max_width: 120 };
export const LINK_CLASSES = STYLE.link_classes;

export const GROUP_COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#9a6324", "#469990", "#800000", "#808000", "#000075"];

export function classInfo(linkClass) {
  if (!linkClass) return null;
  const key = /^NV\d+$/.test(linkClass) ? "NV" : linkClass;
  return LINK_CLASSES.find((c) => c.key === key) || null;
}

const kindOf = (n) => n.data("kind") || n.data("type") || "";

function stylesheet() {
  const edgeStyles = LINK_CLASSES.map((c) => ({
    selector: c.key === "NV" ? "edge[nvlinks > 0]" : `edge[link_class = "${c.key}"]`,
    style: {
      "line-color": c.color,
      "target-arrow-color": c.color,
      "line-style": c.style,
      ...(c.dash ? { "line-dash-pattern": c.dash } : {}),
    },
  }));
  return [
    {
      selector: "node",
      style: {
        label: "data(label)",
        "font-size": 13,
        "font-family": "system-ui, sans-serif",
        "text-valign": "center",
        "text-halign": "center",
        "text-wrap": "wrap",
        color: "#1d2430",
        "background-color": "#d8dde6",
        "border-width": 1,
        "border-color": "#8a94a6",
        shape: "round-rectangle",
        "min-zoomed-font-size": 0,
      },
    },
    // Compound boxes are sized by Cytoscape round their members: only drawn nodes have a size.
    { selector: "node[width]", style: { width: "data(width)", height: "data(height)" } },
    ...Object.entries(STYLE.nodes).filter(([kind]) => !["numa", "nic_box"].includes(kind)).map(([kind, n]) => ({
      selector: `node[kind = "${kind}"]`,
      style: { "background-color": n.fill, "border-color": n.stroke, color: n.ink, "font-size": n.font },
    })),
    { selector: 'node[kind = "gpu"]', style: { "border-width": 2, "font-weight": "bold" } },
    { selector: 'node[kind = "nic_group"]', style: { "border-style": "double", "border-width": 3 } },
    { selector: 'node[kind = "nvswitch"], node[kind = "cpu"], node[kind = "interconnect"]', style: { "font-weight": "bold" } },
    { selector: 'node[kind = "host_bridge"]', style: { shape: "rectangle" } },
    {
      selector: ":parent",
      style: {
        "background-color": STYLE.nodes.numa?.fill || "#f6f7f9",
        "background-opacity": 0.7,
        "border-color": STYLE.nodes.numa?.stroke || "#9aa3b2",
        "border-style": "dashed",
        "border-width": 1.5,
        shape: "round-rectangle",
        // The CPU node on top of each box carries its title; a box label would be repeated.
        label: "",
        padding: 12,
        // Members' boxes, not their text, size a box (the server sized each node to its label).
        "compound-sizing-wrt-labels": "exclude",
      },
    },
    { selector: 'node[kind = "nic_box"]', style: { label: "data(label)", "text-valign": "bottom", "text-halign": "center", "font-size": 12, color: STYLE.nodes.nic_box?.ink || "#4a5263", "background-color": STYLE.nodes.nic_box?.fill || "#eef3fc", "border-style": "solid", "border-color": STYLE.nodes.nic_box?.stroke || "#1f5fbf", padding: 4 } },
    {
      selector: "edge",
      style: {
        width: STYLE.edge_width,
        "curve-style": "straight",
        "line-color": "#9aa3b2",
        label: "",
        "font-size": 11,
        color: "#1d2430",
        "text-background-color": "#ffffff",
        "text-background-opacity": 0.9,
        "text-background-padding": 1,
        "min-zoomed-font-size": 0,
      },
    },
    ...edgeStyles,
    // NVLink width grows with the bonded link count (the server computes it from the style
    // sheet: NV1 and NV2 clearly apart, NV18 still a line); its label names it.
    { selector: "edge[nvlinks > 0]", style: { label: "data(link_class)" } },
    { selector: "edge[line_width]", style: { width: "data(line_width)" } },
    // An edge down to the NVSwitch bar says its class next to the GPU, where it starts; so do
    // crossing diagonals, whose mid-edge labels would meet.
    { selector: "edge[?fabric]", style: { label: "", "source-label": "data(link_class)", "source-text-offset": STYLE.source_label_offset.fabric } },
    { selector: "edge[?label_at_source]", style: { label: "", "source-label": "data(link_class)", "source-text-offset": STYLE.source_label_offset.crossing } },
    { selector: 'edge[link_class = "SYS"]', style: { label: "data(link_class)", width: STYLE.sys_width } },
    // The socket link names its platform, "(assumed)" where the capture did not say.
    { selector: 'edge[link_class = "SYS"][caption]', style: { label: "data(caption)", "text-wrap": "wrap", "text-max-width": `${STYLE.caption_max_width}px` } },
    { selector: "edge.routed", style: { "curve-style": "segments", "edge-distances": "node-position", "segment-distances": "data(seg_d)", "segment-weights": "data(seg_w)" } },
    { selector: "edge.bent", style: { "curve-style": "unbundled-bezier", "edge-distances": "node-position", "control-point-distances": "data(bend_d)", "control-point-weights": 0.5 } },
    { selector: "edge[in_group]", style: { display: "none" } },
    { selector: ".off", style: { display: "none" } },
    { selector: "node[group_colour]", style: { "font-size": 12, "line-height": 1.1, "background-color": "data(group_colour)", "border-color": "#1d2430", "border-width": 3, label: "data(group_label)", color: "#fff", "text-outline-color": "#1d2430", "text-outline-width": 1.5 } },
    { selector: ".faded", style: { opacity: 0.15 } },
    { selector: "node.path", style: { "border-width": 2.5, "border-color": "#3d4555" } },
    // A peer names its class under its own name, in a size that stays inside its box.
    { selector: "node.peer", style: { label: "data(peer_label)", "font-size": 12 } },
    { selector: "edge.path", style: { opacity: 1, "z-index": 10, "underlay-color": "data(path_colour)", "underlay-opacity": 0.55, "underlay-padding": 4 } },
    { selector: "node.finding-device", style: { "border-width": 4, "border-color": "#c8322d" } },
    { selector: "node.selected-gpu", style: { "border-width": 5, "border-color": "#ffb000", "underlay-color": "#ffd400", "underlay-opacity": 0.6, "underlay-padding": 6 } },
  ];
}

// A corner point of the server's route, relative to the edge's two node centres, as Cytoscape's
// segments want it: the share along the edge and the signed distance off it.
function relative(s, t, q) {
  const dx = t.x - s.x;
  const dy = t.y - s.y;
  const len2 = dx * dx + dy * dy || 1;
  const len = Math.sqrt(len2);
  return { w: ((q[0] - s.x) * dx + (q[1] - s.y) * dy) / len2, d: ((q[0] - s.x) * -dy + (q[1] - s.y) * dx) / len };
}

// Where a route's end segment meets a node it runs straight into (a drop onto the NVSwitch bar,
// a PCIe hop into a box), the edge ends on that node's border below the route's corner, fixed
// in the node's own frame: Cytoscape would otherwise aim the last segment at the node's centre
// (a diagonal stub), and drop an edge whose corner falls inside the node's border once a
// highlight thickens it.
function endpoint(node, corner) {
  const p = node.position();
  const w = node.width() / 2;
  const h = node.height() / 2;
  const dx = corner[0] - p.x;
  const dy = corner[1] - p.y;
  if (Math.abs(dx) <= w && Math.abs(dy) > h) return `${dx}px ${dy > 0 ? h : -h}px`;
  if (Math.abs(dy) <= h && Math.abs(dx) > w) return `${dx > 0 ? w : -w}px ${dy}px`;
  return null;
}

function applyRoute(edge, route, bend) {
  edge.removeClass("routed bent");
  edge.removeStyle("source-endpoint target-endpoint");
  if (route && route.length) {
    const s = edge.source().position();
    const t = edge.target().position();
    const rel = route.map((q) => relative(s, t, q));
    edge.data({ seg_w: rel.map((r) => r.w), seg_d: rel.map((r) => r.d) });
    edge.addClass("routed");
    const at = { "source-endpoint": endpoint(edge.source(), route[0]), "target-endpoint": endpoint(edge.target(), route[route.length - 1]) };
    for (const [k, v] of Object.entries(at)) if (v) edge.style(k, v);
  } else if (bend) {
    edge.data("bend_d", [bend]);
    edge.addClass("bent");
  }
}

// NIC groups: one node each (collapsed) or every NIC in a box. The server laid out both; the
// mode not drawn first keeps its positions and routes in alt_position / alt_route / alt_bend.
export function setNicMode(cy, collapsed) {
  const current = cy.scratch("_nicCollapsed");
  if (current === undefined || current === null) { cy.scratch("_nicCollapsed", collapsed); }
  const swap = current !== undefined && current !== null && current !== collapsed;
  cy.batch(() => {
    if (swap) {
      cy.nodes().forEach((n) => {
        const alt = n.data("alt_position");
        if (alt && !n.isParent()) {
          const here = { ...n.position() };
          n.position(alt);
          n.data("alt_position", here);
        }
        const altWidth = n.data("alt_width");
        if (altWidth !== undefined) n.data({ alt_width: n.data("width"), width: altWidth });
      });
      cy.edges().forEach((e) => {
        if (e.data("alt_route") === undefined && e.data("alt_bend") === undefined) return;
        const route = e.data("alt_route");
        const bend = e.data("alt_bend");
        e.data({ alt_route: e.data("route") || [], alt_bend: e.data("bend") || 0, route, bend });
      });
      cy.scratch("_nicCollapsed", collapsed);
    }
    const mode = collapsed ? "collapsed" : "expanded";
    cy.elements("[mode]").forEach((x) => { x.toggleClass("off", x.data("mode") !== mode); });
  });
  // Routes are relative to their ends' positions: a NIC box (a compound) has its position only
  // once its NICs are shown, after the batch, so routes are applied after it.
  cy.edges().forEach((e) => applyRoute(e, e.data("route"), e.data("bend")));
}

// Draws a graph document ({elements, paths, nic_groups}, or a bare element list) at the
// server's positions; resolves with the Cytoscape instance.
export function drawGraph(container, graph, { onReady, collapsed } = {}) {
  const doc = Array.isArray(graph) ? { elements: graph, paths: {}, nic_groups: { present: false, collapsed: false } } : graph;
  const cy = window.cytoscape({
    container,
    elements: doc.elements,
    style: stylesheet(),
    layout: { name: "preset", fit: false },
    minZoom: 0.1,
    maxZoom: 3,
    boxSelectionEnabled: false,
    autoungrabify: true, // the routes are drawn for these positions
  });
  cy.scratch("_paths", doc.paths || {});
  cy.scratch("_figures", doc.figures || null);
  cy.scratch("_nicCollapsed", doc.nic_groups?.collapsed ?? false);
  setNicMode(cy, collapsed ?? doc.nic_groups?.collapsed ?? false);
  fitGraph(cy);
  if (onReady) onReady(cy);
  return Promise.resolve(cy);
}

// Fits the drawing to its panel by the shapes the server placed, not their text: a label's
// measured width depends on when the browser has its font ready, and a fit that counted it
// drew the same graph at slightly different zooms from one load to the next.
export function fitGraph(cy) {
  const box = cy.elements(":visible").boundingBox({ includeLabels: false, includeOverlays: false, includeUnderlays: false });
  const pad = 24;
  const zoom = Math.min((cy.width() - 2 * pad) / (box.w || 1), (cy.height() - 2 * pad) / (box.h || 1), cy.maxZoom());
  cy.viewport({ zoom, pan: { x: (cy.width() - zoom * (box.x1 + box.x2)) / 2, y: (cy.height() - zoom * (box.y1 + box.y2)) / 2 } });
}

// The drawn graph as a PNG file, at twice the screen's resolution.
export function downloadPng(cy, filename) {
  const blob = cy.png({ full: true, scale: 2, bg: "#ffffff", output: "blob" });
  const a = el("a", { href: URL.createObjectURL(blob), download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 1000);
}

export function renderLegend(node) {
  clear(node);
  node.append(el("span", { class: "legend-title", text: "Link classes" }));
  for (const c of LINK_CLASSES) {
    const swatch = el("span", { class: `swatch line-${c.style}`, "aria-hidden": "true" });
    swatch.style.borderTopColor = c.color;
    node.append(el("span", { class: "legend-item", title: c.name, dataset: { linkClass: c.key } }, swatch, el("strong", { text: c.label }), " ", el("span", { class: "muted", text: c.name })));
  }
}

function edgeLines(edge) {
  const d = edge.data();
  const src = edge.source().data("label") || d.source;
  const tgt = edge.target().data("label") || d.target;
  const info = classInfo(d.link_class);
  const lines = [[`${src} ↔ ${tgt}`, "strong"]];
  let cls = d.link_class || "link";
  if (d.nvlinks > 0) cls += ` · ${d.nvlinks} NVLink${d.nvlinks > 1 ? "s" : ""}`;
  else if (info) cls += ` · ${info.name}`;
  lines.push([cls]);
  // The link's figures are the catalogue's for the GPU generation, not measured: said so,
  // with what the generation rests on.
  const figures = edge.cy().scratch("_figures");
  const modelled = figures ? " (modelled)" : "";
  if (d.bandwidth_gbps_per_direction != null) lines.push([`${fmtNumber(d.bandwidth_gbps_per_direction, 1)} GB/s per direction${modelled}`]);
  if (d.latency_us != null) lines.push([`latency ${fmtNumber(d.latency_us, 2)} µs${modelled}`]);
  if (d.label) lines.push([d.label]);
  if (figures && (d.bandwidth_gbps_per_direction != null || d.latency_us != null)) lines.push([`${figures.generation} catalogue figures: ${figures.basis}`, "assumed"]);
  if (d.assumed) lines.push([`assumed: ${d.assumed} (the capture names no CPU)`, "assumed"]);
  return lines;
}

function nodeLines(node) {
  const d = node.data();
  const lines = [[d.label || d.id, "strong"]];
  const kind = kindOf(node);
  if (kind) lines.push([kind.replace(/_/g, " ")]);
  if (d.name && d.name !== d.label) lines.push([d.name]);
  if (d.nic_name) lines.push([`RDMA device ${d.nic_name}`]);
  const numa = d.numa_affinity ?? d.numa;
  if (numa != null) lines.push([`NUMA ${numa}`]);
  if (d.cpu_affinity) lines.push([`CPUs ${d.cpu_affinity}`]);
  if (d.group_label) lines.push([`placement: ${d.group_label}`]);
  if (d.assumed) lines.push([`assumed: ${d.assumed} (the capture names no CPU)`, "assumed"]);
  if (d.inferred) lines.push([`inferred from the matrix: ${d.inferred}`, "assumed"]);
  return lines;
}

// Tooltips are built from text nodes only; labels arrive from uploaded text and hostnames.
// A node's tooltip sits beside the node's drawn box: right, left, below or above, the first
// place inside the graph that covers no other node (else the first that leaves the hovered
// node free), in the coordinates of the tooltip's own positioned ancestor. An edge's sits next
// to the pointer.
const TOOLTIP_GAP = 8;

function overlaps(a, b) {
  return a.x1 < b.x2 && b.x1 < a.x2 && a.y1 < b.y2 && b.y1 < a.y2;
}

function besideNode(cy, node, tw, th) {
  const r = node.renderedBoundingBox({ includeLabels: false, includeOverlays: false, includeUnderlays: false });
  const g = TOOLTIP_GAP;
  const spots = [
    { x1: r.x2 + g, y1: r.y1 },
    { x1: r.x1 - g - tw, y1: r.y1 },
    { x1: r.x1, y1: r.y2 + g },
    { x1: r.x1, y1: r.y1 - g - th },
  ].map((p) => ({ ...p, x2: p.x1 + tw, y2: p.y1 + th }));
  const inside = spots.filter((p) => p.x1 >= 0 && p.y1 >= 0 && p.x2 <= cy.width() && p.y2 <= cy.height());
  const others = cy.nodes(":visible").filter((n) => !n.isParent() && n.id() !== node.id())
    .map((n) => n.renderedBoundingBox({ includeLabels: false, includeOverlays: false, includeUnderlays: false }));
  return inside.find((p) => !others.some((o) => overlaps(p, o))) || inside[0] || spots[0];
}

export function attachTooltips(cy, tooltip) {
  const show = (evt, lines) => {
    clear(tooltip);
    for (const [text, cls] of lines) tooltip.append(el("div", { class: cls || null, text }));
    tooltip.hidden = false; // laid out first: a hidden element has no offsetParent nor size
    const frame = (tooltip.offsetParent || tooltip.parentElement || document.body).getBoundingClientRect();
    const box = cy.container().getBoundingClientRect();
    let spot;
    if (evt.target.isNode()) {
      spot = besideNode(cy, evt.target, tooltip.offsetWidth, tooltip.offsetHeight);
    } else {
      const p = evt.renderedPosition || evt.target.renderedMidpoint();
      spot = { x1: p.x + 14, y1: p.y + 14 };
    }
    tooltip.style.left = `${box.left + spot.x1 - frame.left}px`;
    tooltip.style.top = `${box.top + spot.y1 - frame.top}px`;
  };
  cy.on("mouseover", "edge", (evt) => show(evt, edgeLines(evt.target)));
  cy.on("mouseover", "node", (evt) => show(evt, nodeLines(evt.target)));
  cy.on("mouseout", "node, edge", () => { tooltip.hidden = true; });
  cy.on("pan zoom", () => { tooltip.hidden = true; });
}

// A GPU's rows of the server's paths, one per peer. A row of an NVSwitch fabric ({class, fabric})
// stands for every other GPU joined to the fabric node (or its `peers` where given), each
// reached over the GPU's and the peer's edge to the fabric.
function peerRows(cy, gpuId, rows) {
  return rows.flatMap((p) => {
    if (!p.fabric) return [p];
    const peers = p.peers || cy.getElementById(p.fabric).neighborhood("node").map((n) => n.id()).filter((id) => id !== gpuId);
    return peers.map((peer) => ({ peer, class: p.class, elements: [gpuId, `nv:${gpuId}:${p.fabric}`, p.fabric, `nv:${peer}:${p.fabric}`, peer] }));
  });
}

// Highlights the real path from a GPU to every other GPU and NIC, as the server traced it by
// their link class (a NODE peer through the host bridge, not NVLink hops); fades the rest and
// names each peer's class on it.
export function highlightPaths(cy, gpu) {
  clearHighlight(cy);
  const paths = peerRows(cy, gpu.id(), (cy.scratch("_paths") || {})[gpu.id()] || []);
  let onPath = cy.collection().union(gpu);
  // The server lists peers nearest first; drawn farthest first, so that where paths share an
  // edge the nearer class colours it.
  for (const p of [...paths].reverse()) {
    const items = cy.collection(p.elements.map((id) => cy.getElementById(id)).filter((x) => x.nonempty()));
    const info = classInfo(p.class);
    items.edges().data("path_colour", info ? info.color : "#ffd400");
    onPath = onPath.union(items);
    const peer = cy.getElementById(p.peer);
    if (peer.nonempty()) {
      peer.data("peer_label", `${peer.data("label")}\n${p.class}`);
      peer.addClass("peer");
    }
  }
  const parents = onPath.nodes().ancestors();
  cy.elements().not(onPath).not(parents).addClass("faded");
  onPath.addClass("path");
  gpu.addClass("selected-gpu");
  return onPath;
}

export function clearHighlight(cy) {
  cy.elements().removeClass("faded path selected-gpu peer finding-device");
}

// Highlights the devices a finding group names (each member's GPU pair, or one device) and,
// for a pair, the real path between them as the server traced it; fades the rest.
export function highlightPairs(cy, pairs) {
  clearHighlight(cy);
  const paths = cy.scratch("_paths") || {};
  let on = cy.collection();
  for (const [a, b] of pairs) {
    const first = cy.getElementById(a);
    if (first.empty()) continue;
    on = on.union(first);
    if (b === undefined) continue;
    const row = peerRows(cy, a, paths[a] || []).find((r) => r.peer === b);
    if (row) {
      const items = cy.collection(row.elements.map((id) => cy.getElementById(id)).filter((x) => x.nonempty()));
      const info = classInfo(row.class);
      items.edges().data("path_colour", info ? info.color : "#ffd400");
      on = on.union(items);
    } else {
      on = on.union(cy.getElementById(b));
    }
  }
  const parents = on.nodes().ancestors();
  cy.elements().not(on).not(parents).addClass("faded");
  on.addClass("path");
  on.nodes().filter((n) => pairs.some((p) => p.includes(n.id()))).addClass("finding-device");
  return on;
}

// Colours GPU nodes by placement group; `groups` is a list of lists of GPU indices or ids.
export function colourGroups(cy, groups, labelPrefix = "group") {
  clearHighlight(cy);
  cy.nodes().forEach((n) => { n.removeData("group_colour"); n.removeData("group_label"); n.removeData("group_index"); });
  groups.forEach((members, i) => {
    const colour = GROUP_COLOURS[i % GROUP_COLOURS.length];
    for (const m of members) {
      const node = findGpu(cy, m);
      if (node) {
        // The label carries the group too, so colour is never the only sign of it.
        node.data("group_colour", colour);
        node.data("group_index", i);
        // On its own line, in a size that stays inside the GPU's box (sized for its name).
        node.data("group_label", `${node.data("label")}\n${labelPrefix} ${i}`);
      }
    }
  });
}

export function findGpu(cy, ref) {
  if (typeof ref === "number") {
    return cy.nodes().filter((n) => kindOf(n) === "gpu" && (n.data("index") === ref || n.id() === `GPU${ref}` || n.data("label") === `GPU${ref}`))[0];
  }
  const byId = cy.getElementById(String(ref));
  if (byId.nonempty()) return byId;
  return cy.nodes().filter((n) => n.data("label") === ref || n.data("device") === ref)[0];
}

export { kindOf };
