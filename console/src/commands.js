// The sandbox's commands, running and ended (`GET .../commands`), one's output
// (`GET .../commands/{cid}/output`), and a form to run a new one.

import { el, showError, time } from "./dom.js";
import { textOfBase64 } from "./api.js";

const REFRESH_MS = 3000;

export function renderCommands(root, api, id) {
  const base = `/v1/sandboxes/${encodeURIComponent(id)}/commands`;
  const line = el("input", { id: "command-line", placeholder: "a shell command, e.g. uname -a" });
  const list = el("tbody", {});
  const output = el("pre", { id: "command-output", class: "output" });
  let shown = null;
  root.append(
    el("form", { class: "row", onsubmit: run }, line, el("button", { type: "submit" }, "Run")),
    el("table", { id: "commands" },
      el("thead", {}, el("tr", {}, ["id", "command", "state", "started", ""].map((h) => el("th", {}, h)))),
      list),
    output);

  async function run(e) {
    e.preventDefault();
    if (!line.value.trim()) return;
    try {
      const created = await api.post(base, { shell: line.value });
      line.value = "";
      await refresh();
      show(created.command.id, true);
    } catch (err) {
      showError(err);
    }
  }

  async function show(cid, wait) {
    shown = cid;
    try {
      const out = await api.get(`${base}/${cid}/output`, { wait: wait ? "30s" : "0s", max_bytes: 65536 });
      if (shown !== cid) return;
      const c = out.command;
      const end = c.state === "running" ? "running" : `exit ${c.exit_code ?? c.signal}${c.timed_out ? " (timed out)" : ""}`;
      const note = out.omitted ? `\n[${out.omitted.len} bytes left out]` : "";
      output.textContent = `$ ${c.argv.join(" ")}\n${textOfBase64(out.stdout)}${textOfBase64(out.stderr)}${note}\n[${end}]`;
      refresh();
    } catch (err) {
      showError(err);
    }
  }

  async function refresh() {
    try {
      const { commands } = await api.get(base);
      list.replaceChildren(...commands.slice().reverse().map((c) => el("tr", { dataset: { id: c.id } },
        el("td", {}, el("a", { href: "#", onclick: (e) => { e.preventDefault(); show(c.id, false); } }, c.id)),
        el("td", { class: "mono" }, c.argv.join(" ").slice(0, 80)),
        el("td", {}, c.state === "running" ? "running" : `exit ${c.exit_code ?? c.signal}`),
        el("td", { class: "muted" }, time(c.started_at)),
        el("td", {}, c.state === "running" && el("button", { onclick: () => kill(c.id) }, "kill")))));
    } catch (err) {
      if (err.code !== "sandbox_not_running") showError(err);
    }
  }

  async function kill(cid) {
    try {
      await api.post(`${base}/${cid}/kill`, {});
      refresh();
    } catch (err) {
      showError(err);
    }
  }

  refresh();
  const timer = setInterval(refresh, REFRESH_MS);
  return () => clearInterval(timer);
}
