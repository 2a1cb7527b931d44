"""E2B file metadata (`files.write(..., metadata=)`), kept as the file's `user.e2b.*` extended
attributes by Cove's guest agent as the requesting user, read back by `get_info`, `list` and
`rename`, through the sync and async SDKs."""

import os

import httpx
import pytest
from e2b import AsyncSandbox, Sandbox
from e2b.exceptions import InvalidArgumentException


def test_write_with_metadata_and_read_it_back():
    sbx = Sandbox.create()
    try:
        info = sbx.files.write("/home/user/doc.txt", "body", metadata={"Owner": "ada", "stage": "draft"})
        # Keys are lowercased by the sandbox, as upstream.
        assert info.metadata == {"owner": "ada", "stage": "draft"}
        got = sbx.files.get_info("/home/user/doc.txt")
        assert got.metadata == {"owner": "ada", "stage": "draft"}
        assert sbx.files.read("/home/user/doc.txt") == "body"
        # In the sandbox they are ordinary user xattrs of a file the user owns.
        out = sbx.commands.run(
            "python3 -c \"import os; print(os.getxattr('/home/user/doc.txt', 'user.e2b.owner')"
            ".decode(), os.stat('/home/user/doc.txt').st_uid == os.getuid())\""
        )
        assert out.stdout == "ada True\n"

        listed = {e.name: e.metadata for e in sbx.files.list("/home/user")}
        assert listed["doc.txt"] == {"owner": "ada", "stage": "draft"}

        moved = sbx.files.rename("/home/user/doc.txt", "/home/user/moved.txt")
        assert moved.metadata == {"owner": "ada", "stage": "draft"}

        # A write without metadata replaces the file and clears it.
        sbx.files.write("/home/user/moved.txt", "v2")
        assert sbx.files.get_info("/home/user/moved.txt").metadata is None

        # Several files in one upload get the same metadata.
        infos = sbx.files.write_files(
            [{"path": "/home/user/m/a.txt", "data": "a"}, {"path": "/home/user/m/b.txt", "data": "b"}],
            metadata={"batch": "7"},
        )
        assert [i.metadata for i in infos] == [{"batch": "7"}, {"batch": "7"}]
        assert {e.name: e.metadata for e in sbx.files.list("/home/user/m")} == {
            "a.txt": {"batch": "7"},
            "b.txt": {"batch": "7"},
        }
        # Set out of band, under the same namespace: shown too.
        sbx.commands.run("setfattr -n user.e2b.tool -v shell /home/user/m/a.txt 2>/dev/null || "
                         "python3 -c \"import os; os.setxattr('/home/user/m/a.txt', "
                         "'user.e2b.tool', b'shell')\"")
        assert sbx.files.get_info("/home/user/m/a.txt").metadata == {"batch": "7", "tool": "shell"}
    finally:
        sbx.kill()


def test_bad_metadata_is_refused_before_anything_is_written():
    sbx = Sandbox.create()
    try:
        with pytest.raises(InvalidArgumentException):
            sbx.files.write("/home/user/x.txt", "x", metadata={"bad key": "v"})
        # What the SDK would not send, the sandbox refuses itself (400), writing nothing.
        url = os.environ["E2B_SANDBOX_URL"]
        headers = {
            "E2b-Sandbox-Id": sbx.sandbox_id,
            "E2b-Sandbox-Port": "49983",
            "X-Access-Token": sbx._envd_access_token,
            "X-Metadata-Big": "v" * 5000,
        }
        r = httpx.post(f"{url}/files", params={"path": "/home/user/x.txt"}, headers=headers,
                       content=b"x", timeout=30)
        assert r.status_code == 400, r.text
        assert "exceeds" in r.json()["message"]
        assert not sbx.files.exists("/home/user/x.txt")
    finally:
        sbx.kill()


async def test_async_metadata():
    sbx = await AsyncSandbox.create()
    try:
        info = await sbx.files.write("/home/user/a.txt", "a", metadata={"k": "v"})
        assert info.metadata == {"k": "v"}
        assert (await sbx.files.get_info("/home/user/a.txt")).metadata == {"k": "v"}
        # Read as another user (root here): the same attributes.
        root_view = await sbx.files.get_info("/home/user/a.txt", user="root")
        assert root_view.metadata == {"k": "v"}
        # A directory listing shows them too.
        assert {e.name: e.metadata for e in await sbx.files.list("/home/user")}["a.txt"] == {"k": "v"}
    finally:
        await sbx.kill()
