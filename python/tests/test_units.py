"""Parts of the SDK that need no server: error mapping, SSE parsing, resumable offsets."""

from __future__ import annotations

import base64
import json

import cove
from cove import _core, _streams
from cove.errors import from_answer


def test_error_answers_map_to_typed_exceptions():
    err = from_answer(404, b'{"code":"sandbox_not_found","message":"no sandbox sb-1","request_id":"r-1"}')
    assert isinstance(err, cove.NotFound)
    assert (err.code, err.message, err.request_id, err.status) == ("sandbox_not_found", "no sandbox sb-1", "r-1", 404)
    assert isinstance(from_answer(409, b'{"code":"sandbox_not_running","message":"","request_id":"r"}'), cove.SandboxNotRunning)
    assert isinstance(from_answer(409, b'{"code":"sandbox_not_running","message":"","request_id":"r"}'), cove.Conflict)
    odd = from_answer(502, b"<html>bad gateway</html>")
    assert (type(odd), odd.code, odd.request_id) == (cove.CoveError, "http_502", None)
    assert "bad gateway" in odd.message


def test_operation_failed_names_the_operations_error():
    op = cove.Operation.from_json(
        {
            "id": "op-1", "kind": "create_sandbox", "state": "failed", "sandbox_id": "sb-1",
            "template": None, "release": None, "progress": None,
            "error": {"code": "unavailable", "message": "runc failed"},
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00.123456789Z",
            "deadline": "2026-01-01T00:30:00Z",
        }
    )
    err = cove.OperationFailed(op)
    assert (err.code, err.message, err.operation) == ("unavailable", "runc failed", op)
    assert op.updated_at.microsecond == 123456


def test_sse_parser():
    parser = _streams.SseParser()
    lines = [": keep-alive", "event: stdout", "id: 3", "data: {\"a\":", "data: 1}", "", "", "data: x", ""]
    got = [ev for ev in map(parser.line, lines) if ev]
    assert got == [("stdout", '{"a":\n1}', "3"), ("message", "x", "3")]


def test_attach_cursor_skips_bytes_already_seen():
    att = cove.Attachment("http://dp/v1/attach/c1", "tok", None)
    cursor = _streams.AttachCursor(att, offset=3)
    assert cursor.request().params == [("offset", "3")]
    data = json.dumps({"offset": 0, "len": 5, "data": base64.b64encode(b"hello").decode()})
    out = cursor.on_event("stdout", data)
    assert (out.offset, out.data) == (3, b"lo")
    assert cursor.offset == 5
    assert cursor.on_event("stdout", data) is None
    gap = cursor.on_event("gap", '{"offset": 5, "len": 10}')
    assert (gap.offset, gap.len, cursor.offset) == (5, 10, 15)


def test_command_request_shapes():
    assert _core.command_request("echo hi")["shell"] == "echo hi"
    assert _core.command_request(["ls", "-l"])["argv"] == ["ls", "-l"]
    assert "shell" in _core.command_request(None, pty=True)


def test_pty_urls_use_websocket_schemes():
    att = cove.Attachment("http://127.0.0.1:7701/v1/attach/c1", "tok", None)
    assert _streams.pty_url(att, 5) == "ws://127.0.0.1:7701/v1/attach/c1/pty?offset=5"


def test_token_from_the_data_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("COVE_TOKEN", raising=False)
    monkeypatch.setenv("COVE_DATA_DIR", str(tmp_path))
    (tmp_path / "admin.token").write_text("secret\n")
    assert _core.default_token() == "secret"
    monkeypatch.setenv("COVE_TOKEN", "env-token")
    assert _core.default_token() == "env-token"


def test_times_with_fractions_keep_their_zone():
    from cove.types import _time

    t = _time("2026-01-01T00:00:00.123456789Z")
    assert t.tzinfo is not None and t.utcoffset().total_seconds() == 0
    assert t.microsecond == 123456
    assert _time("2026-01-01T00:00:00Z").tzinfo is not None


def test_network_types_round_trip():
    p = cove.NetworkPolicy.from_json({"internet": False, "allow": ["*.a.test"], "deny": [], "new": 1})
    assert p == cove.NetworkPolicy(internet=False, allow=["*.a.test"], deny=[])
    assert p.to_json() == {"internet": False, "allow": ["*.a.test"], "deny": []}
    net = cove.SandboxNetwork.from_json(
        {
            "sandbox_id": "sb-1",
            "network": {"internet": True, "allow": [], "deny": ["10.0.0.0/8"]},
            "enforced": True,
            "address": "10.239.0.2",
            "counters": {"bytes_in": 5, "connections_denied": 2},
        }
    )
    assert net.network.deny == ["10.0.0.0/8"] and net.counters.bytes_in == 5
    assert net.counters.connections_denied == 2 and net.counters.bytes_out == 0


def test_expiry_requests_and_answers():
    from datetime import datetime, timezone

    call = _core.set_expiry("sb-1", 60, on_expiry="suspend")
    req = next(call)
    assert (req.method, req.path, req.json) == ("PUT", "/v1/sandboxes/sb-1/expiry", {"in_s": 60, "on_expiry": "suspend"})
    at = datetime(2030, 1, 1, tzinfo=timezone.utc)
    req = next(_core.set_expiry("sb-1", at=at))
    assert req.json == {"expires_at": "2030-01-01T00:00:00+00:00"}
    for bad in ({}, {"in_s": 5, "at": at}):
        try:
            next(_core.set_expiry("sb-1", **bad))
        except ValueError:
            pass
        else:
            raise AssertionError(bad)
    assert next(_core.clear_expiry("sb-1")).method == "DELETE"
    req = next(_core.create_sandbox(ttl_s=30, on_expiry="suspend"))
    assert req.json == {"ttl_s": 30, "on_expiry": "suspend"}
    base = {
        "id": "sb-1", "template": "base", "release": 1, "state": "running", "state_reason": None,
        "runtime": "runc", "resources": {"vcpus": 1, "memory_mib": 512, "pids_max": 1024},
        "env": {}, "metadata": {}, "cwd": "/", "user": "user",
        "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
    }
    s = cove.Sandbox.from_json(base)
    assert (s.expires_at, s.on_expiry) == (None, "delete")
    s = cove.Sandbox.from_json({**base, "expires_at": "2026-01-01T00:05:00Z", "on_expiry": "suspend"})
    assert s.expires_at == datetime(2026, 1, 1, 0, 5, tzinfo=timezone.utc)
    assert s.on_expiry == "suspend"
