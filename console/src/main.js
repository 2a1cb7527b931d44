// Cove's web console: sign in with a token, then the sandbox list (#/) or one sandbox
// (#/sandboxes/ID). Everything goes through the public API (api.js); sandbox states follow the
// lifecycle event stream (live.js).

import { Api } from "./api.js";
import { el, showError } from "./dom.js";
import { Live } from "./live.js";
import { renderList } from "./list.js";
import { renderSandbox } from "./sandbox.js";

const TOKEN_KEY = "cove.token";
const app = document.getElementById("app");
let session = null; // {api, live}
let leave = null; // cleanup of the page shown

function signIn() {
  const input = el("input", { type: "password", id: "token", placeholder: "cove_…", autocomplete: "off", required: true });
  const form = el("form", { id: "sign-in", class: "card narrow" },
    el("h1", {}, "Sign in"),
    el("p", {}, "A Cove token (the admin token is in ", el("code", {}, "<data-dir>/admin.token"), ")."),
    input,
    el("button", { type: "submit" }, "Sign in"),
    el("p", { id: "status" }));
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const api = new Api(input.value.trim());
    try {
      await api.get("/v1/capabilities");
      sessionStorage.setItem(TOKEN_KEY, api.token);
      start(api);
    } catch (err) {
      showError(err);
    }
  });
  app.replaceChildren(form);
  input.focus();
}

function start(api) {
  session = { api, live: new Live(api) };
  session.live.start().catch(showError);
  document.getElementById("sign-out").hidden = false;
  route();
}

function route() {
  if (!session) return signIn();
  if (leave) leave();
  leave = null;
  const match = location.hash.match(/^#\/sandboxes\/([^/]+)$/);
  const page = el("div", {});
  app.replaceChildren(page);
  leave = match ? renderSandbox(page, session, decodeURIComponent(match[1])) : renderList(page, session);
}

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  session?.live.stop();
  session = null;
  document.getElementById("sign-out").hidden = true;
  location.hash = "#/";
  signIn();
});
window.addEventListener("hashchange", route);

const saved = sessionStorage.getItem(TOKEN_KEY);
if (saved) start(new Api(saved));
else signIn();
