"""Persistent volumes through the SDK against a real server: create, mount in two sandboxes
one after the other (the data outlives the first), read-only, files without a sandbox (write,
read, list to a depth, stat, mkdir, owner and mode, remove), a full volume, delete refused
while mounted."""

from __future__ import annotations

import pytest

import cove


def test_volume_outlives_its_writer_and_is_full_at_its_size(client):
    vol = client.create_volume("py-vol", 16)
    assert isinstance(vol, cove.Volume)
    assert (vol.name, vol.size_mib, vol.mounted_by) == ("py-vol", 16, [])
    a = client.create_sandbox("tiny", volumes=["py-vol:/data"])
    try:
        assert client.run(a, "echo hi > /data/note && stat -c %u /data/note").stdout == b"1000\n"
        assert client.get_volume("py-vol").mounted_by == [a.id]
        with pytest.raises(cove.CoveError) as err:
            client.delete_volume("py-vol")
        assert err.value.code == "volume_in_use"
    finally:
        client.delete_sandbox(a)
    b = client.create_sandbox("tiny", volumes=[{"name": "py-vol", "path": "/ro", "read_only": True}])
    try:
        assert client.get_sandbox(b.id).volumes == [{"name": "py-vol", "path": "/ro", "read_only": True}]
        r = client.run(b, "cat /ro/note; echo x > /ro/y")
        assert r.stdout == b"hi\n" and b"Read-only file system" in r.stderr
    finally:
        client.delete_sandbox(b)
    assert client.read_volume_file("py-vol", "/note") == b"hi\n"
    client.write_volume_file("py-vol", "/dir/up.txt", "up")
    assert [e.name for e in client.list_volume_files("py-vol", "/dir")] == ["up.txt"]
    with pytest.raises(cove.CoveError) as err:
        client.write_volume_file("py-vol", "/big", b"\0" * (32 << 20))
    assert err.value.code == "insufficient_storage"
    assert "py-vol" in {v.name for v in client.list_volumes()}
    client.delete_volume("py-vol")
    with pytest.raises(cove.CoveError) as err:
        client.get_volume("py-vol")
    assert err.value.code == "volume_not_found"


def test_volume_paths_without_a_sandbox(client):
    client.create_volume("py-vol-ops", 16)
    try:
        d = client.make_volume_dir("py-vol-ops", "/a/b", mode=0o750)
        assert (d.type, d.path, d.mode, d.uid, d.gid) == ("dir", "/a/b", 0o750, 1000, 1000)
        with pytest.raises(cove.CoveError) as err:
            client.make_volume_dir("py-vol-ops", "/x/y", parents=False)
        assert err.value.code == "file_not_found"
        client.write_volume_file("py-vol-ops", "/a/b/f", "data", mode=0o600)
        st = client.stat_volume_file("py-vol-ops", "/a/b/f")
        assert (st.type, st.size, st.mode, st.uid) == ("file", 4, 0o600, 1000)
        assert st.atime is not None and st.ctime is not None
        assert [e.path for e in client.list_volume_files("py-vol-ops", "/a", depth=2)] == ["/a/b", "/a/b/f"]
        st = client.set_volume_file_attrs("py-vol-ops", "/a/b/f", uid=0, mode=0o640)
        assert (st.uid, st.gid, st.mode) == (0, 1000, 0o640)
        client.remove_volume_file("py-vol-ops", "/a")
        with pytest.raises(cove.CoveError) as err:
            client.stat_volume_file("py-vol-ops", "/a")
        assert err.value.code == "file_not_found"
        with pytest.raises(cove.CoveError) as err:
            client.remove_volume_file("py-vol-ops", "/")
        assert err.value.code == "invalid_argument"
    finally:
        client.delete_volume("py-vol-ops")


def test_object_volume_is_fetched_again_after_its_sandbox_is_deleted(client):
    vol = client.create_volume("py-obj", 16, storage="object")
    assert vol.storage == "object"
    a = client.create_sandbox("tiny", volumes=["py-obj:/data"])
    try:
        assert client.run(a, "echo kept > /data/note").exit_code == 0
    finally:
        client.delete_sandbox(a)
    # Uploaded and on no node while no sandbox holds it.
    assert client.get_volume("py-obj").used_bytes is None
    b = client.create_sandbox("tiny", volumes=["py-obj:/data"])
    try:
        assert client.run(b, "cat /data/note").stdout == b"kept\n"
    finally:
        client.delete_sandbox(b)
    client.delete_volume("py-obj")
