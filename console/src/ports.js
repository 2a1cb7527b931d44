// Port previews: a link to a port of the sandbox through the server's port proxy
// (`GET /v1/sandboxes/{id}/ports` gives the path and the sandbox's port token).

import { el, showError } from "./dom.js";

export function renderPorts(root, api, id) {
  const port = el("input", { type: "number", min: 1, max: 65535, id: "port", placeholder: "port, e.g. 8000" });
  const link = el("a", { target: "_blank", rel: "noopener", id: "port-link" });
  root.append(
    el("p", { class: "muted" }, "Open an HTTP port of the sandbox (something must listen on it)."),
    el("div", { class: "row" }, port, link));
  let access = null;
  api.get(`/v1/sandboxes/${encodeURIComponent(id)}/ports`).then((a) => {
    access = a;
  }, (err) => {
    if (err.status !== 404) showError(err);
  });
  port.addEventListener("input", () => {
    if (!access || !port.value) {
      link.textContent = "";
      return;
    }
    const url = `${access.path}${Number(port.value)}/?cove_port_token=${encodeURIComponent(access.token)}`;
    link.href = url;
    link.textContent = `open port ${Number(port.value)}`;
  });
  return null;
}
