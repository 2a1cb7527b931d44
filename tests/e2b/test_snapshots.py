"""E2B snapshots and fork on Cove's checkpoints, through the sync and async SDKs: a snapshot's
files come back in a sandbox created from it (by id and by name), snapshots are listed and
deleted, forks start with the parent's files and run on their own, and Cove's feature gates
(`--disable-feature`) make these calls raise."""

import os
import sys
import uuid

import pytest
from e2b import AsyncSandbox, Sandbox
from e2b.exceptions import SandboxException, SandboxNotFoundException

sys.path.insert(0, os.path.dirname(__file__))
from cove_server import CoveServer  # noqa: E402


def test_snapshot_create_from_it_list_and_delete():
    name = "snap-" + uuid.uuid4().hex[:8]
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/state.txt", "before snapshot")
        snap = sbx.create_snapshot(name=name)
        assert snap.snapshot_id.startswith("ck-")
        assert snap.names == [name]
        # The source keeps running and changing.
        sbx.files.write("/home/user/state.txt", "after snapshot")
        assert sbx.is_running()

        from_id = Sandbox.create(snap.snapshot_id)
        from_name = Sandbox.create(name)
        try:
            for s in (from_id, from_name):
                assert s.sandbox_id != sbx.sandbox_id
                assert s.files.read("/home/user/state.txt") == "before snapshot"
                assert s.commands.run("whoami").stdout == "user\n"
        finally:
            from_id.kill()
            from_name.kill()

        mine = sbx.list_snapshots().next_items()
        assert [x.snapshot_id for x in mine] == [snap.snapshot_id]
        named = Sandbox.list_snapshots(name=name).next_items()
        assert [x.snapshot_id for x in named] == [snap.snapshot_id]

        second = sbx.create_snapshot()
        assert second.names == []
        pages, seen = 0, []
        paginator = Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id, limit=1)
        while paginator.has_next:
            seen += [x.snapshot_id for x in paginator.next_items()]
            pages += 1
        assert seen == [second.snapshot_id, snap.snapshot_id]
        assert pages == 2

        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        assert Sandbox.delete_snapshot(second.snapshot_id) is True
        assert sbx.list_snapshots().next_items() == []
        with pytest.raises(Exception, match="not found"):
            Sandbox.create(snap.snapshot_id)
    finally:
        sbx.kill()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.create_snapshot(sbx.sandbox_id)


def test_fork_starts_from_the_parents_files():
    sbx = Sandbox.create(metadata={"role": "parent"}, envs={"FROM": "parent"})
    try:
        sbx.files.write("/home/user/shared.txt", "common past")
        forks = sbx.fork(count=2, timeout=120)
        assert len(forks) == 2
        try:
            ids = {f.sandbox_id for f in forks}
            assert len(ids) == 2 and sbx.sandbox_id not in ids
            for f in forks:
                assert isinstance(f, Sandbox), f
                assert f.files.read("/home/user/shared.txt") == "common past"
                assert f.commands.run("echo $FROM").stdout == "parent\n"
                info = f.get_info()
                assert info.metadata == {"role": "parent"}
                assert (info.end_at - info.started_at).total_seconds() < 200
            # Each fork goes its own way.
            forks[0].files.write("/home/user/shared.txt", "fork 0")
            assert forks[1].files.read("/home/user/shared.txt") == "common past"
            assert sbx.files.read("/home/user/shared.txt") == "common past"
        finally:
            for f in forks:
                if isinstance(f, Sandbox):
                    f.kill()
        with pytest.raises(SandboxException, match="at most 16|1 to 16"):
            sbx.fork(count=17)
    finally:
        sbx.kill()
    with pytest.raises(SandboxNotFoundException):
        Sandbox.fork("doesnotexist0000")


async def test_async_snapshot_and_fork():
    sbx = await AsyncSandbox.create()
    try:
        await sbx.files.write("/home/user/a.txt", "async state")
        snap = await sbx.create_snapshot(mode="filesystem")
        child = await AsyncSandbox.create(snap.snapshot_id)
        try:
            assert await child.files.read("/home/user/a.txt") == "async state"
        finally:
            await child.kill()
        [fork] = await sbx.fork()
        try:
            assert await fork.files.read("/home/user/a.txt") == "async state"
        finally:
            await fork.kill()
        listed = await AsyncSandbox.list_snapshots(sandbox_id=sbx.sandbox_id).next_items()
        assert snap.snapshot_id in [x.snapshot_id for x in listed]
        for x in listed:
            assert await AsyncSandbox.delete_snapshot(x.snapshot_id) is True
    finally:
        await sbx.kill()


@pytest.fixture(scope="module")
def gated():
    """A second server with checkpoints and fork turned off."""
    srv = CoveServer(extra_args=["--disable-feature", "checkpoints,fork"])
    try:
        yield srv
    finally:
        srv.stop()


def test_disabled_features_raise(gated):
    opts = {"api_url": gated.e2b_url, "sandbox_url": gated.e2b_url, "api_key": gated.token}
    sbx = Sandbox.create(**opts)
    try:
        with pytest.raises(SandboxException, match="403") as e:
            sbx.create_snapshot()
        assert "disabled" in str(e.value)
        with pytest.raises(SandboxException, match="403"):
            sbx.fork()
        with pytest.raises(SandboxException, match="403"):
            Sandbox.list_snapshots(**opts).next_items()
        assert sbx.commands.run("echo still fine").stdout == "still fine\n"
    finally:
        sbx.kill()
