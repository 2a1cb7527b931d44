"""E2B pause on gVisor (issue 29): on a `--runtime gvisor` server without sandbox networks, an
E2B `beta_pause()` is a Cove suspend that checkpoints the whole sandbox with `runsc
checkpoint` (its resources released), and `connect()` restores it: a background process and a
loopback HTTP server started before the pause carry on with the same PIDs (docs/runtimes.md,
"Suspend with memory"). Needs `runsc` (scripts/install-deps.sh installs Debian's)."""

import os
import shutil
import time

import httpx
import pytest
from e2b import Sandbox, SandboxState

from cove_server import CoveServer


@pytest.fixture(scope="module")
def gvisor():
    """A second server: the gvisor runtime, no sandbox networks (where suspend keeps memory)."""
    if shutil.which("runsc") is None:
        if os.environ.get("CI"):
            pytest.fail("runsc is missing (scripts/install-deps.sh installs it)")
        pytest.skip("runsc is missing")
    srv = CoveServer(extra_args=["--runtime", "gvisor", "--network", "off"])
    try:
        yield srv
    finally:
        srv.stop()


def _opts(srv):
    return {"api_url": srv.e2b_url, "sandbox_url": srv.e2b_url, "api_key": srv.token}


def _state(srv, sandbox_id):
    """Cove's own view of the sandbox (`suspended` while E2B says paused); E2B's id is Cove's
    without its `sb-` prefix."""
    r = httpx.get(f"{srv.api_url}/v1/sandboxes/sb-{sandbox_id}",
                  headers={"Authorization": f"Bearer {srv.token}"})
    r.raise_for_status()
    return r.json()


def test_pause_and_connect_keep_processes_on_gvisor(gvisor):
    opts = _opts(gvisor)
    sbx = Sandbox.create(**opts)
    try:
        counter = sbx.commands.run(
            "i=0; while true; do i=$((i+1)); echo $i > /tmp/count; sleep 0.2; done",
            background=True,
        )
        web = sbx.commands.run(
            "cd /tmp && exec python3 -m http.server 8123 --bind 127.0.0.1", background=True
        )
        # Bounded wait for the loopback server to answer (at most 10 s).
        probe = "curl -fsS -o /dev/null -w '%{http_code}' http://127.0.0.1:8123/count || true"
        for _ in range(50):
            if sbx.commands.run(probe).stdout.strip() == "200":
                break
            time.sleep(0.2)
        before = int(sbx.commands.run("cat /tmp/count").stdout)

        assert sbx.beta_pause() is True
        assert Sandbox.get_info(sbx.sandbox_id, **opts).state == SandboxState.PAUSED
        cove = _state(gvisor, sbx.sandbox_id)
        assert cove["state"] == "suspended", cove

        back = Sandbox.connect(sbx.sandbox_id, **opts)
        assert _state(gvisor, sbx.sandbox_id)["memory_restored"] is True
        alive = back.commands.run(
            f"kill -0 {counter.pid} && kill -0 {web.pid} && echo alive || echo gone"
        ).stdout.strip()
        assert alive == "alive"
        # The counter carries on from where the pause caught it, not from 1.
        time.sleep(1)
        after = int(back.commands.run("cat /tmp/count").stdout)
        assert after > before
        assert back.commands.run(probe).stdout.strip() == "200"
    finally:
        sbx.kill()
