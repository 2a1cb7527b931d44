// Port previews: a link to a port of the sandbox through the server's port proxy
// (`GET /v1/sandboxes/{id}/ports` gives the host, the path and the sandbox's port token).
// The link goes to the proxy listener's host name (`{port}-{id}.{domain}`), an origin of the
// sandbox's own, whenever the server has one: a sandbox's page is never opened on the
// console's origin, where it could reach the console's storage. Without a proxy listener the
// path proxy is the only way; it answers pages as sandboxed documents (an opaque origin).

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
    const n = Number(port.value);
    const query = `?cove_port_token=${encodeURIComponent(access.token)}`;
    const url = access.host
      ? `${location.protocol}//${access.host.replace("{port}", String(n))}/${query}`
      : `${access.path}${n}/${query}`;
    link.href = url;
    link.textContent = `open port ${n}`;
  });
  return null;
}
