// Issue 27 finding 1 in headless Chromium: a sandbox's page opened through the path proxy
// (`/v1/sandboxes/{id}/ports/{port}/`, on the console's own origin) must not reach the
// console. The page is hostile: it registers a service worker at scope `/` (its script sent
// with `Service-Worker-Allowed: /`) and reads the console's storage, where the signed-in token
// lives. Both must fail, and the console's origin must hold no service worker afterwards.
//
// Against a real `cove server` on loopback (scripts/test-console.sh); the browser reaches
// nothing but that server (every other origin is aborted, other host names do not resolve).

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const API = process.env.COVE_URL;
const TOKEN = process.env.COVE_TOKEN;
const ARTIFACTS = process.env.COVE_CONSOLE_ARTIFACTS || "/tmp/cove-console-artifacts";
const TEMPLATE = process.env.COVE_CONSOLE_TEMPLATE || "base";
const PORT = 8000;

// The sandbox's web server: `/` is the hostile page, `/sw.js` a worker script that asks for
// the whole origin as its scope.
const SERVER = String.raw`
import http.server
PAGE = b"""<!doctype html><title>evil</title><body>working</body><script>
const out = {};
const token = new URLSearchParams(location.search).get("cove_port_token") || "";
try { out.session = sessionStorage.getItem("cove.token"); } catch (e) { out.session = "denied:" + e.name; }
try { out.local = localStorage.length; } catch (e) { out.local = "denied:" + e.name; }
try { out.cookie = document.cookie; } catch (e) { out.cookie = "denied:" + e.name; }
async function worker() {
  try {
    const r = await navigator.serviceWorker.register("sw.js?cove_port_token=" + token, { scope: "/" });
    return "registered:" + r.scope;
  } catch (e) {
    return "denied:" + e.name;
  }
}
worker().then((sw) => {
  out.sw = sw;
  document.body.textContent = JSON.stringify(out);
  document.title = "done";
});
</script>"""
WORKER = b"self.addEventListener('fetch', (e) => {});"
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body, kind = (WORKER, "text/javascript") if self.path.startswith("/sw.js") else (PAGE, "text/html")
        self.send_response(200)
        self.send_header("content-type", kind)
        self.send_header("service-worker-allowed", "/")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.ThreadingHTTPServer(("0.0.0.0", ${PORT}), H).serve_forever()
`;

async function api(method, path, body) {
  const resp = await fetch(`${API}${path}`, {
    method,
    headers: { Authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await resp.text();
  if (!resp.ok) throw new Error(`${method} ${path}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

async function waitOperation(op) {
  for (let i = 0; i < 120; i++) {
    const o = await api("GET", `/v1/operations/${op.id}?wait=5s`);
    if (["succeeded", "failed", "cancelled"].includes(o.state)) return o;
  }
  throw new Error(`operation ${op.id} did not end`);
}

test("a sandbox page on the path proxy cannot install a worker or read the console", { timeout: 240_000 }, async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
  // No internet: the sandbox only serves its port (the path proxy reaches it through its
  // network namespace).
  const created = await api("POST", "/v1/sandboxes", {
    template: TEMPLATE,
    network: { internet: false },
  });
  const id = created.sandbox.id;
  assert.equal((await waitOperation(created.operation)).state, "succeeded");
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox", "--no-first-run", "--no-default-browser-check",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-default-apps", "--disable-extensions", "--disable-domain-reliability",
      "--disable-client-side-phishing-detection", "--disable-features=Translate,OptimizationHints,MediaRouter",
      "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ],
  });
  const page = await (await browser.newContext()).newPage();
  try {
    await api("POST", `/v1/sandboxes/${id}/commands`, {
      argv: ["python3", "-c", SERVER],
    });
    const access = await api("GET", `/v1/sandboxes/${id}/ports`);
    const portUrl = `${API}${access.path}${PORT}/`;
    const query = `?cove_port_token=${encodeURIComponent(access.token)}`;
    // Bounded wait for the server in the sandbox to answer.
    let answered = null;
    for (let i = 0; i < 100 && !answered; i++) {
      const r = await fetch(portUrl + query).catch(() => null);
      if (r && r.status === 200) answered = r;
      else await new Promise((ok) => setTimeout(ok, 200));
    }
    assert.ok(answered, "the sandbox's server answers through the path proxy");
    assert.match(answered.headers.get("content-security-policy") || "", /(^|[ ,])sandbox( |$|,)/);
    assert.doesNotMatch(answered.headers.get("content-security-policy"), /allow-same-origin/);
    assert.equal(answered.headers.get("service-worker-allowed"), null);
    const script = await fetch(`${portUrl}sw.js${query}`, { headers: { "Service-Worker": "script" } });
    assert.equal(script.status, 403, "a service worker's script is not served on the API origin");

    // Signed in to the console (the token in its session storage), then the same tab opens
    // the sandbox's page through the path proxy, as the console's port link did.
    await page.goto(`${API}/console/`);
    await page.fill("#token", TOKEN);
    await page.click("#sign-in button[type=submit]");
    await page.waitForSelector("#sandboxes");
    await page.goto(portUrl + query);
    await page.waitForFunction(() => document.title === "done", null, { timeout: 30_000 });
    const out = JSON.parse(await page.textContent("body"));
    await page.screenshot({ path: `${ARTIFACTS}/port-isolation.png` });
    assert.match(String(out.session), /^denied:/, `the page read the console's session storage: ${JSON.stringify(out)}`);
    assert.match(String(out.local), /^denied:/, `the page reached the console's local storage: ${JSON.stringify(out)}`);
    assert.match(String(out.sw), /^denied:/, `the page registered a service worker: ${JSON.stringify(out)}`);

    // Back on the console's origin: no worker was installed over it.
    await page.goto(`${API}/console/`);
    const workers = await page.evaluate(async () => (await navigator.serviceWorker.getRegistrations()).map((r) => r.scope));
    assert.deepEqual(workers, [], "service workers on the console's origin");
  } catch (err) {
    await page.screenshot({ path: `${ARTIFACTS}/port-isolation-failure.png` }).catch(() => {});
    throw err;
  } finally {
    await browser.close();
    await api("DELETE", `/v1/sandboxes/${id}`).catch(() => {});
  }
});
