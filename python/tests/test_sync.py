"""The synchronous client against a real server: sandboxes, lifecycle, commands (streaming,
reattach, stdin, signals, PTY), files (one, many, directories), templates, events, errors."""

from __future__ import annotations

import os
import stat
import time

import httpx
import pytest

import cove


def test_templates_and_build_log(client, build_logs):
    assert build_logs, "the build streamed no log"
    assert build_logs[-1].type == "done"
    assert build_logs[-1].operation.state == "succeeded"
    names = {t.name: t for t in client.list_templates()}
    assert names["tiny"].latest_release is not None
    tiny = client.get_template("tiny")
    assert any(r.state == "ready" for r in tiny.releases)


def test_sandbox_crud_and_metadata_filter(client):
    a = client.create_sandbox("tiny", metadata={"team": "red", "suite": "python"}, resources={"memory_mib": 256})
    b = client.create_sandbox("tiny", metadata={"team": "blue", "suite": "python"})
    try:
        assert a.state == "running"
        assert a.resources.memory_mib == 256
        assert client.get_sandbox(a.id).metadata == {"team": "red", "suite": "python"}
        red = client.list_sandboxes(metadata={"team": "red"})
        assert [s.id for s in red] == [a.id]
        both = {s.id for s in client.list_sandboxes(metadata={"suite": "python"})}
        assert {a.id, b.id} <= both
        assert client.list_sandboxes(metadata={"team": "green"}) == []
        assert {a.id, b.id} <= {s.id for s in client.list_sandboxes(state="running", template="tiny")}
    finally:
        client.delete_sandbox(a)
        client.delete_sandbox(b)
    with pytest.raises(cove.NotFound) as err:
        client.get_sandbox(a.id)
    assert err.value.code == "sandbox_not_found"
    assert err.value.status == 404
    assert err.value.request_id


def test_lifecycle_waits_for_operations(client, sandbox):
    op = client.pause(sandbox)
    assert (op.kind, op.state) == ("pause_sandbox", "succeeded")
    assert client.get_sandbox(sandbox).state == "paused"
    with pytest.raises(cove.SandboxNotRunning) as err:
        client.run(sandbox, "true")
    assert err.value.code == "sandbox_not_running"
    client.resume(sandbox)
    client.write_file(sandbox, "/tmp/kept", b"files survive a suspend")
    op = client.suspend(sandbox)
    assert op.state == "succeeded"
    assert client.get_sandbox(sandbox).state == "suspended"
    client.wake(sandbox)
    woken = client.get_sandbox(sandbox)
    assert woken.state == "running"
    assert woken.memory_restored is False
    assert client.read_file(sandbox, "/tmp/kept") == b"files survive a suspend"
    ops = client.list_operations(sandbox)
    assert {"pause_sandbox", "resume_sandbox", "suspend_sandbox", "wake_sandbox"} <= {o.kind for o in ops}
    # Pausing an already paused sandbox is a no-op; resuming a running one too.
    assert client.resume(sandbox).state == "succeeded"
    assert client.get_operation(op.id).id == op.id


def test_run_streams_output_as_it_arrives(client, sandbox):
    seen = []
    t0 = time.monotonic()
    result = client.run(
        sandbox,
        "for i in 1 2 3; do echo line $i; sleep 0.4; done; echo oops >&2; exit 3",
        on_stdout=lambda b: seen.append((time.monotonic() - t0, b)),
        on_stderr=lambda b: seen.append((time.monotonic() - t0, b)),
    )
    assert result.exit_code == 3
    assert not result.ok
    assert result.stdout == b"line 1\nline 2\nline 3\n"
    assert result.stderr == b"oops\n"
    total = time.monotonic() - t0
    first = seen[0][0]
    # The first line came long before the command ended: it was streamed, not buffered.
    assert first < total - 0.6, (first, total)
    assert result.command.state == "exited"


def test_argv_env_cwd_user(client, sandbox):
    result = client.run(sandbox, ["sh", "-c", 'echo "$GREETING $(pwd) $(id -u)"'], env={"GREETING": "hey"}, cwd="/tmp", user="root")
    assert result.text == "hey /tmp 0\n"


def test_reattach_from_an_offset(client, sandbox):
    handle = client.start(sandbox, "printf abcdef; sleep 0.5; printf ghij")
    first = handle.wait()
    assert first.stdout == b"abcdefghij"
    again = client.attach(sandbox, handle.id, offset=3)
    rest = again.wait()
    assert rest.stdout == b"defghij"
    assert rest.command.exit_code == 0
    # The handle's own offset moves with what it read.
    assert again.offset == 10


def test_stdout_bytes_are_raw_and_resume_from_a_stdout_offset(client, sandbox):
    every = bytes(range(256))
    client.write_file(sandbox, "/tmp/every", every)
    handle = client.start(sandbox, "cat /tmp/every; echo err >&2; cat /tmp/every; exit 4")
    got = b"".join(handle.stdout_bytes())
    assert got == every + every
    assert handle.command.exit_code == 4
    assert b"".join(handle.stdout_bytes(offset=300)) == (every + every)[300:]
    # One binary stream per command at a time.
    slow = client.start(sandbox, "printf a; sleep 1; printf b")
    first = slow.stdout_bytes()
    assert next(first) == b"a"
    with pytest.raises(cove.Conflict) as err:
        next(slow.stdout_bytes())
    assert err.value.code == "failed_precondition"
    assert b"".join(first) == b"b"


def test_a_retried_start_with_a_key_is_the_same_command(client, sandbox):
    first = client.start(sandbox, "echo once >> /home/user/once", idempotency_key="py-once")
    again = client.start(sandbox, "echo once >> /home/user/once", idempotency_key="py-once")
    assert again.id == first.id
    assert again.wait().command.exit_code == 0
    assert client.run(sandbox, "cat /home/user/once").stdout == b"once\n"
    with pytest.raises(cove.Conflict) as err:
        client.start(sandbox, "echo other", idempotency_key="py-once")
    assert err.value.code == "idempotency_mismatch"


def test_reattach_while_running_resumes_exactly(client, sandbox):
    handle = client.start(sandbox, "for i in $(seq 1 20); do echo $i; sleep 0.05; done")
    got = bytearray()
    for item in handle.output():
        got += item.data
        if len(got) >= 6:
            break
    later = client.attach(sandbox, handle.id, offset=handle.offset)
    rest = later.wait()
    assert bytes(got) + rest.stdout == b"".join(f"{i}\n".encode() for i in range(1, 21))


def test_stdin(client, sandbox):
    result = client.run(sandbox, "tr a-z A-Z", stdin=b"hello stdin\n")
    assert result.stdout == b"HELLO STDIN\n"
    handle = client.start(sandbox, ["cat"], stdin=True)
    handle.write_stdin("one ")
    handle.write_stdin(b"two")
    handle.close_stdin()
    assert handle.wait().stdout == b"one two"


def test_signals_kill_and_list(client, sandbox):
    handle = client.start(sandbox, ["sleep", "100"])
    running = {c.id: c for c in client.list_commands(sandbox, state="running")}
    assert handle.id in running
    handle.signal("SIGTERM")
    ended = handle.wait().command
    assert ended.exit_code is None and ended.signal == "SIGTERM"
    other = client.start(sandbox, ["sleep", "100"])
    gone = other.kill(grace_ms=100)
    assert gone.state == "exited"
    out = client.command_output(sandbox, handle.id)
    assert out.command.id == handle.id
    client.forget_command(sandbox, handle.id)
    with pytest.raises(cove.NotFound):
        client.get_command(sandbox, handle.id)


def test_timeout_is_reported(client, sandbox):
    result = client.run(sandbox, ["sleep", "10"], timeout_s=0.5)
    assert result.command.timed_out


def test_pty_session(client, sandbox):
    with client.pty(sandbox, "sh", cols=100, rows=30) as session:
        session.send("stty size; echo pty-ok; exit 4\n")
        result = session.wait(timeout=30)
    assert b"30 100" in result.stdout
    assert b"pty-ok" in result.stdout
    assert result.command.exit_code == 4
    assert result.command.pty


def test_files_one_at_a_time(client, sandbox):
    info = client.write_file(sandbox, "/home/user/a/b/hello.txt", "hi there", mode=0o640)
    assert (info.type, info.size, info.mode & 0o777) == ("file", 8, 0o640)
    assert client.read_file(sandbox, "/home/user/a/b/hello.txt") == b"hi there"
    assert client.read_file(sandbox, "/home/user/a/b/hello.txt", offset=3, length=2) == b"th"
    assert client.file_exists(sandbox, "/home/user/a/b/hello.txt")
    assert client.stat_file(sandbox, "/home/user/a/b").type == "dir"
    client.make_dir(sandbox, "/home/user/c/d")
    client.move_file(sandbox, "/home/user/a/b/hello.txt", "/home/user/c/d/moved.txt")
    names = {e.path for e in client.list_files(sandbox, "/home/user", depth=3)}
    assert "/home/user/c/d/moved.txt" in names
    client.remove_file(sandbox, "/home/user/c")
    assert not client.file_exists(sandbox, "/home/user/c")
    with pytest.raises(cove.NotFound) as err:
        client.read_file(sandbox, "/nope")
    assert err.value.code == "file_not_found"
    # A big file streams from a file object.
    blob = os.urandom(3 << 20)
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"cove-py-blob-{os.getpid()}")
    with open(path, "wb") as f:
        f.write(blob)
    try:
        with open(path, "rb") as f:
            assert client.write_file(sandbox, "/tmp/blob", f).size == len(blob)
    finally:
        os.remove(path)
    assert client.read_file(sandbox, "/tmp/blob") == blob


def test_files_many_and_directories(client, sandbox, tmp_path):
    # File operations run as the sandbox's user: uploads go where `user` may write.
    written = client.upload_files(sandbox, {"/home/user/data/x.txt": b"x", "/home/user/data/sub/y.txt": "why", "rel.txt": b"home"})
    assert [f.path for f in written] == ["/home/user/data/x.txt", "/home/user/data/sub/y.txt", "/home/user/rel.txt"]
    with pytest.raises(cove.PermissionDenied):
        client.upload_files(sandbox, {"/data/x.txt": b"x"})
    src = tmp_path / "src"
    (src / "deep" / "er").mkdir(parents=True)
    (src / "empty").mkdir()
    (src / "top.txt").write_bytes(b"top")
    (src / "deep" / "er" / "run.sh").write_bytes(b"#!/bin/sh\necho ran\n")
    os.chmod(src / "deep" / "er" / "run.sh", 0o755)
    up = client.upload_dir(sandbox, src, "/home/user/tree")
    assert sorted(f.path for f in up) == ["/home/user/tree/deep/er/run.sh", "/home/user/tree/top.txt"]
    assert client.run(sandbox, ["/home/user/tree/deep/er/run.sh"]).stdout == b"ran\n"
    assert client.stat_file(sandbox, "/home/user/tree/empty").type == "dir"
    client.run(sandbox, "ln -s top.txt /home/user/tree/link")
    dst = tmp_path / "dst"
    client.download_dir(sandbox, "/home/user/tree", dst)
    assert (dst / "top.txt").read_bytes() == b"top"
    assert (dst / "deep" / "er" / "run.sh").read_bytes() == b"#!/bin/sh\necho ran\n"
    assert stat.S_IMODE(os.stat(dst / "deep" / "er" / "run.sh").st_mode) == 0o755
    assert (dst / "empty").is_dir()
    assert os.readlink(dst / "link") == "top.txt"


def test_watch_files(client, sandbox):
    client.make_dir(sandbox, "/tmp/watched")
    events = client.watch(sandbox, "/tmp/watched", recursive=True)
    client.start(sandbox, "sleep 0.5; echo x > /tmp/watched/new.txt")
    for ev in events:
        if ev.path == "/tmp/watched/new.txt":
            assert ev.event in ("create", "write")
            break
    events.close()


def test_events_stream(client, sandbox):
    seen = []
    for ev in client.events(after=0):
        seen.append(ev)
        if ev.sandbox_id == sandbox.id:
            break
    assert seen[-1].sandbox_id == sandbox.id
    assert all(a.seq < b.seq for a, b in zip(seen, seen[1:]))


def test_errors_carry_code_and_request_id(client, server, sandbox):
    with pytest.raises(cove.InvalidArgument) as err:
        client.create_sandbox("tiny", resources={"memory_mib": 1})
    assert err.value.code == "invalid_argument" and err.value.request_id
    with pytest.raises(cove.NotFound) as err:
        client.create_sandbox("no-such-template")
    assert err.value.code == "template_not_found"
    with pytest.raises(cove.Unauthorized) as err:
        cove.Client(server.url, "wrong-token").list_sandboxes()
    assert err.value.status == 401 and err.value.request_id
    with pytest.raises(cove.TransportError):
        cove.Client("http://127.0.0.1:9", "t", timeout=2).list_sandboxes()
    with pytest.raises(ValueError):
        client.start(sandbox, None)


def test_every_error_body_is_json(client, server, sandbox):
    """Extractor rejections too: multipart with a wrong content type, a WebSocket route asked
    without an upgrade (on the data plane), a bad path segment."""
    auth = {"Authorization": f"Bearer {server.token}"}
    handle = client.start(sandbox, ["sleep", "30"])
    cases = [
        httpx.get(handle.attachment.url + "/pty", headers={"Authorization": f"Bearer {handle.attachment.token}"}),
        httpx.post(
            f"{server.url}/v1/sandboxes/{sandbox.id}/files:upload",
            headers={**auth, "Content-Type": "text/plain"},
            content=b"not multipart",
        ),
        httpx.post(
            f"{server.url}/v1/sandboxes/{sandbox.id}/files:upload",
            headers={**auth, "Content-Type": "multipart/form-data"},
            content=b"no boundary",
        ),
        httpx.get(f"{server.url}/v1/sandboxes/%FF", headers=auth),
    ]
    for resp in cases:
        assert 400 <= resp.status_code < 500, (resp.status_code, resp.text)
        assert resp.headers["content-type"].startswith("application/json"), resp.text
        body = resp.json()
        assert set(body) == {"code", "message", "request_id"}, body
        assert body["request_id"] == resp.headers["x-request-id"]
    handle.kill(grace_ms=0)


def test_create_without_waiting_then_delete(client):
    created = client.create_sandbox("tiny", wait=False)
    op = client.delete_sandbox(created, wait=False)
    final = client.wait_operation(op.id)
    assert final.state == "succeeded"
    with pytest.raises(cove.NotFound):
        client.delete_sandbox(created)


def test_sandbox_metrics(client):
    sb = client.create_sandbox("tiny", resources={"memory_mib": 256})
    try:
        client.run(sb, "dd if=/dev/zero of=/root/fill bs=1M count=2 2>/dev/null; sync", user="root")
        m = client.sandbox_metrics(sb)
        assert isinstance(m, cove.SandboxMetrics)
        assert m.sandbox_id == sb.id
        assert m.interval_s == 5
        assert m.current.memory.limit_bytes == 256 << 20
        assert 0 < m.current.memory.bytes <= 256 << 20
        assert m.current.cpu.usage_us > 0
        assert m.current.disk.used_bytes >= 2 << 20
        # Every sandbox has a disk of its own by default (`--default-disk-mib`); its
        # filesystem's size is a little under the size asked for (ext4's own metadata).
        asked = sb.resources.disk_mib
        if asked is None:
            assert m.current.disk.limit_bytes is None
        else:
            assert 0.9 * asked * 2**20 <= m.current.disk.limit_bytes <= asked * 2**20
        assert m.current.network is None
        assert m.current.at.tzinfo is not None
    finally:
        client.delete_sandbox(sb)
    with pytest.raises(cove.NotFound) as err:
        client.sandbox_metrics(sb)
    assert err.value.code == "sandbox_not_found"


def test_network_policy_on_create_get_and_put(client):
    caps = client.capabilities()
    if not caps.network:
        pytest.skip("sandbox networks are off on this server")
    sb = client.create_sandbox("tiny", network=cove.NetworkPolicy(internet=False, allow=["pypi.org"]))
    try:
        assert sb.network == cove.NetworkPolicy(internet=False, allow=["pypi.org"], deny=[])
        net = client.network(sb)
        assert net.enforced and net.address
        assert net.network.allow == ["pypi.org"]
        assert net.counters.connections_allowed == 0
        changed = client.set_network(sb, deny=["10.0.0.0/8"])
        assert changed.network == cove.NetworkPolicy(internet=True, allow=[], deny=["10.0.0.0/8"])
        assert client.get_sandbox(sb).network.deny == ["10.0.0.0/8"]
        with pytest.raises(cove.InvalidArgument) as err:
            client.set_network(sb, allow=["10.0.0.0/33"])
        assert "10.0.0.0/33" in err.value.message
    finally:
        client.delete_sandbox(sb)


def test_ports_public_and_one_time_links(client):
    sb = client.create_sandbox("tiny", public=True)
    try:
        assert sb.public
        ports = client.ports(sb)
        assert ports.public and ports.sandbox_id == sb.id and len(ports.token) == 32
        assert ports.host is not None and ports.host.startswith("{port}-" + sb.id + ".localhost:")
        assert ports.url(8000, "/x") == "http://" + ports.host.replace("{port}", "8000") + "/x"
        assert not client.set_ports(sb, public=False).public
        assert not client.get_sandbox(sb).public
        link = client.port_link(sb, 8000, path="/app")
        assert link.port == 8000 and link.sandbox_id == sb.id
        assert link.url.startswith(ports.url(8000, "/app") + "?cove_link=")
        with pytest.raises(cove.InvalidArgument):
            client.port_link(sb, 0)
    finally:
        client.delete_sandbox(sb)


def test_capabilities_state_the_retention(client):
    caps = client.capabilities()
    # The server under test runs with the defaults: 7 days, 7 days, 1 day, kept, 90 days.
    assert caps.retention == {
        "operations_s": 7 * 86400,
        "events_s": 7 * 86400,
        "commands_s": 86400,
        "snapshots_s": None,
        "audit_s": 90 * 86400,
    }


def test_a_create_names_the_servers_runtime_or_is_refused(client):
    runtime = client.capabilities().runtime
    sb = client.create_sandbox("tiny", runtime=runtime)
    try:
        assert sb.runtime == runtime
    finally:
        client.delete_sandbox(sb)
    with pytest.raises(cove.InvalidArgument) as err:
        client.create_sandbox("tiny", runtime="no-such-runtime")
    assert err.value.code == "invalid_argument"
