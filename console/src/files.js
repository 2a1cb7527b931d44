// A file browser: list a directory (`files:list`), go into folders, upload (`PUT files`),
// download (`GET files`), delete (`DELETE files`).

import { el, bytes, showError, showNote, time } from "./dom.js";

export function renderFiles(root, api, id, sandbox) {
  const base = `/v1/sandboxes/${encodeURIComponent(id)}/files`;
  const pathInput = el("input", { id: "files-path", value: sandbox()?.cwd || "/home/user" });
  const list = el("tbody", {});
  const upload = el("input", { type: "file", id: "files-upload", multiple: true });
  root.append(
    el("form", { class: "row", onsubmit: (e) => { e.preventDefault(); load(); } },
      el("button", { type: "button", onclick: up, title: "parent directory" }, "↑"), pathInput,
      el("button", { type: "submit" }, "List"),
      el("label", { class: "button" }, "Upload", upload)),
    el("table", { id: "files" },
      el("thead", {}, el("tr", {}, ["name", "size", "modified", ""].map((h) => el("th", {}, h)))),
      list));

  const dir = () => pathInput.value.replace(/\/+$/, "") || "/";
  const join = (name) => (dir() === "/" ? `/${name}` : `${dir()}/${name}`);

  function up() {
    const d = dir();
    pathInput.value = d.slice(0, d.lastIndexOf("/")) || "/";
    load();
  }

  async function load() {
    try {
      const listing = await api.get(`${base}:list`, { path: dir(), depth: 1 });
      list.replaceChildren(...listing.entries.map((f) => el("tr", { dataset: { path: f.path } },
        el("td", {}, f.type === "dir"
          ? el("a", { href: "#", onclick: (e) => { e.preventDefault(); pathInput.value = f.path; load(); } }, `${f.name}/`)
          : f.name),
        el("td", {}, f.type === "dir" ? "" : bytes(f.size)),
        el("td", { class: "muted" }, time(f.mtime)),
        el("td", { class: "actions" },
          f.type === "file" && el("button", { onclick: () => download(f) }, "download"),
          el("button", { class: "danger", onclick: () => remove(f) }, "delete")))));
    } catch (err) {
      showError(err);
    }
  }

  async function download(f) {
    try {
      const response = await api.request("GET", base, { query: { path: f.path }, raw: true });
      const url = URL.createObjectURL(await response.blob());
      const a = el("a", { href: url, download: f.name });
      document.body.append(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (err) {
      showError(err);
    }
  }

  async function remove(f) {
    if (!confirm(`Delete ${f.path}?`)) return;
    try {
      await api.request("DELETE", base, { query: { path: f.path } });
      load();
    } catch (err) {
      showError(err);
    }
  }

  upload.addEventListener("change", async () => {
    try {
      for (const file of upload.files) {
        await api.request("PUT", base, { query: { path: join(file.name) }, body: file });
      }
      showNote(`uploaded ${upload.files.length} file(s) to ${dir()}`);
      upload.value = "";
      load();
    } catch (err) {
      showError(err);
    }
  });

  load();
  return null;
}
