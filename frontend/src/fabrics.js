// Fabrics page: every fabric with its latest capture, and the upload form (a file, by name).

import { clear, el, fmtDate, getJSON, postForm, showError } from "./api.js";

const $ = (id) => document.getElementById(id);

async function list() {
  const rows = clear($("fabric-rows"));
  try {
    const doc = await getJSON("fabrics/", { page_size: 200 });
    if (!doc.results.length) {
      rows.append(el("tr", {}, el("td", { colspan: 6, class: "muted", text: "No fabric yet: upload an ibnetdiscover capture." })));
    }
    for (const f of doc.results) {
      const c = f.latest_capture || {};
      rows.append(el("tr", {},
        el("td", {}, el("a", { href: `/fabrics/${encodeURIComponent(f.name)}/`, text: f.name })),
        el("td", { text: c.switch_count ?? "–" }),
        el("td", { text: c.ca_count ?? "–" }),
        el("td", { text: c.link_count ?? "–" }),
        el("td", { class: "age", text: fmtDate(c.captured_at) }),
        el("td", {}, el("span", { class: `badge analysis-${c.status || "pending"}`, text: c.status || "pending" }))));
    }
  } catch (err) {
    rows.append(el("tr", {}, el("td", { colspan: 6, class: "error", text: err.message })));
  }
}

const form = $("fabric-upload");
if (form) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const error = $("fabric-error");
    error.hidden = true;
    const body = new FormData(form);
    body.delete("csrfmiddlewaretoken");
    try {
      const done = await postForm("fabrics/", body);
      window.location.assign(`/fabrics/${encodeURIComponent(done.name)}/`);
    } catch (err) {
      showError(error, err);
    }
  });
}

list();
