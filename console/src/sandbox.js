// One sandbox: its state and lifecycle buttons, a terminal, files, commands, operations and
// events, and usage charts.

import { el, showError, showNote, time } from "./dom.js";
import { renderTerminal } from "./terminal.js";
import { renderFiles } from "./files.js";
import { renderCommands } from "./commands.js";
import { renderHistory } from "./history.js";
import { renderMetrics } from "./metrics.js";
import { renderPorts } from "./ports.js";

/** The buttons, and the states each one makes sense in. */
const MOVES = [
  ["pause", ["running"]],
  ["resume", ["paused"]],
  ["suspend", ["running", "paused"]],
  ["wake", ["suspended", "paused"]],
  ["delete", null],
];

/** Renders sandbox `id` into `root`; answers its cleanup. */
export function renderSandbox(root, session, id) {
  const { api, live } = session;
  const path = `/v1/sandboxes/${encodeURIComponent(id)}`;
  const state = el("span", { id: "state", class: "state" }, "…");
  const facts = el("p", { class: "muted" });
  const buttons = MOVES.map(([verb]) => el("button", { id: `do-${verb}`, class: verb === "delete" ? "danger" : "" }, verb));
  const cleanups = [];
  let sandbox = live.sandboxes.get(id);

  function draw() {
    if (!sandbox) return;
    state.textContent = sandbox.state;
    state.className = `state ${sandbox.state}`;
    const reason = sandbox.state_reason ? ` · ${sandbox.state_reason}` : "";
    facts.textContent = `${sandbox.template} #${sandbox.release} · ${sandbox.resources.vcpus} vCPU · ${sandbox.resources.memory_mib} MiB · ${sandbox.user} in ${sandbox.cwd} · created ${time(sandbox.created_at)}${reason}`;
    MOVES.forEach(([, states], i) => {
      buttons[i].disabled = sandbox.state === "deleted" || (states !== null && !states.includes(sandbox.state));
    });
  }

  MOVES.forEach(([verb], i) => buttons[i].addEventListener("click", async () => {
    if (verb === "delete" && !confirm(`Delete ${id} and everything in it?`)) return;
    buttons[i].disabled = true;
    try {
      const op = verb === "delete"
        ? await api.request("DELETE", path)
        : await api.post(`${path}/${verb}`);
      showNote(`${verb}: operation ${op.id}`);
    } catch (err) {
      showError(err);
      draw();
    }
  }));

  const running = () => sandbox && sandbox.state === "running";
  root.append(
    el("section", { class: "card" },
      el("h1", {}, el("a", { href: "#/" }, "Sandboxes"), " / ", id, " ", state),
      facts,
      el("div", { class: "row" }, buttons),
      el("p", { id: "status" })),
  );
  const grid = el("div", { class: "grid" });
  root.append(grid);
  const section = (title, cls) => {
    const s = el("section", { class: `card ${cls || ""}` }, el("h2", {}, title));
    grid.append(s);
    return s;
  };
  cleanups.push(renderTerminal(section("Terminal", "wide"), api, id, running));
  cleanups.push(renderFiles(section("Files"), api, id, () => sandbox));
  cleanups.push(renderCommands(section("Commands"), api, id));
  cleanups.push(renderMetrics(section("Usage"), api, id, running));
  cleanups.push(renderPorts(section("Ports"), api, id));
  cleanups.push(renderHistory(section("Operations and events", "wide"), api, live, id));

  cleanups.push(live.subscribe((kind, changed) => {
    if (kind !== "sandbox") return;
    if (changed === null || changed.id === id) {
      if (changed && changed.state === "deleted") sandbox = sandbox && { ...sandbox, state: "deleted" };
      else sandbox = live.sandboxes.get(id) || sandbox;
      draw();
    }
  }));
  api.get(path).then((s) => {
    sandbox = s;
    draw();
  }, showError);
  return () => cleanups.forEach((c) => c && c());
}
