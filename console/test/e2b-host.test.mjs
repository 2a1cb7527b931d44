// Issue 31 item 1 in headless Chromium: the URL E2B's `sandbox.get_host(port)` builds,
// `{port}-{id}.{domain}` with the domain the create answered (`localhost:PORT` of the E2B
// listener by default), opens in a browser as it is. Chromium resolves `*.localhost` to
// loopback itself; every other name fails to resolve, so the browser reaches nothing but the
// test's server.
//
// Against a real `cove server` on loopback with `--e2b-listen` (scripts/test-console.sh).

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const API = process.env.COVE_URL;
const E2B = process.env.COVE_E2B_URL;
const TOKEN = process.env.COVE_TOKEN;
const ARTIFACTS = process.env.COVE_CONSOLE_ARTIFACTS || "/tmp/cove-console-artifacts";
const TEMPLATE = process.env.COVE_CONSOLE_TEMPLATE || "base";
const PORT = 8000;

async function call(url, init) {
  const resp = await fetch(url, init);
  const text = await resp.text();
  if (!resp.ok) throw new Error(`${init.method} ${url}: ${resp.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

test("get_host(port) of an E2B sandbox opens in Chromium unchanged", { timeout: 240_000 }, async () => {
  assert.ok(E2B, "COVE_E2B_URL names the server's E2B listener");
  mkdirSync(ARTIFACTS, { recursive: true });
  const created = await call(`${E2B}/sandboxes`, {
    method: "POST",
    headers: { "X-API-Key": TOKEN, "content-type": "application/json" },
    body: JSON.stringify({ templateID: TEMPLATE, timeout: 300 }),
  });
  const id = created.sandboxID;
  const host = `${PORT}-${id}.${created.domain}`;
  assert.match(host, /^8000-[a-z0-9]+\.localhost:\d+$/, `get_host's name: ${host}`);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
    args: [
      "--no-sandbox", "--no-first-run", "--no-default-browser-check",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
      "--disable-default-apps", "--disable-extensions", "--disable-domain-reliability",
      "--disable-client-side-phishing-detection", "--disable-features=Translate,OptimizationHints,MediaRouter",
      "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1 , EXCLUDE localhost , EXCLUDE *.localhost",
    ],
  });
  const page = await (await browser.newContext()).newPage();
  try {
    await call(`${API}/v1/sandboxes/sb-${id}/commands`, {
      method: "POST",
      headers: { Authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({
        shell: `mkdir -p /tmp/www && echo '<title>cove</title><p id=m>hello from ${id}</p>' > /tmp/www/index.html && cd /tmp/www && exec python3 -m http.server ${PORT}`,
      }),
    });
    // Bounded wait for the server in the sandbox, through the browser itself.
    let text = null;
    for (let i = 0; i < 60 && text === null; i++) {
      const resp = await page.goto(`http://${host}/`).catch(() => null);
      if (resp && resp.status() === 200) text = await page.textContent("#m");
      else await new Promise((ok) => setTimeout(ok, 250));
    }
    await page.screenshot({ path: `${ARTIFACTS}/e2b-get-host.png` });
    assert.equal(text, `hello from ${id}`);
  } catch (err) {
    await page.screenshot({ path: `${ARTIFACTS}/e2b-get-host-failure.png` }).catch(() => {});
    throw err;
  } finally {
    await browser.close();
    await call(`${E2B}/sandboxes/${id}`, { method: "DELETE", headers: { "X-API-Key": TOKEN } }).catch(() => {});
  }
});
