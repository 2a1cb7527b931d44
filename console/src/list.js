// The sandbox list (live) and the create form.

import { el, showError, showNote, time } from "./dom.js";

/** Renders the list page into `root`; answers its cleanup. */
export function renderList(root, { api, live }) {
  const body = el("tbody", {});
  const table = el("table", { id: "sandboxes" },
    el("thead", {}, el("tr", {}, ["id", "state", "template", "resources", "created", "metadata"].map((h) => el("th", {}, h)))),
    body);
  const empty = el("p", { class: "muted" }, "No sandboxes yet.");

  function draw() {
    const rows = [...live.sandboxes.values()]
      .filter((s) => s.state !== "deleted")
      .sort((a, b) => b.created_at.localeCompare(a.created_at))
      .map((s) => el("tr", { dataset: { id: s.id } },
        el("td", {}, el("a", { href: `#/sandboxes/${s.id}` }, s.id)),
        el("td", {}, el("span", { class: `state ${s.state}` }, s.state)),
        el("td", {}, `${s.template} #${s.release}`),
        el("td", {}, `${s.resources.vcpus} vCPU · ${s.resources.memory_mib} MiB`),
        el("td", {}, time(s.created_at)),
        el("td", { class: "muted" }, Object.entries(s.metadata || {}).map(([k, v]) => `${k}=${v}`).join(" "))));
    body.replaceChildren(...rows);
    empty.hidden = rows.length > 0;
  }

  const form = createForm(api);
  root.append(
    el("section", { class: "card" }, el("h2", {}, "New sandbox"), form),
    el("section", { class: "card" }, el("h2", {}, "Sandboxes"), table, empty),
    el("p", { id: "status" }));
  draw();
  return live.subscribe((kind) => kind === "sandbox" && draw());
}

function createForm(api) {
  const template = el("select", { name: "template", id: "create-template" });
  const number = (name, placeholder) => el("input", { type: "number", min: 1, name, id: `create-${name}`, placeholder });
  const vcpus = number("vcpus", "vCPUs");
  const memory = number("memory_mib", "memory MiB");
  const disk = number("disk_mib", "disk MiB");
  const button = el("button", { type: "submit", id: "create" }, "Create");
  const form = el("form", { class: "row" },
    el("label", {}, "template ", template), vcpus, memory, disk, button);
  api.get("/v1/templates").then((list) => {
    const ready = list.templates.filter((t) => t.latest_release !== null && t.latest_release !== undefined);
    template.replaceChildren(...ready.map((t) => el("option", { value: t.name }, `${t.name} (#${t.latest_release})`)));
    if (!ready.length) template.append(el("option", { value: "" }, "no template is built"));
  }, showError);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const resources = {};
    for (const [input, key] of [[vcpus, "vcpus"], [memory, "memory_mib"], [disk, "disk_mib"]]) {
      if (input.value) resources[key] = Number(input.value);
    }
    const request = { template: template.value || undefined };
    if (Object.keys(resources).length) request.resources = resources;
    button.disabled = true;
    try {
      const created = await api.post("/v1/sandboxes", request);
      showNote(`creating ${created.sandbox.id}`);
      location.hash = `#/sandboxes/${created.sandbox.id}`;
    } catch (err) {
      showError(err);
    } finally {
      button.disabled = false;
    }
  });
  return form;
}
