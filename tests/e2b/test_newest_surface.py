"""The newest E2B SDK surface (e2b 2.63, issue 31 items 4-6): full pauses keep processes,
filesystem pauses and `on_resume="reboot"` come back as a reboot, strict pause, symlink
entries, streaming stdin, and the refusals Cove documents (docs/e2b.md)."""

import os

import httpx
import pytest
from e2b import Sandbox, SandboxException, SandboxQuery, SandboxState
from e2b.sandbox.filesystem.filesystem import FileType


def _boot(sbx):
    """The sandbox's boot id (its own on runc, new at every start); PID 1's start time where
    the kernel has no boot id file (gVisor here)."""
    return sbx.commands.run(
        "cat /proc/sys/kernel/random/boot_id 2>/dev/null || cut -d' ' -f22 /proc/1/stat"
    ).stdout.strip()


def _detail(sbx):
    """The raw `SandboxDetail` (the SDK does not show `pauseMode`)."""
    r = httpx.get(f"{os.environ['E2B_API_URL']}/sandboxes/{sbx.sandbox_id}",
                  headers={"X-API-Key": os.environ["E2B_API_KEY"]})
    r.raise_for_status()
    return r.json()


def _alive(sbx, pid):
    """Whether process `pid` is still the `sleep 600` started before (a reboot may reuse it)."""
    out = sbx.commands.run(f"tr '\\0' ' ' < /proc/{pid}/cmdline 2>/dev/null || true").stdout
    return "yes" if out.strip() == "sleep 600" else "no"


def test_full_pause_keeps_processes_and_files():
    sbx = Sandbox.create()
    try:
        h = sbx.commands.run("sleep 600", background=True)
        boot = _boot(sbx)
        sbx.files.write("/home/user/kept.txt", "kept")
        assert "pauseMode" not in _detail(sbx)
        assert sbx.beta_pause() is True
        info = Sandbox.get_info(sbx.sandbox_id)
        assert info.state == SandboxState.PAUSED
        assert _detail(sbx)["pauseMode"] == "full"
        assert _detail(sbx)["envdUnresponsiveAtPause"] is False
        listed = Sandbox.list(query=SandboxQuery(state=[SandboxState.PAUSED])).next_items()
        assert sbx.sandbox_id in [i.sandbox_id for i in listed]
        back = Sandbox.connect(sbx.sandbox_id)
        assert _alive(back, h.pid) == "yes"
        assert _boot(back) == boot
        assert back.files.read("/home/user/kept.txt") == "kept"
    finally:
        sbx.kill()


def test_filesystem_pause_comes_back_as_a_reboot():
    sbx = Sandbox.create()
    try:
        h = sbx.commands.run("sleep 600", background=True)
        boot = _boot(sbx)
        sbx.files.write("/home/user/kept.txt", "kept")
        assert sbx.pause(mode="filesystem") is True
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        assert _detail(sbx)["pauseMode"] == "filesystem"
        back = Sandbox.connect(sbx.sandbox_id)
        assert back.files.read("/home/user/kept.txt") == "kept"
        assert _alive(back, h.pid) == "no"
        assert _boot(back) != boot
    finally:
        sbx.kill()


def test_reboot_on_resume_and_strict_pause():
    sbx = Sandbox.create()
    try:
        h = sbx.commands.run("sleep 600", background=True)
        boot = _boot(sbx)
        assert sbx.pause(strict=True) is True
        back = Sandbox.connect(sbx.sandbox_id, on_resume="reboot")
        assert _alive(back, h.pid) == "no"
        assert _boot(back) != boot
        assert back.commands.run("echo up").stdout == "up\n"
    finally:
        sbx.kill()


def test_filesystem_auto_pause_is_accepted():
    sbx = Sandbox.create(lifecycle={"on_timeout": {"action": "pause", "mode": "filesystem"}})
    try:
        info = sbx.get_info()
        assert info.state == SandboxState.RUNNING
        assert info.lifecycle["on_timeout"] == "pause"
    finally:
        sbx.kill()


def test_symlinks_are_marked_and_stdin_streams():
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/target.txt", "t")
        sbx.commands.run("ln -s /home/user/target.txt /home/user/link.txt")
        entries = {e.name: e for e in sbx.files.list("/home/user")}
        assert entries["link.txt"].type == FileType.SYMLINK
        assert entries["link.txt"].symlink_target == "/home/user/target.txt"
        assert entries["target.txt"].type == FileType.FILE
        assert sbx.files.get_info("/home/user/link.txt").type == FileType.SYMLINK

        h = sbx.commands.run("cat > /tmp/in.txt", background=True, stdin=True)
        sbx.commands.stream_input(h.pid, ["one ", b"two ", "three"])
        sbx.commands.close_stdin(h.pid)
        assert h.wait().exit_code == 0
        assert sbx.files.read("/tmp/in.txt") == "one two three"
    finally:
        sbx.kill()


def test_https_ports_is_a_documented_refusal():
    with pytest.raises(SandboxException, match="httpsPorts"):
        Sandbox.create(network={"https_ports": [8443]})


def test_idempotency_key_on_create_returns_the_same_sandbox():
    key = "newest-surface-" + os.urandom(4).hex()
    first = Sandbox.create(idempotency_key=key, metadata={"k": "v"})
    try:
        again = Sandbox.create(idempotency_key=key, metadata={"k": "v"})
        assert again.sandbox_id == first.sandbox_id
        with pytest.raises(SandboxException):
            Sandbox.create(idempotency_key=key, metadata={"k": "other"})
    finally:
        first.kill()
