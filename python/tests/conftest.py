"""A real `cove server` for the SDK's tests: runc sandboxes, the real guest agent, SQLite in a
temporary data dir, the machine's shared template cache (so `tiny` builds from cache).

Environment:
- ``COVE_BIN``: the `cove` binary (default ``$CARGO_TARGET_DIR/debug/cove``).
- ``COVE_GUEST_AGENT``: the static guest agent (default: the debug build under the target dir).
- ``COVE_TEST_CACHE_DIR``: the template cache (default ``/var/cache/cove/templates``).

Needs root and runc, like the Rust end-to-end tests. The server listens on loopback only.
At the end every sandbox is deleted, the server stopped, and anything left of its containers
and mounts removed with the data dir.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass

import httpx
import pytest

import cove

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "target"))


@dataclass
class Server:
    """The running server: URLs, admin token, data dir."""

    url: str
    token: str
    data_dir: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _remove_namespaces(prefix: str) -> None:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix + "-"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _cleanup(data_dir: str, net_prefix: str) -> None:
    root = os.path.join(data_dir, "runc")
    listed = subprocess.run(["runc", "--root", root, "list", "-q"], capture_output=True, text=True)
    for cid in listed.stdout.split():
        subprocess.run(["runc", "--root", root, "delete", "-f", cid], capture_output=True)
    sandboxes = os.path.join(data_dir, "sandboxes")
    if os.path.isdir(sandboxes):
        for name in os.listdir(sandboxes):
            for mount in ("rootfs", "disk"):
                subprocess.run(["umount", "-l", os.path.join(sandboxes, name, mount)], capture_output=True)
            clones = os.path.join(sandboxes, name, "volumes")
            for n in os.listdir(clones) if os.path.isdir(clones) else []:
                subprocess.run(["umount", "-l", os.path.join(clones, n)], capture_output=True)
    volumes = os.path.join(data_dir, "volumes")
    for vid in os.listdir(volumes) if os.path.isdir(volumes) else []:
        subprocess.run(["umount", "-l", os.path.join(volumes, vid, "mnt")], capture_output=True)
    _remove_namespaces(net_prefix)
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def server():
    binary = os.environ.get("COVE_BIN", os.path.join(TARGET, "debug", "cove"))
    agent = os.environ.get(
        "COVE_GUEST_AGENT", os.path.join(TARGET, "x86_64-unknown-linux-gnu", "debug", "cove-guest-agent")
    )
    cache = os.environ.get("COVE_TEST_CACHE_DIR", "/var/cache/cove/templates")
    for path, what in ((binary, "COVE_BIN"), (agent, "COVE_GUEST_AGENT")):
        if not os.path.isfile(path):
            pytest.fail(f"{path} is missing: build it or set {what}")
    data_dir = tempfile.mkdtemp(prefix="cove-py-")
    api, dp = _free_port(), _free_port()
    log = open(os.path.join(data_dir, "server.log"), "wb")
    net_prefix = "py" + os.urandom(3).hex()
    proc = subprocess.Popen(
        [
            binary,
            "server",
            "--data-dir",
            data_dir,
            "--network-prefix",
            net_prefix,
            "--listen",
            f"127.0.0.1:{api}",
            "--data-plane-listen",
            f"127.0.0.1:{dp}",
            "--proxy-listen",
            "127.0.0.1:0",
            "--guest-agent",
            agent,
            "--cache-dir",
            cache,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{api}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            log.close()
            with open(os.path.join(data_dir, "server.log"), "rb") as f:
                text = f.read().decode(errors="replace")
            proc.kill()
            _cleanup(data_dir, net_prefix)
            pytest.fail(f"cove server did not start:\n{text[-4000:]}")
        time.sleep(0.1)
    with open(os.path.join(data_dir, "admin.token"), encoding="utf-8") as f:
        token = f.read().strip()
    yield Server(url=url, token=token, data_dir=data_dir)
    try:
        with cove.Client(url, token) as c:
            for sb in c.list_sandboxes():
                try:
                    c.delete_sandbox(sb, wait=True)
                except cove.CoveError:
                    pass
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        _cleanup(data_dir, net_prefix)


@pytest.fixture(scope="session")
def build_logs(server):
    """Builds the `tiny` template once (from the cache) and returns the build's log events."""
    logs = []
    with cove.Client(server.url, server.token) as c:
        op = c.build_release("tiny", on_log=logs.append)
    assert op.state == "succeeded", op
    return logs


@pytest.fixture
def client(server, build_logs):
    with cove.Client(server.url, server.token) as c:
        yield c


@pytest.fixture
def sandbox(client):
    """A running `tiny` sandbox, deleted afterwards."""
    sb = client.create_sandbox("tiny", metadata={"suite": "python"})
    yield sb
    try:
        client.delete_sandbox(sb)
    except cove.NotFound:
        pass


@pytest.fixture
def anyio_backend():
    return "asyncio"
