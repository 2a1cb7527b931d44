"""Test-only launchers: a real `cove server` with the E2B listener on free loopback ports,
and a fake internet (`cove-e2e-lab`) with a server whose sandboxes' gateway goes out to it.

Used by the E2B SDK tests (conftest.py, test_network.py) and the benchmark. Needs root, runc,
the guest agent and the `cove` binary (COVE_BIN, COVE_GUEST_AGENT; the template cache
COVE_TEST_CACHE_DIR); the network tests also `cove-e2e-lab` and `cove-e2e-server`
(COVE_E2E_LAB, COVE_E2E_SERVER; built by scripts/test-e2b.sh).
"""

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
import urllib.request


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def remove_namespaces(prefix):
    """Deletes the network namespaces named `{prefix}-*` (a server's gateway and sandboxes)."""
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    for line in listed.splitlines():
        name = line.split()[0] if line.split() else ""
        if name.startswith(prefix + "-"):
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


def _target():
    return os.environ.get("CARGO_TARGET_DIR", "/var/cache/cove-target")


class FakeInternet:
    """`cove-e2e-lab`: web servers and DNS inside namespaces this process creates (`web_a`
    serves `allowed.test` and `other.test`, `web_b` serves `b.test`, both in `inet`, a range the
    lab chose at run time that no host route uses; see crates/network/src/lab). Nothing leaves
    those namespaces. `stop()` removes them."""

    def __init__(self):
        self.bin = os.environ.get("COVE_E2E_LAB", f"{_target()}/debug/cove-e2e-lab")
        self.dir = tempfile.mkdtemp(prefix="cove-lab-")
        self.prefix = "lb" + os.urandom(2).hex()
        self.ca_file = os.path.join(self.dir, "ca.pem")
        self.log = open(os.path.join(self.dir, "lab.log"), "wb")
        self.proc = subprocess.Popen(
            [self.bin, self.prefix, self.ca_file],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        )
        line = self.proc.stdout.readline()
        if not line:
            self.stop()
            raise RuntimeError("the fake internet did not start; see its log")
        info = json.loads(line)
        self.upstream_ns, self.resolver, self.pool = (
            info["upstream_ns"], info["resolver"], info["pool"],
        )
        self.inet, self.web_a, self.web_b = info["inet"], info["web_a"], info["web_b"]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class CoveServer:
    """A running server; `stop()` (or the context manager) ends it and removes its data.

    `extra_args` go to `cove server` (e.g. `--disable-feature`). With `upstream` (a
    `FakeInternet`) the server is `cove-e2e-server` instead, its sandboxes' gateway going out
    to that fake internet only."""

    def __init__(self, extra_args=(), upstream=None):
        target = _target()
        self.bin = os.environ.get("COVE_BIN", f"{target}/debug/cove")
        self.agent = os.environ.get(
            "COVE_GUEST_AGENT", f"{target}/x86_64-unknown-linux-gnu/debug/cove-guest-agent"
        )
        self.cache = os.environ.get("COVE_TEST_CACHE_DIR", "/var/cache/cove/templates")
        self.data_dir = tempfile.mkdtemp(prefix="cove-e2b-")
        self.api_port, self.dp_port, self.e2b_port = _free_port(), _free_port(), _free_port()
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.e2b_url = f"http://127.0.0.1:{self.e2b_port}"
        self.log = open(os.path.join(self.data_dir, "server.log"), "wb")
        # A prefix of its own for the sandbox network's namespaces, removed at stop.
        self.net_prefix = "e2b" + os.urandom(2).hex()
        if upstream is None:
            argv = [
                self.bin, "server", "--data-dir", self.data_dir,
                "--network-prefix", self.net_prefix,
                "--listen", f"127.0.0.1:{self.api_port}",
                "--data-plane-listen", f"127.0.0.1:{self.dp_port}",
                "--e2b-listen", f"127.0.0.1:{self.e2b_port}",
                "--proxy-listen", "127.0.0.1:0",
                "--guest-agent", self.agent, "--cache-dir", self.cache,
                "--controller-interval-ms", "250", *extra_args,
            ]
            env = None
        else:
            server = os.environ.get("COVE_E2E_SERVER", f"{target}/debug/cove-e2e-server")
            argv = [
                server, self.data_dir, f"127.0.0.1:{self.api_port}",
                f"127.0.0.1:{self.dp_port}", self.agent, self.cache, "250", "1000",
            ]
            env = dict(
                os.environ,
                COVE_E2E_UPSTREAM_NS=upstream.upstream_ns,
                COVE_E2E_RESOLVER=upstream.resolver,
                COVE_E2E_TLS_ROOTS=upstream.ca_file,
                COVE_E2E_POOL=upstream.pool,
                COVE_E2E_NETWORK_PREFIX=self.net_prefix,
                COVE_E2E_E2B_LISTEN=f"127.0.0.1:{self.e2b_port}",
            )
        self.proc = subprocess.Popen(argv, stdout=self.log, stderr=self.log, env=env)
        deadline = time.time() + 60
        while True:
            try:
                urllib.request.urlopen(f"{self.api_url}/healthz", timeout=1).read()
                break
            except OSError:
                if self.proc.poll() is not None or time.time() > deadline:
                    raise RuntimeError("cove server did not start: " + self.read_log())
                time.sleep(0.1)
        with open(os.path.join(self.data_dir, "admin.token")) as f:
            self.token = f.read().strip()
        self._build("base")

    def read_log(self):
        with open(os.path.join(self.data_dir, "server.log"), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def _v1(self, method, path, body=None):
        req = urllib.request.Request(
            f"{self.api_url}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=60) as r:
            return json.loads(r.read() or b"null")

    def _build(self, template):
        """Makes sure `template` has a ready release (from the shared cache: seconds)."""
        op = self._v1("POST", f"/v1/templates/{template}/releases", {})["operation"]
        deadline = time.time() + 1800
        while op["state"] not in ("succeeded", "failed", "cancelled"):
            if time.time() > deadline:
                raise RuntimeError(f"build of {template} did not finish")
            op = self._v1("GET", f"/v1/operations/{op['id']}?wait=30s")
        if op["state"] != "succeeded":
            raise RuntimeError(f"build of {template} failed: {op.get('error')}")

    def build_from_dir(self, name, context_dir):
        """Builds template `name` from `context_dir` (its `Dockerfile` and files) and waits."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(context_dir, arcname=".")
        req = urllib.request.Request(
            f"{self.api_url}/v1/templates?name={name}&file=Dockerfile", method="POST",
            data=buf.getvalue(),
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/x-tar"},
        )
        with urllib.request.urlopen(req, timeout=120) as r:
            op = json.loads(r.read())["operation"]
        deadline = time.time() + 1800
        while op["state"] not in ("succeeded", "failed", "cancelled"):
            if time.time() > deadline:
                raise RuntimeError(f"build of {name} did not finish")
            op = self._v1("GET", f"/v1/operations/{op['id']}?wait=30s")
        if op["state"] != "succeeded":
            raise RuntimeError(f"build of {name} failed: {op.get('error')}")

    def build_code_interpreter(self, wheels, debs):
        """Builds `code-interpreter-v1` from templates/code-interpreter plus the wheels in
        `wheels` and the .debs in `debs` (downloaded on the host by scripts/test-e2b.sh; the
        build is offline)."""
        here = os.path.dirname(os.path.abspath(__file__))
        template_dir = os.path.join(here, "..", "..", "templates", "code-interpreter")
        ctx = tempfile.mkdtemp(prefix="cove-ci-ctx-")
        try:
            for f in ("Dockerfile", "requirements.txt", "server.py", "kernel.js"):
                shutil.copy(os.path.join(template_dir, f), ctx)
            shutil.copytree(wheels, os.path.join(ctx, "wheels"))
            os.mkdir(os.path.join(ctx, "debs"))
            for f in os.listdir(debs):
                if f.endswith(".deb"):
                    shutil.copy(os.path.join(debs, f), os.path.join(ctx, "debs"))
            self.build_from_dir("code-interpreter-v1", ctx)
        finally:
            shutil.rmtree(ctx, ignore_errors=True)

    def env(self):
        """The environment an unmodified E2B program needs to talk to this server."""
        return {
            "E2B_API_KEY": self.token,
            "E2B_API_URL": self.e2b_url,
            "E2B_SANDBOX_URL": self.e2b_url,
            # The volume content API is served by the same listener.
            "E2B_VOLUME_API_URL": self.e2b_url,
        }

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        # Sandboxes keep running after a server stop: remove their containers and mounts.
        runc_root = os.path.join(self.data_dir, "runc")
        ids = subprocess.run(["runc", "--root", runc_root, "list", "-q"],
                             capture_output=True, text=True).stdout.split()
        for cid in ids:
            subprocess.run(["runc", "--root", runc_root, "delete", "-f", cid], capture_output=True)
        # And those of a `--runtime gvisor` server.
        runsc_root = os.path.join(self.data_dir, "runsc")
        if os.path.isdir(runsc_root) and shutil.which("runsc"):
            ids = subprocess.run(["runsc", "--root", runsc_root, "list", "-q"],
                                 capture_output=True, text=True).stdout.split()
            for cid in ids:
                subprocess.run(["runsc", "--root", runsc_root, "delete", "-force", cid],
                               capture_output=True)
        sandboxes = os.path.join(self.data_dir, "sandboxes")
        if os.path.isdir(sandboxes):
            for d in os.listdir(sandboxes):
                for m in ("rootfs", "disk"):
                    subprocess.run(["umount", "-l", os.path.join(sandboxes, d, m)],
                                   capture_output=True)
        remove_namespaces(self.net_prefix)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
