// Usage charts: CPU, memory and disk over the last minutes (`GET /v1/sandboxes/{id}/metrics`,
// sampled by the node every few seconds), as small SVG line charts.

import { el, bytes } from "./dom.js";

const REFRESH_MS = 5000;
const SVG = "http://www.w3.org/2000/svg";

/** A line chart of `values` (numbers or null) in a w×h box; `max` at the top. */
function sparkline(values, max) {
  const w = 240;
  const h = 48;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${w} ${h}`);
  svg.setAttribute("class", "chart");
  // One sample is drawn as a flat line.
  if (values.length === 1) values = [values[0], values[0]];
  const top = Math.max(max || 0, ...values.filter((v) => v !== null), 1e-9);
  const step = values.length > 1 ? w / (values.length - 1) : w;
  const points = values
    .map((v, i) => (v === null ? null : `${(i * step).toFixed(1)},${(h - 2 - (v / top) * (h - 4)).toFixed(1)}`))
    .filter(Boolean)
    .join(" ");
  const line = document.createElementNS(SVG, "polyline");
  line.setAttribute("points", points);
  svg.append(line);
  return svg;
}

export function renderMetrics(root, api, id, running) {
  const cpu = el("div", { class: "metric", id: "metric-cpu" });
  const memory = el("div", { class: "metric", id: "metric-memory" });
  const disk = el("div", { class: "metric", id: "metric-disk" });
  root.append(cpu, memory, disk);

  async function load() {
    if (!running()) return;
    try {
      const m = await api.get(`/v1/sandboxes/${encodeURIComponent(id)}/metrics`);
      const history = m.history.length ? m.history : [m.current];
      const now = m.current;
      cpu.replaceChildren(el("div", {}, "CPU ", el("b", {}, now.cpu.rate === null ? "–" : `${(now.cpu.rate * 100).toFixed(0)}%`)),
        sparkline(history.map((s) => s.cpu.rate), 1));
      memory.replaceChildren(el("div", {}, "memory ", el("b", {}, bytes(now.memory.bytes)),
        now.memory.limit_bytes ? ` of ${bytes(now.memory.limit_bytes)}` : ""),
        sparkline(history.map((s) => s.memory.bytes), now.memory.limit_bytes));
      disk.replaceChildren(el("div", {}, "disk ", el("b", {}, bytes(now.disk.used_bytes)),
        now.disk.limit_bytes ? ` of ${bytes(now.disk.limit_bytes)}` : ""),
        sparkline(history.map((s) => s.disk.used_bytes), now.disk.limit_bytes));
    } catch (err) {
      if (err.code !== "sandbox_not_running") console.warn("metrics", err);
    }
  }

  load();
  const timer = setInterval(load, REFRESH_MS);
  return () => clearInterval(timer);
}
