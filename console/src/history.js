// The sandbox's operations (`GET /v1/operations?sandbox_id=`) and its lifecycle events (from the
// live event stream).

import { el, showError, time } from "./dom.js";

export function renderHistory(root, api, live, id) {
  const ops = el("tbody", {});
  const events = el("ul", { id: "events", class: "events" });
  root.append(el("div", { class: "split" },
    el("div", {}, el("h3", {}, "Operations"),
      el("table", { id: "operations" },
        el("thead", {}, el("tr", {}, ["id", "kind", "state", "created", "error"].map((h) => el("th", {}, h)))),
        ops)),
    el("div", {}, el("h3", {}, "Events"), events)));

  async function loadOps() {
    try {
      const list = await api.get("/v1/operations", { sandbox_id: id, limit: 20 });
      ops.replaceChildren(...list.operations.map((o) => el("tr", {},
        el("td", { class: "mono" }, o.id),
        el("td", {}, o.kind),
        el("td", {}, el("span", { class: `op ${o.state}` }, o.state)),
        el("td", { class: "muted" }, time(o.created_at)),
        el("td", { class: "muted" }, o.error ? `${o.error.code}: ${o.error.message}` : ""))));
    } catch (err) {
      showError(err);
    }
  }

  function drawEvents() {
    const mine = live.events.filter((e) => e.sandbox_id === id).slice(-50).reverse();
    events.replaceChildren(...mine.map((e) => el("li", {},
      el("span", { class: "muted" }, time(e.time)), " ", el("b", {}, e.type),
      e.reason ? ` (${e.reason})` : "", e.destination ? ` → ${e.destination}` : "")));
  }

  loadOps();
  drawEvents();
  return live.subscribe((kind, event) => {
    if (kind === "event" && event.sandbox_id === id) {
      drawEvents();
      loadOps();
    }
  });
}
