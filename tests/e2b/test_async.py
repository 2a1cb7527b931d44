"""E2B async SDK: the same user-visible behaviour through `AsyncSandbox`."""

import asyncio
import uuid

import pytest
from e2b import AsyncSandbox, CommandExitException, PtySize, SandboxQuery, SandboxState
from e2b.exceptions import (
    FileNotFoundException,
    NotFoundException,
    SandboxException,
    SandboxNotRunningException,
)


async def test_lifecycle():
    tag = uuid.uuid4().hex
    sbx = await AsyncSandbox.create(metadata={"async": tag}, envs={"X": "y"})
    try:
        info = await sbx.get_info()
        assert info.state == SandboxState.RUNNING
        listed = await AsyncSandbox.list(query=SandboxQuery(metadata={"async": tag})).next_items()
        assert [i.sandbox_id for i in listed] == [sbx.sandbox_id]
        again = await AsyncSandbox.connect(sbx.sandbox_id)
        assert (await again.commands.run("echo $X")).stdout == "y\n"
        assert await sbx.pause() is True
        assert not await sbx.is_running()
        resumed = await AsyncSandbox.connect(sbx.sandbox_id)
        assert await resumed.is_running()
        await sbx.set_timeout(60)
    finally:
        assert await sbx.kill() is True
    assert await AsyncSandbox.kill(sbx.sandbox_id) is False
    with pytest.raises(NotFoundException):
        await AsyncSandbox.get_info(sbx.sandbox_id)


async def test_commands():
    sbx = await AsyncSandbox.create()
    try:
        r = await sbx.commands.run("echo hi; echo err >&2")
        assert (r.stdout, r.stderr, r.exit_code) == ("hi\n", "err\n", 0)
        with pytest.raises(CommandExitException) as e:
            await sbx.commands.run("exit 7")
        assert e.value.exit_code == 7
        h = await sbx.commands.run("cat", background=True, stdin=True)
        await sbx.commands.send_stdin(h.pid, "piped\n")
        await sbx.commands.close_stdin(h.pid)
        assert (await h.wait()).stdout == "piped\n"
        bg = await sbx.commands.run("sleep 60", background=True)
        assert bg.pid in [p.pid for p in await sbx.commands.list()]
        assert await bg.kill() is True
        with pytest.raises(CommandExitException) as e:
            await bg.wait()
        assert e.value.error == "signal: killed"
        late = await sbx.commands.run("sleep 1; echo later", background=True)
        await late.disconnect()
        joined = await sbx.commands.connect(late.pid)
        assert (await joined.wait()).stdout == "later\n"
        out = bytearray()
        pty = await sbx.pty.create(PtySize(rows=24, cols=80), on_data=out.extend)
        await sbx.pty.resize(pty.pid, PtySize(rows=40, cols=120))
        await sbx.pty.send_stdin(pty.pid, b"tput cols; exit\n")
        await pty.wait()
        assert "120" in out.decode(errors="replace")
    finally:
        await sbx.kill()


async def test_files_and_watch():
    sbx = await AsyncSandbox.create()
    try:
        await sbx.files.make_dir("/home/user/w")
        events = []
        handle = await sbx.files.watch_dir("/home/user/w", on_event=events.append, recursive=True)
        await sbx.files.write("/home/user/w/a.txt", "alpha")
        await sbx.files.write_files([{"path": "/home/user/w/sub/b.txt", "data": b"beta"}])
        for _ in range(50):
            if {"a.txt", "sub/b.txt"} <= {e.name for e in events}:
                break
            await asyncio.sleep(0.2)
        await handle.stop()
        assert {"a.txt", "sub/b.txt"} <= {e.name for e in events}
        assert await sbx.files.read("/home/user/w/a.txt") == "alpha"
        assert [e.name for e in await sbx.files.list("/home/user/w")] == ["a.txt", "sub"]
        assert await sbx.files.exists("/home/user/w/sub/b.txt")
        info = await sbx.files.rename("/home/user/w/a.txt", "/home/user/w/c.txt")
        assert info.name == "c.txt"
        await sbx.files.remove("/home/user/w/c.txt")
        with pytest.raises(FileNotFoundException):
            await sbx.files.read("/home/user/w/c.txt")
        assert (await sbx.get_metrics())[-1].cpu_count >= 1
    finally:
        await sbx.kill()


async def test_kill_while_running_raises_not_running():
    sbx = await AsyncSandbox.create()
    h = await sbx.commands.run("sleep 60", background=True)
    await sbx.kill()
    with pytest.raises(SandboxNotRunningException, match="killed or reached its end of life"):
        await h.wait()
