#!/usr/bin/env python3
"""Cove's Code Interpreter server: the HTTP API E2B's Code Interpreter SDKs (PyPI
`e2b-code-interpreter`, npm `@e2b/code-interpreter`) call on port 49999 of a sandbox, written
for Cove from the protocol's facts (standard library only; it runs inside the sandbox).

- `GET /health`: 200 `OK`.
- `POST /execute` `{code, context_id?, language?, env_vars?}`: runs the code in a context (the
  given one, else the language's default context) and streams newline-delimited JSON:
  `{"type":"stdout"|"stderr","text","timestamp"}`, `{"type":"result", text?, html?, png?, svg?,
  markdown?, latex?, json?, javascript?, jpeg?, pdf?, is_main_result}` (the value of the last
  expression, `display()` calls and every matplotlib figure as a PNG), `{"type":"error","name",
  "value","traceback"}`, and `{"type":"number_of_executions","execution_count"}`. When the
  client goes away (the SDK's `timeout`) the execution is interrupted (`KeyboardInterrupt`);
  a context that does not stop is restarted.
- `POST /contexts` `{language?, cwd?}` → `{id, language, cwd}`; `GET /contexts`; `DELETE
  /contexts/{id}`; `POST /contexts/{id}/restart`.

Each context is one worker process that keeps its globals between executions, as a Jupyter
kernel does: for `python` (the default) this file with `--worker`, for `javascript` (also
`js`) kernel.js under Node.js, speaking the same line protocol. Other languages answer 400.
"""

import ast
import base64
import importlib.abc
import importlib.util
import io
import json
import os
import queue
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORT = int(os.environ.get("COVE_CI_PORT", "49999"))
MAX_BODY = 16 * 1024 * 1024
MAX_LINE = 64 * 1024 * 1024
# Languages and the names the SDKs may send for them (E2B's server maps `js` to `javascript`).
LANGUAGES = {"python": "python", "javascript": "javascript", "js": "javascript"}
KERNEL_JS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "kernel.js")
DEFAULT_CWD = os.environ.get("COVE_CI_CWD", os.path.expanduser("~"))


# --------------------------------------------------------------------------------------------
# Worker: one per context.
# --------------------------------------------------------------------------------------------

def worker_main(chan_fd):
    # An interrupt is how an execution is stopped (a parent may have left SIGINT ignored).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    chan = socket.socket(fileno=chan_fd)
    rfile = chan.makefile("rb")
    lock = threading.Lock()

    def send(msg):
        data = (json.dumps(msg) + "\n").encode()
        with lock:
            chan.sendall(data)

    class Stream(io.TextIOBase):
        """A line-buffered text stream whose lines become output messages."""

        def __init__(self, kind):
            self.kind = kind
            self.buf = ""

        def writable(self):
            return True

        def write(self, s):
            self.buf += s
            if "\n" in self.buf or len(self.buf) > 8192:
                cut = self.buf.rfind("\n") + 1 or len(self.buf)
                self._send(self.buf[:cut])
                self.buf = self.buf[cut:]
            return len(s)

        def flush(self):
            if self.buf:
                self._send(self.buf)
                self.buf = ""

        def _send(self, text):
            send({"type": self.kind, "text": text, "timestamp": time.time_ns() // 1000})

    def formats(value):
        out = {"text": repr(value)}
        reprs = {
            "html": "_repr_html_", "markdown": "_repr_markdown_", "svg": "_repr_svg_",
            "png": "_repr_png_", "jpeg": "_repr_jpeg_", "pdf": "_repr_pdf_",
            "latex": "_repr_latex_", "json": "_repr_json_", "javascript": "_repr_javascript_",
        }
        for key, name in reprs.items():
            fn = getattr(value, name, None)
            if not callable(fn):
                continue
            try:
                got = fn()
            except Exception:
                continue
            if isinstance(got, tuple):
                got = got[0]
            if got is None:
                continue
            if isinstance(got, bytes):
                got = base64.b64encode(got).decode()
            out[key] = got
        return out

    def emit_result(value, main):
        msg = {"type": "result", "is_main_result": main}
        msg.update(formats(value))
        send(msg)

    def flush_figures():
        plt = sys.modules.get("matplotlib.pyplot")
        if plt is None:
            return
        for num in plt.get_fignums():
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png", bbox_inches="tight")
            send({
                "type": "result",
                "is_main_result": False,
                "text": repr(fig),
                "png": base64.b64encode(buf.getvalue()).decode(),
            })
        plt.close("all")

    # A matplotlib backend whose show() displays the figures (Agg renders them), made when
    # matplotlib asks for it (so a cell that never plots never imports matplotlib).
    class InlineBackend(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path=None, target=None):
            if name == "cove_inline":
                return importlib.util.spec_from_loader(name, self)
            return None

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            from matplotlib.backend_bases import FigureManagerBase
            from matplotlib.backends.backend_agg import FigureCanvasAgg

            module.FigureCanvas = FigureCanvasAgg
            module.FigureManager = FigureManagerBase
            module.show = lambda *a, **k: flush_figures()

    sys.meta_path.insert(0, InlineBackend())
    os.environ["MPLBACKEND"] = "module://cove_inline"

    def display(*objs, **_):
        for o in objs:
            emit_result(o, False)

    namespace = {"__name__": "__main__", "display": display, "__cove_magic__": run_magic}
    sys.stdout = Stream("stdout")
    sys.stderr = Stream("stderr")
    sys.stdin = open(os.devnull)

    while True:
        line = rfile.readline(MAX_LINE)
        if not line:
            return
        req = json.loads(line)
        saved = {}
        for k, v in (req.get("env_vars") or {}).items():
            saved[k] = os.environ.get(k)
            os.environ[k] = str(v)
        try:
            run_cell(req["code"], namespace, emit_result, send)
            flush_figures()
        except KeyboardInterrupt:
            send({"type": "error", "name": "KeyboardInterrupt", "value": "interrupted",
                  "traceback": "KeyboardInterrupt: the execution was interrupted"})
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:
                    pass
            send({"type": "end_of_execution"})


# IPython's line syntax, for cells that are not Python as written (a cell that parses is run
# as it is, so `%` and `!` inside strings or expressions keep their Python meaning): a line
# `!cmd` runs `cmd` in bash, `%pip …` runs pip, `%cd DIR`, `%env [NAME[=VALUE]]`, `%matplotlib`
# (a no-op: figures always come back as PNGs); a first line `%%bash` (or `%%sh`) runs the cell
# in bash. Other magics are a UsageError.
MAGIC_LINE = re.compile(r"^([ \t]*)(!|%)(.*)$")


def transform_magics(code):
    lines = code.split("\n")
    first = lines[0].strip()
    if first in ("%%bash", "%%sh"):
        return "__cove_magic__('!', " + repr("\n".join(lines[1:])) + ")"
    changed = False
    for i, line in enumerate(lines):
        m = MAGIC_LINE.match(line)
        if m and not m.group(3).startswith("%"):
            indent, kind, rest = m.groups()
            lines[i] = f"{indent}__cove_magic__({kind!r}, {rest.strip()!r})"
            changed = True
    return "\n".join(lines) if changed else None


class UsageError(Exception):
    pass


def shell(command):
    """Runs `command` in bash, its output streamed as the cell's; interrupted with the cell."""
    proc = subprocess.Popen(["bash", "-c", command], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)

    def pump(pipe, stream):
        for chunk in iter(lambda: os.read(pipe.fileno(), 65536), b""):
            stream.write(chunk.decode(errors="replace"))
        stream.flush()

    pumps = [threading.Thread(target=pump, args=(proc.stdout, sys.stdout)),
             threading.Thread(target=pump, args=(proc.stderr, sys.stderr))]
    for t in pumps:
        t.start()
    try:
        proc.wait()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    finally:
        for t in pumps:
            t.join()
        proc.stdout.close()
        proc.stderr.close()


def run_magic(kind, line):
    if kind == "!":
        return shell(line)
    name, _, arg = line.partition(" ")
    arg = arg.strip()
    if name in ("pip", "pip3"):
        return shell(f"{sys.executable} -m pip {arg}")
    if name == "cd":
        os.chdir(os.path.expanduser(arg or "~"))
        print(os.getcwd())
        return None
    if name == "env":
        if not arg:
            for k, v in sorted(os.environ.items()):
                print(f"{k}={v}")
        elif "=" in arg or " " in arg:
            k, v = re.split(r"[= ]", arg, maxsplit=1)
            os.environ[k.strip()] = v.strip()
            print(f"env: {k.strip()}={v.strip()}")
        else:
            return os.environ.get(arg)
        return None
    if name == "matplotlib":
        return None
    raise UsageError(f"Line magic function `%{name}` is not supported by this template")


def run_cell(code, namespace, emit_result, send):
    try:
        try:
            tree = ast.parse(code, "<cell>", "exec")
        except SyntaxError:
            magics = transform_magics(code)
            if magics is None:
                raise
            try:
                tree = ast.parse(magics, "<cell>", "exec")
            except SyntaxError:
                tree = ast.parse(code, "<cell>", "exec")  # the error of the cell as written
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, "<cell>", "exec")
        tail = compile(last, "<cell>", "eval") if last is not None else None
        exec(body, namespace)
        if tail is not None:
            value = eval(tail, namespace)
            if value is not None:
                namespace["_"] = value
                emit_result(value, True)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit too: the context keeps running
        tb = e.__traceback__
        # Drop this module's own frames: the traceback starts at the cell.
        while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
            tb = tb.tb_next
        lines = traceback.format_exception(type(e), e, tb if tb is not None else e.__traceback__)
        send({"type": "error", "name": type(e).__name__, "value": str(e),
              "traceback": "".join(lines)})


# --------------------------------------------------------------------------------------------
# Server.
# --------------------------------------------------------------------------------------------

class Context:
    def __init__(self, language, cwd):
        self.id = str(uuid.uuid4())
        self.language = language
        self.cwd = cwd
        self.lock = threading.Lock()
        self.count = 0
        self.proc = None
        self.chan = None
        self.start()

    def argv(self, fd):
        if self.language == "javascript":
            # The flag lets a cell's `import()` load modules (kernel.js, importModule).
            return [shutil.which("node") or "node", "--experimental-vm-modules", KERNEL_JS, str(fd)]
        return [sys.executable, "-u", os.path.abspath(__file__), "--worker", str(fd)]

    def start(self):
        ours, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            self.argv(theirs.fileno()),
            cwd=self.cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, pass_fds=(theirs.fileno(),),
        )
        theirs.close()
        self.chan = ours
        self.messages = queue.Queue(maxsize=1024)
        threading.Thread(target=self._read, args=(ours, self.messages), daemon=True).start()
        self.sink = None  # the running execution's output function
        for pipe, kind in ((self.proc.stdout, "stdout"), (self.proc.stderr, "stderr")):
            threading.Thread(target=self._pump, args=(pipe, kind), daemon=True).start()

    @staticmethod
    def _read(chan, messages):
        # The worker's messages, one JSON object a line; None at its end.
        rfile = chan.makefile("rb")
        try:
            while True:
                line = rfile.readline(MAX_LINE)
                if not line:
                    break
                messages.put(json.loads(line))
        except (OSError, ValueError):
            pass
        messages.put(None)

    def _pump(self, pipe, kind):
        # Output written straight to the file descriptors (subprocesses, C code).
        while True:
            data = os.read(pipe.fileno(), 65536)
            if not data:
                return
            sink = self.sink
            if sink is not None:
                sink({"type": kind, "text": data.decode(errors="replace"),
                      "timestamp": time.time_ns() // 1000})

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.chan:
            self.chan.close()

    def restart(self):
        self.stop()
        self.count = 0
        self.start()

    def json(self):
        return {"id": self.id, "language": self.language, "cwd": self.cwd}

    def execute(self, code, env_vars, out, client_gone):
        """Runs `code`, passing each message to `out`; interrupts it when `client_gone()`."""
        with self.lock:
            if self.proc.poll() is not None:
                self.restart()
            self.count += 1
            self.sink = out
            try:
                self.chan.sendall((json.dumps({"code": code, "env_vars": env_vars}) + "\n").encode())
                interrupted_at = None
                while True:
                    try:
                        msg = self.messages.get(timeout=0.2)
                    except queue.Empty:
                        msg = False
                    if msg is False or msg is None:
                        if interrupted_at is None and client_gone():
                            self.proc.send_signal(signal.SIGINT)
                            interrupted_at = time.monotonic()
                        elif interrupted_at is not None and time.monotonic() - interrupted_at > 5:
                            self.restart()
                            return
                        if self.proc.poll() is not None:
                            out({"type": "error", "name": "DeadKernelError",
                                 "value": "the context's process exited; it was restarted",
                                 "traceback": ""})
                            self.restart()
                            return
                        continue
                    if msg.get("type") == "end_of_execution":
                        break
                    out(msg)
                out({"type": "number_of_executions", "execution_count": self.count})
            finally:
                self.sink = None


class Contexts:
    def __init__(self):
        self.lock = threading.Lock()
        self.by_id = {}
        self.defaults = {}

    def create(self, language, cwd):
        ctx = Context(language, cwd)
        with self.lock:
            self.by_id[ctx.id] = ctx
        return ctx

    def default(self, language):
        with self.lock:
            ctx = self.defaults.get(language)
        if ctx is None:
            ctx = self.create(language, DEFAULT_CWD)
            with self.lock:
                self.defaults.setdefault(language, ctx)
                ctx = self.defaults[language]
        return ctx

    def get(self, cid):
        with self.lock:
            return self.by_id.get(cid)

    def remove(self, cid):
        with self.lock:
            ctx = self.by_id.pop(cid, None)
            for lang, d in list(self.defaults.items()):
                if d is ctx:
                    del self.defaults[lang]
        if ctx:
            ctx.stop()
        return ctx


CONTEXTS = Contexts()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def _json(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status, message):
        self._json(status, {"error": message})

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            raise ValueError("request body too large")
        raw = self.rfile.read(n) if n else b""
        return json.loads(raw) if raw.strip() else {}

    def _language(self, lang):
        name = (lang or "python").strip().lower()
        if name not in LANGUAGES:
            raise ValueError(f"language {lang!r} is not offered by this template "
                             "(python and javascript only)")
        name = LANGUAGES[name]
        if name == "javascript" and shutil.which("node") is None:
            raise ValueError("language 'javascript' needs node, which this sandbox lacks")
        return name

    def do_GET(self):
        if self.path == "/health":
            data = b"OK"
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        elif self.path == "/contexts":
            with CONTEXTS.lock:
                listed = [c.json() for c in CONTEXTS.by_id.values()]
            self._json(200, listed)
        else:
            self._error(404, "not found")

    def do_DELETE(self):
        parts = self.path.strip("/").split("/")
        if len(parts) == 2 and parts[0] == "contexts":
            if CONTEXTS.remove(parts[1]) is None:
                return self._error(404, f"context {parts[1]} not found")
            self.send_response(204)
            self.send_header("Content-Length", "0")
            self.end_headers()
        else:
            self._error(404, "not found")

    def do_POST(self):
        try:
            body = self._body()
        except ValueError as e:
            return self._error(400, str(e))
        parts = self.path.strip("/").split("/")
        try:
            if parts == ["execute"]:
                return self._execute(body)
            if parts == ["contexts"]:
                lang = self._language(body.get("language"))
                ctx = CONTEXTS.create(lang, body.get("cwd") or DEFAULT_CWD)
                return self._json(200, ctx.json())
            if len(parts) == 3 and parts[0] == "contexts" and parts[2] == "restart":
                ctx = CONTEXTS.get(parts[1])
                if ctx is None:
                    return self._error(404, f"context {parts[1]} not found")
                with ctx.lock:
                    ctx.restart()
                return self._json(200, ctx.json())
        except ValueError as e:
            return self._error(400, str(e))
        self._error(404, "not found")

    def _execute(self, body):
        code = body.get("code")
        if not isinstance(code, str):
            return self._error(400, "code must be a string")
        cid = body.get("context_id")
        if cid:
            ctx = CONTEXTS.get(cid)
            if ctx is None:
                return self._error(404, f"context {cid} not found")
        else:
            ctx = CONTEXTS.default(self._language(body.get("language")))
        env_vars = body.get("env_vars") or {}
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        gone = [False]
        sock = self.connection

        def out(msg):
            if gone[0]:
                return
            data = (json.dumps(msg) + "\n").encode()
            try:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            except OSError:
                gone[0] = True

        def client_gone():
            if gone[0]:
                return True
            try:
                r, _, _ = select.select([sock], [], [], 0)
                if r and not sock.recv(1, socket.MSG_PEEK):
                    gone[0] = True
            except OSError:
                gone[0] = True
            return gone[0]

        ctx.execute(code, env_vars, out, client_gone)
        if not gone[0]:
            try:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
            except OSError:
                pass


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        worker_main(int(sys.argv[2]))
        return
    # The default Python context is ready before the first request, as on E2B.
    CONTEXTS.default("python")
    server = ThreadingHTTPServer(("0.0.0.0", PORT), Handler)
    server.daemon_threads = True
    server.serve_forever()


if __name__ == "__main__":
    main()
