#!/usr/bin/env python3
"""Run one command in a fresh Cove sandbox with nothing but the Python standard library.

Usage: run_command.py [TEMPLATE]        (default template: base)

Environment:
  COVE_URL       server URL (default http://127.0.0.1:7700)
  COVE_TOKEN     management token (default: the contents of $COVE_DATA_DIR/admin.token)
  COVE_DATA_DIR  the server's data dir (default /var/lib/cove)

Exit code: the command's (124 when its timeout fired, 128+N when signal N ended it); 125 when
this script or the API failed, as the `cove` CLI does.

Steps: create a sandbox, wait for its create operation, start a command, read the command's
output from its attachment URL as server-sent events (each stdout/stderr event carries base64
bytes), print the exit code, delete the sandbox whatever happened, and exit with the command's
code. The SDK in python/ (`pip install ./python`) does all of this in a few lines.
"""

import base64
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

URL = os.environ.get("COVE_URL", "http://127.0.0.1:7700").rstrip("/")
DATA_DIR = os.environ.get("COVE_DATA_DIR") or "/var/lib/cove"
TOKEN_FILE = os.path.join(DATA_DIR, "admin.token")
# Exit code for failures of this script or the API, never the command's (as `cove` does).
EXIT_COVE_FAILED = 125

# A command that prints a few lines, with short sleeps, to both stdout and stderr, and exits 3
# (plain POSIX sh, so it runs on every template, `tiny` included).
SCRIPT = """
for i in 0 1 2; do echo "line $i on stdout"; sleep 0.3; done
echo "one line on stderr" >&2
exit 3
"""


class CoveError(Exception):
    """An error answer of the API: {"code", "message", "request_id"}."""

    def __init__(self, status, body):
        self.status = status
        self.code = body.get("code", "unknown")
        self.message = body.get("message", "")
        self.request_id = body.get("request_id", "?")
        super().__init__(f"{self.code}: {self.message} (request {self.request_id})")


def token():
    if os.environ.get("COVE_TOKEN"):
        return os.environ["COVE_TOKEN"].strip()
    with open(TOKEN_FILE, encoding="utf-8") as f:
        return f.read().strip()


def call(method, path, body=None, bearer=None, timeout=60):
    """Sends a JSON request to the management API and returns the decoded JSON answer."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(URL + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {bearer or token()}")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        raw = err.read()
        try:
            raise CoveError(err.code, json.loads(raw)) from None
        except ValueError:
            raise CoveError(err.code, {"message": raw.decode(errors="replace")}) from None


def wait_operation(op):
    """Long-polls an operation until it is final; raises if it did not succeed."""
    while op["state"] not in ("succeeded", "failed", "cancelled"):
        op = call("GET", f"/v1/operations/{op['id']}?wait=30s", timeout=90)
    if op["state"] != "succeeded":
        error = op.get("error") or {}
        raise RuntimeError(f"operation {op['id']} {op['state']}: "
                           f"{error.get('code')}: {error.get('message')}")
    return op


def sse_events(resp):
    """Yields (event, data) pairs of a text/event-stream response, one per blank-line block."""
    event, data = "message", []
    for raw in resp:
        line = raw.decode("utf-8").rstrip("\r\n")
        if not line:
            if data:
                yield event, "\n".join(data)
            event, data = "message", []
        elif line.startswith(":"):
            continue  # a comment (keep-alive)
        else:
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)


def stream_output(attachment):
    """Prints the command's output as it arrives; returns the final command (the exit event).

    If the connection drops, it reconnects with ?offset= set to the byte after the last one
    printed, so nothing is lost or printed twice.
    """
    offset, attempts = 0, 0
    while True:
        query = urllib.parse.urlencode({"offset": offset})
        req = urllib.request.Request(f"{attachment['url']}?{query}")
        req.add_header("Authorization", f"Bearer {attachment['token']}")
        req.add_header("Accept", "text/event-stream")
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                for event, data in sse_events(resp):
                    if event in ("stdout", "stderr"):
                        out = json.loads(data)
                        chunk = base64.b64decode(out["data"])
                        skip = max(0, offset - out["offset"])  # bytes already printed
                        target = sys.stdout if event == "stdout" else sys.stderr
                        target.buffer.write(chunk[skip:])
                        target.flush()
                        offset = max(offset, out["offset"] + out["len"])
                        attempts = 0
                    elif event == "exit":
                        return json.loads(data)
        except urllib.error.HTTPError:
            raise  # the token was refused or the command is gone: retrying will not help
        except OSError as err:
            print(f"[connection lost: {err}; resuming at offset {offset}]", file=sys.stderr)
        attempts += 1
        if attempts > 5:
            raise RuntimeError("the output stream keeps failing")


SIGNALS = {"SIGHUP": 1, "SIGINT": 2, "SIGQUIT": 3, "SIGABRT": 6, "SIGKILL": 9, "SIGSEGV": 11,
           "SIGPIPE": 13, "SIGALRM": 14, "SIGTERM": 15}


def exit_code(command):
    """The shell's convention: the exit code; 124 after a timeout; 128+N for signal N."""
    if command.get("timed_out"):
        return 124
    if command.get("exit_code") is not None:
        return command["exit_code"]
    return 128 + SIGNALS.get(command.get("signal"), 0)


def main():
    template = sys.argv[1] if len(sys.argv) > 1 else "base"
    created = call("POST", "/v1/sandboxes", {"template": template})
    sandbox_id = created["sandbox"]["id"]
    print(f"[sandbox {sandbox_id} creating from template {template}]", file=sys.stderr)
    try:
        wait_operation(created["operation"])
        started = call("POST", f"/v1/sandboxes/{sandbox_id}/commands",
                       {"argv": ["sh", "-c", SCRIPT]})
        command = stream_output(started["attachment"])
        code = exit_code(command)
        how = f"signal {command['signal']}" if command.get("signal") else f"exit code {code}"
        print(f"{how}{' (timed out)' if command.get('timed_out') else ''}")
        return code
    finally:
        op = call("DELETE", f"/v1/sandboxes/{sandbox_id}")
        wait_operation(op)
        print(f"[sandbox {sandbox_id} deleted]", file=sys.stderr)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (CoveError, RuntimeError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(EXIT_COVE_FAILED)
