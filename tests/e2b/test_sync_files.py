"""E2B sync SDK: files, watchers and signed URLs."""

import io
import json
import time
import urllib.error
import urllib.request

import pytest
from e2b import FileType, Sandbox
from e2b.exceptions import FileNotFoundException


@pytest.fixture(scope="module")
def sbx():
    s = Sandbox.create()
    yield s
    s.kill()


def test_write_and_read(sbx):
    info = sbx.files.write("notes/a.txt", "hello files")
    assert (info.path, info.name) == ("/home/user/notes/a.txt", "a.txt")
    assert sbx.files.read("/home/user/notes/a.txt") == "hello files"
    blob = bytes(range(256)) * 10
    sbx.files.write("/tmp/blob.bin", blob)
    assert bytes(sbx.files.read("/tmp/blob.bin", format="bytes")) == blob
    sbx.files.write("/tmp/stream.bin", io.BytesIO(b"streamed"))
    assert sbx.files.read("/tmp/stream.bin") == "streamed"
    sbx.files.write("/tmp/gz.txt", "compressed", gzip=True)
    assert sbx.files.read("/tmp/gz.txt") == "compressed"
    assert sbx.commands.run("stat -c %U /home/user/notes/a.txt").stdout == "user\n"
    with pytest.raises(FileNotFoundException):
        sbx.files.read("/home/user/missing.txt")


def test_write_files_list_and_stat(sbx):
    sbx.files.write_files(
        [
            {"path": "/home/user/tree/one.txt", "data": "1"},
            {"path": "/home/user/tree/sub/two.txt", "data": "22"},
        ]
    )
    top = sbx.files.list("/home/user/tree")
    assert [(e.name, e.type) for e in top] == [("one.txt", FileType.FILE), ("sub", FileType.DIR)]
    deep = sbx.files.list("/home/user/tree", depth=2)
    assert [e.path for e in deep] == [
        "/home/user/tree/one.txt",
        "/home/user/tree/sub",
        "/home/user/tree/sub/two.txt",
    ]
    info = sbx.files.get_info("tree/sub/two.txt")
    assert (info.path, info.size, info.mode, info.type) == (
        "/home/user/tree/sub/two.txt", 2, 0o644, FileType.FILE)
    assert info.permissions == "-rw-r--r--"
    assert info.owner == "user"
    assert sbx.files.exists("/home/user/tree/one.txt")
    assert not sbx.files.exists("/home/user/tree/nope.txt")


def test_make_dir_rename_remove(sbx):
    assert sbx.files.make_dir("/home/user/made/deep") is True
    assert sbx.files.make_dir("/home/user/made/deep") is False
    sbx.files.write("/home/user/made/x.txt", "x")
    moved = sbx.files.rename("/home/user/made/x.txt", "/home/user/made/y.txt")
    assert moved.path == "/home/user/made/y.txt"
    assert not sbx.files.exists("/home/user/made/x.txt")
    sbx.files.remove("/home/user/made")
    assert not sbx.files.exists("/home/user/made")
    sbx.files.remove("/home/user/made")  # missing is fine
    with pytest.raises(FileNotFoundException):
        sbx.files.rename("/home/user/none", "/home/user/none2")


def test_watch_dir(sbx):
    sbx.files.make_dir("/home/user/watched")
    handle = sbx.files.watch_dir("/home/user/watched")
    sbx.files.write("/home/user/watched/new.txt", "data")
    deadline = time.time() + 10
    events = []
    while time.time() < deadline and not any(e.name == "new.txt" for e in events):
        events += handle.get_new_events()
        time.sleep(0.2)
    time.sleep(0.5)
    events += handle.get_new_events()
    handle.stop()
    # As envd reports an upload of a new file: exactly these three, no temporary names.
    assert [(e.name, e.type.name) for e in events] == [
        ("new.txt", "CREATE"), ("new.txt", "CHMOD"), ("new.txt", "WRITE")]
    with pytest.raises(FileNotFoundException):
        sbx.files.watch_dir("/home/user/not-there")


def test_signed_urls(sbx):
    up = sbx.upload_url("/home/user/signed.txt")
    boundary = "cove-test-boundary"
    body = (
        f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"signed.txt\""
        f"\r\nContent-Type: text/plain\r\n\r\nvia url\r\n--{boundary}--\r\n"
    ).encode()
    req = urllib.request.Request(
        up, data=body, method="POST",
        headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
    )
    with urllib.request.urlopen(req) as r:
        assert json.loads(r.read())[0]["path"] == "/home/user/signed.txt"
    down = sbx.download_url("/home/user/signed.txt", use_signature_expiration=60)
    with urllib.request.urlopen(down) as r:
        assert r.read() == b"via url"
    expired = sbx.download_url("/home/user/signed.txt", use_signature_expiration=-10)
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(expired)
    assert e.value.code == 401
    assert json.loads(e.value.read()) == {"code": 401, "message": "signature is already expired"}
    tampered = down.replace("signature=v1_", "signature=v1_x")
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(tampered)
    assert e.value.code == 401


def test_metadata_in_a_root_owned_place(sbx):
    # /tmp is everybody's: the user's file there keeps its metadata like any other.
    info = sbx.files.write("/tmp/m.txt", "x", metadata={"owner": "me"})
    assert info.metadata == {"owner": "me"}
    assert sbx.files.get_info("/tmp/m.txt").metadata == {"owner": "me"}


def test_large_files_stream_both_ways(sbx):
    import os as _os

    blob = _os.urandom(6 << 20)
    sbx.files.write("/tmp/large-multipart.bin", blob)  # multipart
    sbx.files.write("/tmp/large-stream.bin", io.BytesIO(blob))  # octet-stream, chunked
    for p in ("/tmp/large-multipart.bin", "/tmp/large-stream.bin"):
        assert bytes(sbx.files.read(p, format="bytes")) == blob
