"""E2B sync SDK: sandbox lifecycle (create, connect, get, list, kill, timeouts, pause)."""

import datetime
import json
import time
import uuid

import pytest
from e2b import Sandbox, SandboxQuery, SandboxState
from e2b.exceptions import AuthenticationException, NotFoundException, SandboxException


def test_create_get_info_and_kill():
    tag = uuid.uuid4().hex
    sbx = Sandbox.create(metadata={"case": tag}, envs={"FOO": "bar"}, timeout=120)
    try:
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.state == SandboxState.RUNNING
        assert info.metadata == {"case": tag}
        assert info.name == "base"
        assert (info.end_at - info.started_at).total_seconds() == pytest.approx(120, abs=5)
        assert sbx.is_running()
        assert sbx.commands.run("echo $FOO").stdout == "bar\n"
    finally:
        assert sbx.kill() is True
    assert sbx.kill() is False
    assert not sbx.is_running()
    with pytest.raises(NotFoundException):
        Sandbox.get_info(sbx.sandbox_id)


def test_with_block_kills():
    with Sandbox.create() as sbx:
        sid = sbx.sandbox_id
        assert sbx.commands.run("true").exit_code == 0
    assert Sandbox.kill(sid) is False


def test_list_filters_and_pages():
    tag = uuid.uuid4().hex
    boxes = [Sandbox.create(metadata={"list": tag, "n": str(i)}) for i in range(3)]
    try:
        paginator = Sandbox.list(query=SandboxQuery(metadata={"list": tag}), limit=1)
        seen = []
        pages = 0
        while paginator.has_next:
            items = paginator.next_items()
            pages += 1
            assert len(items) <= 1
            seen.extend(i.sandbox_id for i in items)
        assert sorted(seen) == sorted(b.sandbox_id for b in boxes)
        assert pages == 3
        assert paginator.next_token is None
        one = Sandbox.list(query=SandboxQuery(metadata={"list": tag, "n": "1"})).next_items()
        assert [i.sandbox_id for i in one] == [boxes[1].sandbox_id]
        paused = Sandbox.list(
            query=SandboxQuery(metadata={"list": tag}, state=[SandboxState.PAUSED])
        ).next_items()
        assert paused == []
    finally:
        for b in boxes:
            b.kill()


def test_connect_and_extend():
    sbx = Sandbox.create(timeout=30)
    try:
        again = Sandbox.connect(sbx.sandbox_id, timeout=200)
        assert again.sandbox_id == sbx.sandbox_id
        assert again.commands.run("echo again").stdout == "again\n"
        info = sbx.get_info()
        assert (info.end_at - info.started_at).total_seconds() > 150
        # connect never shortens
        Sandbox.connect(sbx.sandbox_id, timeout=10)
        assert (sbx.get_info().end_at - info.end_at).total_seconds() >= -1
    finally:
        sbx.kill()


def test_set_timeout_expires():
    sbx = Sandbox.create(timeout=120)
    sbx.set_timeout(2)
    time.sleep(5)
    assert not sbx.is_running()
    with pytest.raises(NotFoundException):
        sbx.get_info()


def test_create_timeout_expires():
    sbx = Sandbox.create(timeout=2)
    assert sbx.is_running()
    time.sleep(5)
    assert not sbx.is_running()


def test_pause_and_resume_keep_files():
    sbx = Sandbox.create()
    try:
        sbx.files.write("/home/user/kept.txt", "still here")
        assert sbx.pause() is True
        assert not sbx.is_running()
        assert sbx.get_info().state == SandboxState.PAUSED
        assert sbx.pause() is False
        resumed = Sandbox.connect(sbx.sandbox_id)
        assert resumed.is_running()
        assert resumed.files.read("/home/user/kept.txt") == "still here"
        assert resumed.commands.run("echo back").stdout == "back\n"
    finally:
        sbx.kill()


def test_unknown_sandbox_and_bad_key():
    with pytest.raises(NotFoundException):
        Sandbox.get_info("doesnotexist0000")
    with pytest.raises(NotFoundException):
        Sandbox.connect("doesnotexist0000")
    with pytest.raises(AuthenticationException):
        Sandbox.create(api_key="not-a-cove-token")


def test_no_internet_access_closes_the_network():
    sbx = Sandbox.create(allow_internet_access=False)
    try:
        # DNS answers nothing and no connection leaves the sandbox.
        r = sbx.commands.run(
            "python3 -c \"import socket; socket.gethostbyname('example.com')\" 2>&1 || echo refused"
        )
        assert r.stdout.strip().endswith("refused"), r.stdout
    finally:
        sbx.kill()
    open_sbx = Sandbox.create()
    try:
        assert open_sbx.commands.run("echo ok").stdout == "ok\n"
    finally:
        open_sbx.kill()


def test_unsupported_features_raise():
    with pytest.raises(SandboxException, match="not supported"):
        Sandbox.create(iam={"tokens": {"aws": {"audience": "a", "token_type": "JWT-SVID"}}})
    with pytest.raises(SandboxException, match="not supported"):
        Sandbox.create(network={"rules": {"api.example.com": [{"transform": {"headers": {"A": "b"}}}]}})


def test_metrics_come_from_the_sandboxs_usage():
    sbx = Sandbox.create()
    try:
        sbx.commands.run("head -c 20000000 /dev/zero > /tmp/fill")
        metrics = sbx.get_metrics()
        assert metrics, "at least the current reading"
        last = metrics[-1]
        info = sbx.get_info()
        assert last.cpu_count == info.cpu_count
        assert last.mem_total == info.memory_mb * 1024 * 1024
        assert 0 < last.mem_used <= last.mem_total
        assert last.disk_used >= 20_000_000, last
        assert 0 <= last.cpu_used_pct <= 100
        stamps = [m.timestamp for m in metrics]
        assert stamps == sorted(stamps)
        # A window after the last sample holds nothing.
        later = stamps[-1] + datetime.timedelta(hours=1)
        assert sbx.get_metrics(start=later) == []
    finally:
        sbx.kill()


def test_get_host_reaches_a_server_in_the_sandbox(cove):
    """`sandbox.get_host(port)` names `{port}-{id}.localhost:{e2b port}` by default, a URL a
    plain HTTP client opens as it is (curl, like browsers, resolves `*.localhost` to
    loopback); a request with that host on the E2B listener reaches the port (sandboxes made
    through E2B are public, as on E2B)."""
    import os
    import subprocess
    import urllib.error
    import urllib.request

    sbx = Sandbox.create()
    try:
        sbx.commands.run(
            "mkdir -p /tmp/www && echo hello-from-8000 > /tmp/www/index.html && "
            "cd /tmp/www && exec python3 -m http.server 8000",
            background=True,
        )
        host = sbx.get_host(8000)
        assert host == f"8000-{sbx.sandbox_id}.localhost:{cove.e2b_port}", host
        base = os.environ["E2B_SANDBOX_URL"]
        body, status = None, None
        for _ in range(100):
            req = urllib.request.Request(base + "/index.html", headers={"Host": host})
            try:
                with urllib.request.urlopen(req, timeout=5) as r:
                    status, body = r.status, r.read().decode()
                break
            except urllib.error.HTTPError as e:
                status = e.code
                if e.code != 502:
                    raise
                time.sleep(0.1)
        assert (status, body) == (200, "hello-from-8000\n")
        # The URL itself, with no header or override (issue 31, item 1).
        out = subprocess.run(
            ["curl", "-sS", "--max-time", "10", f"http://{host}/index.html"],
            capture_output=True, text=True,
        )
        assert out.stdout == "hello-from-8000\n", out.stderr
        # Nothing listening: the proxy's 502 in E2B's words.
        req = urllib.request.Request(base + "/", headers={"Host": sbx.get_host(8001)})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=5)
        assert err.value.code == 502
        assert json.loads(err.value.read()) == {
            "sandboxId": sbx.sandbox_id,
            "message": "The sandbox is running but port is not open",
            "port": 8001,
            "code": 502,
        }
    finally:
        sbx.kill()
