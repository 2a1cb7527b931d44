"""Checkpoints through the SDK against a real server (runc: files are saved, processes
restart): checkpoint, change, roll back; fork; create from a checkpoint; export to a file and
import it back byte-exact; a hostile archive is refused. Sync and async clients."""

from __future__ import annotations

import asyncio
import io
import tarfile

import pytest

import cove


def test_checkpoint_rollback_fork_and_create_from_it(client):
    sb = client.create_sandbox("tiny")
    forks = []
    made = None
    try:
        client.write_file(sb, "/home/user/state.txt", "before")
        ck = client.create_checkpoint(sb, "py-first")
        assert isinstance(ck, cove.Checkpoint)
        assert (ck.state, ck.name, ck.sandbox_id, ck.memory) == ("ready", "py-first", sb.id, False)
        assert ck.file_bytes > 0 and ck.pause_ms is not None
        assert ck.id in {c.id for c in client.list_checkpoints(sb)}
        assert ck.id in {c.id for c in client.list_checkpoints()}

        client.write_file(sb, "/home/user/state.txt", "after")
        client.write_file(sb, "/home/user/later.txt", "gone after rollback")
        back = client.rollback(sb, ck)
        assert back.state == "running"
        assert client.read_file(sb, "/home/user/state.txt") == b"before"
        assert not client.file_exists(sb, "/home/user/later.txt")

        forks = client.fork(sb, 2, metadata={"attempt": "py"})
        assert len(forks) == 2 and len({f.id for f in forks}) == 2
        for f in forks:
            assert f.state == "running" and f.metadata == {"attempt": "py"}
            assert client.read_file(f, "/home/user/state.txt") == b"before"
        seeds = {client.run(f, "head -c 16 /dev/urandom | od -An -tx1").stdout for f in forks}
        assert len(seeds) == 2

        made = client.create_sandbox(checkpoint=ck)
        assert (made.template, made.state) == ("tiny", "running")
        assert client.read_file(made, "/home/user/state.txt") == b"before"
    finally:
        for s in [sb, *forks] + ([made] if made else []):
            client.delete_sandbox(s)


def test_export_import_round_trip_and_a_hostile_archive(client, tmp_path):
    sb = client.create_sandbox("tiny")
    try:
        client.write_file(sb, "/home/user/payload.bin", bytes(range(256)) * 64)
        ck = client.create_checkpoint(sb)
    finally:
        client.delete_sandbox(sb)
    path = tmp_path / "ck.tar"
    size = client.export_checkpoint(ck, path)
    assert size == path.stat().st_size and size > 16384
    assert client.export_checkpoint(ck) == path.read_bytes()
    assert not (tmp_path / "ck.tar.part").exists()

    imported = client.import_checkpoint(path, name="py-imported")
    assert imported.id != ck.id and (imported.state, imported.name) == ("ready", "py-imported")
    made = client.create_sandbox(checkpoint=imported.id)
    try:
        assert client.read_file(made, "/home/user/payload.bin") == bytes(range(256)) * 64
    finally:
        client.delete_sandbox(made)
    client.delete_checkpoint(imported)
    with pytest.raises(cove.CoveError) as err:
        client.get_checkpoint(imported.id)
    assert err.value.code == "checkpoint_not_found"

    hostile = io.BytesIO()
    with tarfile.open(fileobj=hostile, mode="w") as tar:
        info = tarfile.TarInfo("../../etc/cove-escape")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"bad"))
    with pytest.raises(cove.CoveError) as err:
        client.import_checkpoint(hostile.getvalue())
    assert err.value.code == "invalid_argument"


def test_async_checkpoint_and_export(server, build_logs):
    async def go():
        async with cove.AsyncClient(server.url, server.token) as c:
            sb = await c.create_sandbox("tiny")
            try:
                await c.write_file(sb, "/home/user/a.txt", "async")
                ck = await c.create_checkpoint(sb, "py-async")
                assert ck.state == "ready"
                archive = await c.export_checkpoint(ck)
                assert archive[:512].find(b"cove-checkpoint.json") >= 0
                await c.delete_checkpoint(ck)
            finally:
                await c.delete_sandbox(sb)

    asyncio.run(go())
