// A terminal on the sandbox: a login shell started on a pseudo-terminal (`pty: true`), driven
// over the data plane's PTY WebSocket (`GET /v1/attach/{cid}/pty`; the attachment token rides in
// the `cove.bearer.<token>` subprotocol, as a browser cannot set headers there). Keys go out as
// binary frames, output comes back as binary frames, resizes as `{"resize":{cols,rows}}`.

import { Terminal } from "@xterm/xterm";
import { FitAddon } from "@xterm/addon-fit";
import { el, showError } from "./dom.js";

const LOGIN_SHELL = 'exec "${SHELL:-/bin/sh}" -l';

export function renderTerminal(root, api, id, running) {
  const screen = el("div", { id: "terminal" });
  const connect = el("button", { id: "terminal-connect" }, "Open a shell");
  const info = el("span", { class: "muted" });
  root.append(el("div", { class: "row" }, connect, info), screen);
  const term = new Terminal({ convertEol: false, cursorBlink: true, fontSize: 13, rows: 20 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(screen);
  fit.fit();
  let socket = null;
  let shell = null; // the shell command's id
  const encoder = new TextEncoder();

  term.onData((data) => socket?.readyState === WebSocket.OPEN && socket.send(encoder.encode(data)));
  term.onResize(({ cols, rows }) => {
    if (socket?.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ resize: { cols, rows } }));
  });
  const onWindowResize = () => fit.fit();
  window.addEventListener("resize", onWindowResize);

  async function open() {
    if (!running()) {
      showError(new Error("the sandbox is not running: wake or resume it first"));
      return;
    }
    socket?.close();
    connect.disabled = true;
    try {
      const created = await api.post(`/v1/sandboxes/${encodeURIComponent(id)}/commands`, {
        shell: LOGIN_SHELL, pty: true, cols: term.cols, rows: term.rows,
      });
      const { command, attachment } = created;
      stopShell();
      shell = command.id;
      info.textContent = `command ${command.id}`;
      const url = attachment.url.replace(/^http/, "ws") + "/pty";
      socket = new WebSocket(url, ["cove.pty", `cove.bearer.${attachment.token}`]);
      socket.binaryType = "arraybuffer";
      socket.onopen = () => {
        screen.dataset.connected = "true";
        term.focus();
      };
      socket.onmessage = (message) => {
        if (message.data instanceof ArrayBuffer) {
          term.write(new Uint8Array(message.data));
          return;
        }
        const frame = JSON.parse(message.data);
        if (frame.exit) {
          const c = frame.exit;
          term.write(`\r\n[exited: ${c.exit_code ?? c.signal ?? "?"}]\r\n`);
        }
      };
      socket.onclose = () => {
        screen.dataset.connected = "false";
        connect.disabled = false;
      };
    } catch (err) {
      showError(err);
      connect.disabled = false;
    }
  }
  connect.addEventListener("click", open);

  // A shell outlives its socket: end the previous one when a new one opens or the page goes.
  function stopShell() {
    if (!shell) return;
    const url = `/v1/sandboxes/${encodeURIComponent(id)}/commands/${shell}/kill`;
    api.post(url, { grace_ms: 500 }).catch(() => {});
    shell = null;
  }

  return () => {
    window.removeEventListener("resize", onWindowResize);
    socket?.close();
    stopShell();
    term.dispose();
  };
}
