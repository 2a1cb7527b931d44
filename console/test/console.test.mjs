// The console end to end in headless Chromium (Debian's `chromium`, driven by playwright-core)
// against a real `cove server` on loopback (started by scripts/test-console.sh): sign in,
// create a sandbox, `echo hi` in the terminal, upload a file and see it listed, run a command,
// suspend and wake from the buttons, delete. Screenshots go to $COVE_CONSOLE_ARTIFACTS; with
// $COVE_CONSOLE_README_SHOT set, the sandbox page is also saved there (docs/console.png).
//
// The browser reaches nothing but the loopback server: every request to another origin is
// aborted, host names other than 127.0.0.1 do not resolve, background networking is off.

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdirSync } from "node:fs";
import { chromium } from "playwright-core";

const API = process.env.COVE_URL;
const DATA_PLANE = process.env.COVE_DATA_PLANE_URL;
const TOKEN = process.env.COVE_TOKEN;
const ARTIFACTS = process.env.COVE_CONSOLE_ARTIFACTS || "/tmp/cove-console-artifacts";
const README_SHOT = process.env.COVE_CONSOLE_README_SHOT;
const TEMPLATE = process.env.COVE_CONSOLE_TEMPLATE || "base";

const allowed = new Set([new URL(API).origin, new URL(DATA_PLANE).origin]);

test("an operator drives a sandbox from the console", { timeout: 240_000 }, async () => {
  mkdirSync(ARTIFACTS, { recursive: true });
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
  const context = await browser.newContext({ viewport: { width: 1360, height: 1100 } });
  const blocked = [];
  await context.route("**/*", (route) => {
    const origin = new URL(route.request().url()).origin;
    if (allowed.has(origin)) return route.continue();
    blocked.push(route.request().url());
    return route.abort();
  });
  const page = await context.newPage();
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("dialog", (d) => d.accept());
  const shot = (name) => page.screenshot({ path: `${ARTIFACTS}/${name}.png`, fullPage: true });
  const state = () => page.locator("#state").textContent();
  const waitState = async (want, timeout = 120_000) => {
    await page.waitForFunction((w) => document.querySelector("#state")?.textContent === w, want, { timeout });
  };

  try {
    // Sign in: a wrong token is refused, the real one opens the list.
    await page.goto(`${API}/console/`);
    await page.fill("#token", "cove_wrong");
    await page.click("#sign-in button[type=submit]");
    await page.waitForSelector("#status.error");
    assert.match(await page.textContent("#status"), /unauthorized/);
    await page.fill("#token", TOKEN);
    await page.click("#sign-in button[type=submit]");
    await page.waitForSelector("#sandboxes");
    await shot("1-list");

    // Create with a template and resources; the page follows it to `running`.
    await page.waitForSelector(`#create-template option[value="${TEMPLATE}"]`, { state: "attached" });
    await page.selectOption("#create-template", TEMPLATE);
    await page.fill("#create-memory_mib", "512");
    await page.click("#create");
    await page.waitForURL(/#\/sandboxes\/sb-/);
    const id = decodeURIComponent(page.url().split("/").pop());
    await waitState("running");

    // The terminal: a login shell on the PTY WebSocket.
    await page.click("#terminal-connect");
    await page.waitForSelector('#terminal[data-connected="true"]');
    await page.click("#terminal");
    await page.keyboard.type("echo hi\n");
    await page.waitForFunction(() => {
      const rows = document.querySelectorAll("#terminal .xterm-rows > div");
      return [...rows].some((r) => r.textContent.trim() === "hi");
    }, null, { timeout: 30_000 });
    // Resize reaches the terminal: the shell sees the new size.
    await page.setViewportSize({ width: 1200, height: 1100 });
    await page.keyboard.type("stty size\n");
    await page.waitForFunction(() => {
      const rows = document.querySelectorAll("#terminal .xterm-rows > div");
      return [...rows].some((r) => /^\d+ \d+$/.test(r.textContent.trim()));
    }, null, { timeout: 30_000 });

    // Files: upload one into the home directory and see it listed.
    await page.click("form:has(#files-path) button[type=submit]");
    await page.setInputFiles("#files-upload", {
      name: "hello.txt", mimeType: "text/plain", buffer: Buffer.from("hello from the console\n"),
    });
    await page.waitForSelector('#files tr[data-path$="/hello.txt"]', { timeout: 30_000 });

    // Commands: run one and see its output.
    await page.fill("#command-line", "cat hello.txt; uname -s");
    await page.press("#command-line", "Enter");
    await page.waitForFunction(() => /hello from the console\nLinux/.test(document.querySelector("#command-output")?.textContent || ""), null, { timeout: 30_000 });
    // Charts have a sample or two by now.
    await page.waitForSelector("#metric-memory svg.chart", { timeout: 30_000 });
    // A second sample (the node samples every 5 s) makes the README's picture a chart.
    await page.waitForFunction(() => {
      const points = document.querySelector("#metric-memory polyline")?.getAttribute("points") || "";
      return new Set(points.split(" ")).size > 2;
    }, null, { timeout: 20_000 }).catch(() => {});
    await shot("2-sandbox");
    if (README_SHOT) await page.screenshot({ path: README_SHOT });

    // Suspend and wake from the buttons; the state follows the event stream.
    await page.click("#do-suspend");
    await waitState("suspended");
    await shot("3-suspended");
    await page.click("#do-wake");
    await waitState("running");
    await page.waitForSelector("#events li", { timeout: 30_000 });
    assert.match(await page.textContent("#events"), /sandbox\.suspended/);

    // Delete; the list no longer shows it.
    await page.click("#do-delete");
    await waitState("deleted", 60_000).catch(async () => assert.equal(await state(), "deleted"));
    await page.goto(`${API}/console/#/`);
    await page.waitForSelector("#sandboxes");
    assert.equal(await page.locator(`#sandboxes tr[data-id="${id}"]`).count(), 0);
    await shot("4-deleted");

    assert.deepEqual(errors, [], "no script errors on the page");
    assert.deepEqual(blocked, [], "the page asked for nothing off the loopback server");
  } catch (err) {
    await shot("failure").catch(() => {});
    throw err;
  } finally {
    await browser.close();
  }
});
