"""The asyncio client against a real server: create, streaming with async callbacks, concurrent
commands, reattach, stdin, files, PTY, events, errors."""

from __future__ import annotations

import asyncio
import time

import pytest

import cove

pytestmark = pytest.mark.anyio


@pytest.fixture
async def aclient(server, build_logs):
    async with cove.AsyncClient(server.url, server.token) as c:
        yield c


@pytest.fixture
async def asandbox(aclient):
    sb = await aclient.create_sandbox("tiny", metadata={"suite": "python-async"})
    yield sb
    try:
        await aclient.delete_sandbox(sb)
    except cove.NotFound:
        pass


async def test_streaming_with_async_callbacks(aclient, asandbox):
    seen = []
    t0 = time.monotonic()

    async def on_stdout(data: bytes) -> None:
        seen.append((time.monotonic() - t0, data))

    result = await aclient.run(asandbox, "for i in 1 2 3; do echo $i; sleep 0.4; done; exit 7", on_stdout=on_stdout)
    assert result.exit_code == 7
    assert result.stdout == b"1\n2\n3\n"
    assert seen[0][0] < (time.monotonic() - t0) - 0.6


async def test_commands_run_concurrently(aclient, asandbox):
    t0 = time.monotonic()
    results = await asyncio.gather(*(aclient.run(asandbox, f"sleep 1; echo {i}") for i in range(4)))
    assert [r.text for r in results] == [f"{i}\n" for i in range(4)]
    assert time.monotonic() - t0 < 3.5


async def test_reattach_and_stdin(aclient, asandbox):
    handle = await aclient.start(asandbox, ["cat"], stdin=True)
    await handle.write_stdin(b"0123456789")
    await handle.close_stdin()
    assert (await handle.wait()).stdout == b"0123456789"
    again = await aclient.attach(asandbox, handle.id, offset=4)
    assert (await again.wait()).stdout == b"456789"
    listed = await aclient.list_commands(asandbox)
    assert handle.id in {c.id for c in listed}


async def test_stdout_bytes(aclient, asandbox):
    handle = await aclient.start(asandbox, "printf 'a\\000\\377'; echo e >&2; printf z")
    got = b"".join([chunk async for chunk in handle.stdout_bytes()])
    assert got == b"a\x00\xffz"
    assert handle.command.exit_code == 0
    assert b"".join([chunk async for chunk in handle.stdout_bytes(offset=2)]) == b"\xffz"


async def test_kill(aclient, asandbox):
    handle = await aclient.start(asandbox, ["sleep", "60"])
    await handle.kill(grace_ms=100)
    final = await handle.refresh()
    assert final.state == "exited" and final.exit_code is None


async def test_files(aclient, asandbox, tmp_path):
    await aclient.write_file(asandbox, "/tmp/a.txt", b"async bytes")
    assert await aclient.read_file(asandbox, "/tmp/a.txt") == b"async bytes"
    files = await aclient.upload_files(asandbox, [("/tmp/m/1", b"one"), ("/tmp/m/2", b"two")])
    assert [f.size for f in files] == [3, 3]
    src = tmp_path / "tree"
    (src / "x").mkdir(parents=True)
    (src / "x" / "f").write_bytes(b"deep")
    with open(src / "x" / "f", "rb") as fh:
        await aclient.write_file(asandbox, "/tmp/from-file-object", fh)
    assert await aclient.read_file(asandbox, "/tmp/from-file-object") == b"deep"
    await aclient.upload_dir(asandbox, src, "/tmp/tree")
    await aclient.download_dir(asandbox, "/tmp/tree", tmp_path / "back")
    assert (tmp_path / "back" / "x" / "f").read_bytes() == b"deep"
    assert await aclient.file_exists(asandbox, "/tmp/m/2")


async def test_pty(aclient, asandbox):
    session = await aclient.pty(asandbox, ["sh"])
    await session.resize(120, 40)
    await session.send("stty size; exit\n")
    result = await asyncio.wait_for(session.wait(), 30)
    await session.close()
    assert b"40 120" in result.stdout
    assert result.command.exit_code == 0


async def test_lifecycle_and_events(aclient, asandbox):
    await aclient.pause(asandbox)
    await aclient.resume(asandbox)
    kinds = []
    async for ev in aclient.events(after=0):
        if ev.sandbox_id == asandbox.id:
            kinds.append(ev.type)
        if len(kinds) >= 3:
            break
    assert kinds, "no event of the sandbox"
    sandboxes = await aclient.list_sandboxes(metadata={"suite": "python-async"})
    assert asandbox.id in {s.id for s in sandboxes}


async def test_errors(aclient, server):
    with pytest.raises(cove.NotFound) as err:
        await aclient.get_sandbox("sb-does-not-exist")
    assert err.value.request_id
    bad = cove.AsyncClient(server.url, "nope")
    with pytest.raises(cove.Unauthorized):
        await bad.list_templates()
    await bad.aclose()
