// Server page: the InfiniBand leaves this server's HCAs hang off, per fabric (shown only when
// a fabric's latest analysis names the server).

import { el, getJSON, pageData } from "./api.js";

async function load() {
  const { hostname } = pageData();
  const fabrics = await getJSON(`servers/${encodeURIComponent(hostname)}/fabrics/`).catch(() => []);
  if (!fabrics.length) return;
  const box = document.getElementById("fabric-rails");
  for (const f of fabrics) {
    const link = `/fabrics/${encodeURIComponent(f.fabric)}/?host=${encodeURIComponent(f.hostname)}`;
    box.append(
      el("p", {}, el("a", { href: link, text: f.fabric }), ` · ${f.hcas.length} HCA${f.hcas.length === 1 ? "" : "s"}`),
      el("table", { class: "grid compact" },
        el("thead", {}, el("tr", {}, ["HCA", "Rail", "Leaf", "Port", "Rate"].map((t) => el("th", { text: t })))),
        el("tbody", {}, f.hcas.map((h) => el("tr", {},
          el("td", { text: h.name || "–" }), el("td", { text: h.rail ?? "–" }), el("td", { text: h.switch || "–" }),
          el("td", { text: h.port ?? "–" }), el("td", { text: h.rate || "–" }))))));
  }
  document.getElementById("fabric-panel").hidden = false;
  document.body.dataset.fabricRails = "1";
}

load();
