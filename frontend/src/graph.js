// The topology graph shared by the server, compare and upload pages: Cytoscape styles keyed on
// the link classes of `core.export.cytoscape_elements`, the legend, hover tooltips, path
// highlighting and placement-group colouring.

import { el, clear, fmtNumber } from "./api.js";

// Each class has a colour AND a line pattern AND a text label, so colour never carries the
// meaning alone. Nearest to farthest, as nvidia-smi orders them.
export const LINK_CLASSES = [
  { key: "NV", label: "NV#", name: "NVLink (width = link count)", color: "#1b7f3b", style: "solid", dash: null },
  { key: "PIX", label: "PIX", name: "one PCIe switch", color: "#1f5fbf", style: "solid", dash: null },
  { key: "PXB", label: "PXB", name: "several PCIe switches", color: "#3fa7d6", style: "dashed", dash: [10, 4] },
  { key: "PHB", label: "PHB", name: "through the host bridge (CPU)", color: "#7b4fb0", style: "dashed", dash: [4, 4] },
  { key: "NODE", label: "NODE", name: "between host bridges, same NUMA node", color: "#e08a00", style: "dotted", dash: [2, 4] },
  { key: "SYS", label: "SYS", name: "across the CPU socket interconnect", color: "#c8322d", style: "dotted", dash: [1, 6] },
  // One hop of the recovered PCIe tree; device-to-device classes are the paths through it.
  { key: "PCIe", label: "PCIe", name: "one hop of the recovered PCIe tree", color: "#4a5263", style: "solid", dash: null },
];

export const GROUP_COLOURS = ["#e6194b", "#3cb44b", "#4363d8", "#f58231", "#911eb4", "#42d4f4", "#f032e6", "#9a6324", "#469990", "#800000", "#808000", "#000075"];

export function classInfo(linkClass) {
  if (!linkClass) return null;
  const key = /^NV\d+$/.test(linkClass) ? "NV" : linkClass;
  return LINK_CLASSES.find((c) => c.key === key) || null;
}

const kindOf = (n) => n.data("kind") || n.data("type") || "";

// Node boxes grow with their label so long NIC names and placement tags stay inside.
const labelWidth = (perChar, min) => (n) => Math.max(min, String(n.data("group_label") || n.data("label") || "").length * perChar + 14);

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
        color: "#1d2430",
        "background-color": "#d8dde6",
        "border-width": 1,
        "border-color": "#8a94a6",
        width: 60,
        height: 32,
        shape: "round-rectangle",
        "min-zoomed-font-size": 5,
      },
    },
    { selector: 'node[kind = "gpu"]', style: { "background-color": "#cfe8d5", "border-color": "#1b7f3b", "border-width": 2, width: 70, height: 38, "font-size": 16, "font-weight": "bold" } },
    { selector: 'node[kind = "nic"]', style: { "background-color": "#dbe7fb", "border-color": "#1f5fbf", shape: "round-tag", width: labelWidth(8, 70), height: 30, "font-size": 13 } },
    { selector: 'node[kind = "nvswitch"], node[kind = "nvlink_fabric"], node[kind = "fabric"]', style: { "background-color": "#1b7f3b", color: "#fff", shape: "hexagon", width: 150, height: 54, "font-size": 15, "font-weight": "bold" } },
    { selector: 'node[kind = "pcie_switch"], node[kind = "switch"], node[kind = "switch_tree"]', style: { "background-color": "#eef1f5", shape: "diamond", width: 36, height: 36, "font-size": 11, "text-valign": "bottom", "text-margin-y": 3 } },
    { selector: 'node[kind = "host_bridge"], node[kind = "bridge"]', style: { "background-color": "#efe7f7", "border-color": "#7b4fb0", shape: "rectangle", width: 72, height: 22, "font-size": 11 } },
    { selector: 'node[kind = "cpu"], node[kind = "socket"]', style: { "background-color": "#fdf1dd", "border-color": "#e08a00", shape: "round-rectangle", width: 72, height: 28 } },
    {
      selector: ":parent",
      style: {
        "background-color": "#f6f7f9",
        "background-opacity": 0.7,
        "border-color": "#9aa3b2",
        "border-style": "dashed",
        "border-width": 1.5,
        shape: "round-rectangle",
        "text-valign": "top",
        "text-halign": "center",
        "font-size": 15,
        "font-weight": "bold",
        color: "#4a5263",
        padding: 10,
      },
    },
    {
      selector: "edge",
      style: {
        width: 2,
        "curve-style": "bezier",
        "line-color": "#9aa3b2",
        label: "data(link_class)",
        "font-size": 11,
        color: "#4a5263",
        "text-background-color": "#ffffff",
        "text-background-opacity": 0.85,
        "text-background-padding": 1,
        "text-rotation": "autorotate",
        "min-zoomed-font-size": 6,
      },
    },
    ...edgeStyles,
    // NVLink width grows with the bonded link count (NV1 thin, NV18 thick).
    { selector: "edge[nvlinks > 0]", style: { width: "mapData(nvlinks, 1, 18, 2, 9)" } },
    { selector: "node[group_colour]", style: { width: labelWidth(9, 70), "font-size": 14, "background-color": "data(group_colour)", "border-color": "#1d2430", "border-width": 3, label: "data(group_label)", color: "#fff", "text-outline-color": "#1d2430", "text-outline-width": 1.5 } },
    { selector: "edge.into-compound", style: { display: "none" } },
    { selector: ".faded", style: { opacity: 0.15 } },
    { selector: "node.path", style: { "border-width": 2.5, "border-color": "#3d4555" } },
    { selector: "edge.path", style: { opacity: 1, "z-index": 10, "underlay-color": "#ffd400", "underlay-opacity": 0.55, "underlay-padding": 4 } },
    { selector: "node.selected-gpu", style: { "border-width": 5, "border-color": "#ffb000", "underlay-color": "#ffd400", "underlay-opacity": 0.6, "underlay-padding": 6 } },
  ];
}

let registered = false;
function ensureRegistered() {
  if (!registered && window.cytoscape && window.cytoscapeFcose) {
    window.cytoscape.use(window.cytoscapeFcose);
    registered = true;
  }
}

// Draws the elements and resolves with the Cytoscape instance once the layout is done.
export function drawGraph(container, elements, { onReady } = {}) {
  ensureRegistered();
  const cy = window.cytoscape({
    container,
    elements,
    style: stylesheet(),
    wheelSensitivity: 0.3,
    minZoom: 0.15,
    maxZoom: 3,
    boxSelectionEnabled: false,
    autoungrabify: false,
  });
  const hasCompound = cy.nodes(":parent").length > 0;
  // A PCIe hop up into a NUMA box is already said by the box containing the node; drawn, it
  // would run to the box's corner. The SYS hop between two boxes stays.
  cy.edges().filter((e) => (e.source().isParent() || e.target().isParent()) && e.data("link_class") !== "SYS").addClass("into-compound");
  const layout = cy.layout({
    name: registered ? "fcose" : "cose",
    quality: cy.nodes().length > 60 ? "draft" : "default",
    randomize: true,
    animate: false,
    fit: true,
    padding: 24,
    nodeDimensionsIncludeLabels: true,
    // Short edges and strong gravity keep the drawing compact: fitted into the card at
    // 1280 px, the labels then stay readable instead of shrinking to a few pixels.
    nodeRepulsion: () => 4500,
    idealEdgeLength: (edge) => (edge.data("nvlinks") > 0 ? 80 : 40),
    edgeElasticity: () => 0.45,
    nestingFactor: hasCompound ? 0.1 : 0.1,
    gravity: 0.8,
    gravityCompound: 1.5,
    gravityRangeCompound: 1.0,
    numIter: 2500,
    tile: true,
    packComponents: true,
  });
  return new Promise((resolve) => {
    layout.one("layoutstop", () => {
      cy.fit(undefined, 24);
      if (onReady) onReady(cy);
      resolve(cy);
    });
    layout.run();
  });
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
  if (d.bandwidth_gbps_per_direction != null) lines.push([`${fmtNumber(d.bandwidth_gbps_per_direction, 1)} GB/s per direction`]);
  if (d.latency_us != null) lines.push([`latency ${fmtNumber(d.latency_us, 2)} µs`]);
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
  return lines;
}

// Tooltips are built from text nodes only; labels arrive from uploaded text and hostnames.
export function attachTooltips(cy, tooltip) {
  const show = (evt, lines) => {
    clear(tooltip);
    for (const [text, cls] of lines) tooltip.append(el("div", { class: cls || null, text }));
    const box = cy.container().getBoundingClientRect();
    const parentBox = tooltip.offsetParent ? tooltip.offsetParent.getBoundingClientRect() : { left: 0, top: 0 };
    const p = evt.renderedPosition || evt.target.renderedPosition();
    tooltip.style.left = `${box.left - parentBox.left + p.x + 14}px`;
    tooltip.style.top = `${box.top - parentBox.top + p.y + 14}px`;
    tooltip.hidden = false;
  };
  cy.on("mouseover", "edge", (evt) => show(evt, edgeLines(evt.target)));
  cy.on("mouseover", "node", (evt) => show(evt, nodeLines(evt.target)));
  cy.on("mouseout", "node, edge", () => { tooltip.hidden = true; });
  cy.on("pan zoom", () => { tooltip.hidden = true; });
}

// Highlights every shortest path from a GPU to the other GPUs and NICs, fades the rest.
export function highlightPaths(cy, gpu) {
  clearHighlight(cy);
  const targets = cy.nodes().filter((n) => n !== gpu && ["gpu", "nic"].includes(kindOf(n)));
  const dj = cy.elements().dijkstra({ root: gpu, weight: (e) => (e.data("nvlinks") > 0 ? 1 : 2) });
  let onPath = cy.collection().union(gpu);
  targets.forEach((t) => {
    const p = dj.pathTo(t);
    if (p.length) onPath = onPath.union(p);
  });
  const parents = onPath.nodes().ancestors();
  cy.elements().not(onPath).not(parents).addClass("faded");
  onPath.addClass("path");
  gpu.addClass("selected-gpu");
  return onPath;
}

export function clearHighlight(cy) {
  cy.elements().removeClass("faded path selected-gpu");
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
        node.data("group_label", `${node.data("label")} · ${labelPrefix} ${i}`);
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
