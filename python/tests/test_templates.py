"""Templates from a file through the SDK against a real server: a directory context with a
Dockerfile and a file it copies, the build log as it runs, a sandbox of the new template, tar
bytes as the context, and a bad file refused with the line it names. Sync and async."""

from __future__ import annotations

import asyncio
import io
import tarfile

import pytest

import cove


def test_a_template_from_a_directory_builds_and_runs(client, tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM tiny\nCOPY greeting.txt /greeting.txt\nRUN echo built > /built.txt\n")
    (tmp_path / "greeting.txt").write_text("hello from the context\n")
    logs = []
    op = client.create_template("py-fromdir", tmp_path, on_log=logs.append)
    assert op.state == "succeeded"
    assert any(log.type == "done" for log in logs)
    assert "py-fromdir" in {t.name for t in client.list_templates()}
    sb = client.create_sandbox("py-fromdir")
    try:
        assert client.run(sb, "cat /greeting.txt /built.txt").stdout == b"hello from the context\nbuilt\n"
    finally:
        client.delete_sandbox(sb)


def test_tar_bytes_and_a_bad_file(client):
    def tar_of(files):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            for name, text in files.items():
                data = text.encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    op = client.create_template("py-fromtar", tar_of({"build/Cove.file": "FROM tiny\nENV WHO=tar\n"}), file="build/Cove.file")
    assert op.state == "succeeded"
    # Build arguments replace an ARG's default; ENV expands against the parent's PATH.
    op = client.create_template(
        "py-args",
        tar_of({"Dockerfile": "FROM tiny\nARG WHO=nobody\nENV WHO=$WHO PATH=/opt/x:$PATH\n"}),
        build_args={"WHO": "arg"},
    )
    assert op.state == "succeeded"
    env = client.get_template("py-args").defaults["env"]
    assert env["WHO"] == "arg"
    assert env["PATH"].startswith("/opt/x:/usr/local/sbin:"), env["PATH"]
    with pytest.raises(cove.CoveError) as err:
        client.create_template("py-bad", tar_of({"Dockerfile": "FROM tiny\nFROBNICATE everything\n"}))
    assert err.value.code == "invalid_argument"
    assert "2" in err.value.message
    with pytest.raises(ValueError):
        client.create_template("py-nodir", "/nonexistent/context/dir")


def test_async_create_template(server, build_logs, tmp_path):
    (tmp_path / "Dockerfile").write_text("FROM tiny\nRUN echo async > /a.txt\n")

    async def go():
        async with cove.AsyncClient(server.url, server.token) as c:
            seen = []
            op = await c.create_template("py-async-tpl", tmp_path, on_log=seen.append)
            assert op.state == "succeeded" and seen

    asyncio.run(go())
