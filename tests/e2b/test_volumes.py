"""E2B volumes on Cove's volumes, through the sync and async SDKs: a volume made with
`Volume.create` is listed, connected to, mounted by one sandbox (`volume_mounts`), read by
another after the first is gone, cannot be destroyed while mounted, and is destroyed once (a
second `destroy` answers False; `destroy` right after `kill` waits for the kill to end).

Its content API (`/volumecontent/...`) is served on Cove's volume files, authorised by the
volume's token: files written and read as bytes and text, listed (with depth), described,
directories made (with and without parents), owner and mode set, paths removed, a missing
path and a full volume refused; a wrong token, or another volume's, is refused; a file
written through it is seen by a sandbox that mounts the volume."""

import os
import uuid

import httpx
import pytest
from e2b import AsyncSandbox, AsyncVolume, Sandbox, Volume
from e2b.exceptions import NotFoundException


def _name(tag):
    return f"{tag}-{uuid.uuid4().hex[:8]}"


def test_volume_is_made_mounted_shared_and_destroyed():
    name = _name("e2b-vol")
    vol = Volume.create(name)
    assert vol.volume_id == name and vol.name == name
    assert name in [v.volume_id for v in Volume.list()]
    info = Volume.get_info(name)
    assert (info.volume_id, info.name) == (name, name)
    assert Volume.connect(name).name == name

    writer = Sandbox.create(volume_mounts={"/mnt/data": vol})
    try:
        writer.files.write("/mnt/data/note.txt", "kept on the volume")
        r = writer.commands.run("stat -c %U /mnt/data/note.txt")
        assert r.stdout == "user\n"
        # Mounted: no destroy.
        with pytest.raises(Exception, match="mounted"):
            Volume.destroy(name)
    finally:
        writer.kill()

    # Another sandbox mounts it by name, at another path, and sees the file.
    reader = Sandbox.create(volume_mounts={"/home/user/shared": name})
    try:
        assert reader.files.read("/home/user/shared/note.txt") == "kept on the volume"
    finally:
        reader.kill()

    assert Volume.destroy(name) is True
    assert Volume.destroy(name) is False
    with pytest.raises(NotFoundException):
        Volume.get_info(name)
    assert name not in [v.volume_id for v in Volume.list()]


def test_unknown_volume_mount_is_refused():
    with pytest.raises(Exception, match="not found"):
        Sandbox.create(volume_mounts={"/mnt/x": _name("missing")})


def test_volume_content_round_trip_and_a_sandbox_sees_it():
    name = _name("e2b-vc")
    vol = Volume.create(name)
    try:
        assert vol.token and vol.token.startswith("cvt1.")
        # Bytes and text; a write replaces, makes parents, and takes owner and mode.
        stat = vol.write_file("/docs/a.bin", b"\x00\x01binary")
        assert (stat.name, stat.path, stat.type.value, stat.size) == ("a.bin", "/docs/a.bin", "file", 8)
        assert (stat.uid, stat.gid, stat.mode) == (1000, 1000, 0o644)
        assert vol.read_file("/docs/a.bin", format="bytes") == b"\x00\x01binary"
        vol.write_file("/docs/b.txt", "first")
        vol.write_file("/docs/b.txt", "héllo", mode=0o600)
        assert vol.read_file("/docs/b.txt") == "héllo"
        assert b"".join(vol.read_file("/docs/b.txt", format="stream")) == "héllo".encode()

        # Stat and exists.
        info = vol.get_info("/docs/b.txt")
        assert (info.type.value, info.size, info.mode) == ("file", 6, 0o600)
        assert info.mtime.tzinfo is not None and info.atime and info.ctime
        assert vol.get_info("/docs").type.value == "directory"
        assert vol.exists("/docs/b.txt") and not vol.exists("/docs/none")

        # Directories: without force a missing parent is not found; with it, parents are made.
        with pytest.raises(NotFoundException):
            vol.make_dir("/x/y/z")
        made = vol.make_dir("/x/y/z", force=True, mode=0o750)
        assert (made.type.value, made.path, made.mode) == ("directory", "/x/y/z", 0o750)
        with pytest.raises(Exception, match="exists"):
            vol.make_dir("/x/y/z")

        # Listing, one level and deeper.
        assert sorted(e.name for e in vol.list("/docs")) == ["a.bin", "b.txt"]
        deep = [e.path for e in vol.list("/x", depth=3)]
        assert deep == ["/x/y", "/x/y/z"]

        # Owner and mode.
        updated = vol.update_metadata("/docs/a.bin", uid=0, gid=0, mode=0o640)
        assert (updated.uid, updated.gid, updated.mode) == (0, 0, 0o640)
        assert vol.get_info("/docs/a.bin").mode == 0o640

        # Remove a file, then a directory with its contents; missing paths are not found.
        vol.remove("/docs/a.bin")
        assert not vol.exists("/docs/a.bin")
        vol.remove("/x")
        assert not vol.exists("/x/y/z")
        with pytest.raises(NotFoundException):
            vol.remove("/x")
        with pytest.raises(NotFoundException):
            vol.read_file("/nope.txt")
        with pytest.raises(NotFoundException):
            vol.get_info("/nope")

        # A sandbox that mounts the volume sees what the content API wrote.
        sbx = Sandbox.create(volume_mounts={"/data": vol})
        try:
            r = sbx.commands.run("cat /data/docs/b.txt && stat -c '%a %U' /data/docs/b.txt")
            assert r.stdout == "héllo600 user\n"
            sbx.files.write("/data/from-sandbox.txt", "back")
        finally:
            sbx.kill()
        assert vol.read_file("/from-sandbox.txt") == "back"
    finally:
        Volume.destroy(name)


def test_wrong_tokens_are_refused():
    one, two = Volume.create(_name("e2b-vt1")), Volume.create(_name("e2b-vt2"))
    try:
        one.write_file("/f", "mine")
        # No token, a bad one, the API key, and another volume's token: all 401.
        url = f"{os.environ['E2B_VOLUME_API_URL']}/volumecontent/{one.volume_id}/file?path=/f"
        for headers in (
            {},
            {"Authorization": "Bearer nope"},
            {"Authorization": f"Bearer {os.environ['E2B_API_KEY']}"},
            {"Authorization": f"Bearer {two.token}"},
        ):
            r = httpx.get(url, headers=headers)
            assert r.status_code == 401, (headers, r.text)
            assert isinstance(r.json()["code"], int) and r.json()["message"]
        with pytest.raises(Exception):
            Volume(one.volume_id, one.name, token=two.token).read_file("/f")
        assert one.read_file("/f") == "mine"
    finally:
        Volume.destroy(one.volume_id)
        Volume.destroy(two.volume_id)


def test_a_full_volume_is_refused(cove):
    # A small volume made with Cove's own API, then reached through E2B by its name.
    name = _name("e2b-vfull")
    r = httpx.post(f"{cove.api_url}/v1/volumes",
                   headers={"Authorization": f"Bearer {cove.token}"},
                   json={"name": name, "size_mib": 16})
    assert r.status_code == 201, r.text
    vol = Volume.connect(name)
    try:
        with pytest.raises(Exception, match="free|full"):
            vol.write_file("/big", b"\0" * (32 << 20))
        assert not vol.exists("/big")
        vol.write_file("/small", b"fits")
        assert vol.read_file("/small") == "fits"
    finally:
        Volume.destroy(name)


@pytest.mark.asyncio
async def test_async_volume_round_trip():
    name = _name("e2b-avol")
    vol = await AsyncVolume.create(name)
    sbx = await AsyncSandbox.create(volume_mounts={"/data": vol})
    try:
        await sbx.files.write("/data/a.txt", "async")
        assert (await sbx.commands.run("cat /data/a.txt")).stdout == "async"
    finally:
        await sbx.kill()
    assert name in [v.name for v in await AsyncVolume.list()]
    assert await AsyncVolume.destroy(name) is True


@pytest.mark.asyncio
async def test_async_volume_content():
    name = _name("e2b-avc")
    vol = await AsyncVolume.create(name)
    try:
        await vol.write_file("/d/t.txt", "async text")
        await vol.write_file("/d/b.bin", b"\xffbytes")
        assert await vol.read_file("/d/t.txt") == "async text"
        assert await vol.read_file("/d/b.bin", format="bytes") == b"\xffbytes"
        assert sorted(e.name for e in await vol.list("/d")) == ["b.bin", "t.txt"]
        assert [e.path for e in await vol.list("/", depth=2) if e.path.startswith("/d")] == [
            "/d", "/d/b.bin", "/d/t.txt"]
        st = await vol.get_info("/d/t.txt")
        assert (st.size, st.uid) == (10, 1000)
        made = await vol.make_dir("/e/f", force=True)
        assert made.type.value == "directory"
        assert (await vol.update_metadata("/e/f", mode=0o700)).mode == 0o700
        await vol.remove("/e")
        assert not await vol.exists("/e")
        with pytest.raises(NotFoundException):
            await vol.read_file("/missing")
    finally:
        await AsyncVolume.destroy(name)
