"""E2B volumes on Cove's volumes, through the sync and async SDKs: a volume made with
`Volume.create` is listed, connected to, mounted by one sandbox (`volume_mounts`), read by
another after the first is gone, cannot be destroyed while mounted, and is destroyed once (a
second `destroy` answers False; `destroy` right after `kill` waits for the kill to end). The volume content API is not served (501)."""

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


def test_unknown_volume_mount_and_content_api_are_refused():
    with pytest.raises(Exception, match="not found"):
        Sandbox.create(volume_mounts={"/mnt/x": _name("missing")})
    key = {"X-API-Key": os.environ["E2B_API_KEY"]}
    r = httpx.get(f"{os.environ['E2B_API_URL']}/volumecontent/v/dir?path=/", headers=key)
    assert r.status_code == 501 and "not supported" in r.json()["message"]


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
