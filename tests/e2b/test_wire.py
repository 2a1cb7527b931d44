"""The compatibility listener's routing and envd's wire rules, checked with plain HTTP (what
SDK users never see directly but depend on): header and host routing, the access token,
Connect envelopes and end-of-stream frames, the proxy's 502s."""

import base64
import json
import os
import struct
import time

import httpx
import pytest
from e2b import Sandbox, SandboxState


@pytest.fixture(scope="module")
def sbx():
    s = Sandbox.create()
    yield s
    s.kill()


def url():
    return os.environ["E2B_SANDBOX_URL"]


def envd_headers(sbx, token=True):
    h = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}
    if token:
        h["X-Access-Token"] = sbx._envd_access_token
    return h


def frames(body):
    out = []
    while body:
        flags, n = struct.unpack(">BI", body[:5])
        out.append((flags, json.loads(body[5 : 5 + n])))
        body = body[5 + n :]
    return out


def test_health_by_header_and_by_host(sbx):
    assert httpx.get(f"{url()}/health", headers=envd_headers(sbx, token=False)).status_code == 204
    host = {"Host": f"49983-{sbx.sandbox_id}.e2b.test"}
    assert httpx.get(f"{url()}/health", headers=host).status_code == 204
    # REST /health without sandbox headers
    assert httpx.get(f"{url()}/health").status_code == 200


def test_missing_port_header_and_unknown_sandbox():
    r = httpx.get(f"{url()}/health", headers={"E2b-Sandbox-Id": "abc"})
    assert r.status_code == 400
    assert r.json()["message"] == "Missing header: E2b-Sandbox-Port"
    r = httpx.get(
        f"{url()}/health", headers={"E2b-Sandbox-Id": "nosuchsandbox000", "E2b-Sandbox-Port": "49983"}
    )
    assert r.status_code == 502
    assert r.json() == {
        "sandboxId": "nosuchsandbox000", "message": "The sandbox was not found", "code": 502
    }


def test_other_ports_are_not_forwarded(sbx):
    h = {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8080"}
    r = httpx.get(f"{url()}/", headers=h)
    assert r.status_code == 502
    assert "port is not open" in r.json()["message"]


def test_rpc_needs_the_access_token(sbx):
    r = httpx.post(
        f"{url()}/process.Process/List", headers=envd_headers(sbx, token=False), json={}
    )
    assert r.status_code == 401
    assert r.json()["message"].startswith("unauthorized access")
    r = httpx.post(f"{url()}/process.Process/List", headers=envd_headers(sbx), json={})
    assert r.status_code == 200
    assert "processes" in r.json()


def test_start_stream_frames(sbx):
    msg = json.dumps({"process": {"cmd": "/bin/bash", "args": ["-l", "-c", "echo wire; exit 2"]},
                      "stdin": False}).encode()
    body = struct.pack(">BI", 0, len(msg)) + msg
    h = dict(envd_headers(sbx), **{"Content-Type": "application/connect+json",
                                    "Connect-Protocol-Version": "1"})
    r = httpx.post(f"{url()}/process.Process/Start", headers=h, content=body, timeout=30)
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/connect+json"
    fs = frames(r.content)
    assert fs[0][1]["event"]["start"]["pid"] > 0
    out = b"".join(
        base64.b64decode(f["event"]["data"]["stdout"]) for _, f in fs if "data" in f.get("event", {})
    )
    assert out == b"wire\n"
    end = [f["event"]["end"] for _, f in fs if "end" in f.get("event", {})]
    assert end == [{"exitCode": 2, "exited": True, "status": "exit status 2",
                    "error": "exit status 2"}]
    assert fs[-1] == (2, {})


def test_unary_errors_are_connect_json(sbx):
    h = envd_headers(sbx)
    r = httpx.post(f"{url()}/filesystem.Filesystem/Stat", headers=h, json={"path": "/nope"})
    assert r.status_code == 404
    assert r.json() == {"code": "not_found", "message": "path '/nope' does not exist"}
    r = httpx.post(f"{url()}/process.Process/SendSignal", headers=h,
                   json={"process": {"pid": 999999}, "signal": "SIGNAL_SIGKILL"})
    assert r.status_code == 404
    assert r.json()["message"] == "process with pid 999999 not found"


def test_rest_errors_are_json_with_int_codes():
    key = {"X-API-Key": os.environ["E2B_API_KEY"]}
    r = httpx.get(f"{os.environ['E2B_API_URL']}/sandboxes/doesnotexist0000", headers=key)
    assert r.status_code == 404 and r.json()["code"] == 404
    r = httpx.get(f"{os.environ['E2B_API_URL']}/sandboxes/x", headers={"X-API-Key": "wrong"})
    assert r.status_code == 401 and r.json() == {"code": 401, "message": "invalid API key"}
    for path in ("/templates", "/secrets", "/v3/templates", "/templates/base"):
        r = httpx.get(f"{os.environ['E2B_API_URL']}{path}", headers=key)
        assert r.status_code == 501, path
        assert "not supported" in r.json()["message"]
    r = httpx.get(f"{os.environ['E2B_API_URL']}/snapshots", headers=key)
    assert r.status_code == 200 and isinstance(r.json(), list)
    r = httpx.delete(f"{os.environ['E2B_API_URL']}/templates/no-such-thing", headers=key)
    assert r.status_code == 404 and r.json()["code"] == 404


def test_timeout_with_auto_pause():
    """A timeout pause keeps memory as `pause()` does: a background process carries on."""
    s = Sandbox.create(timeout=4, lifecycle={"on_timeout": "pause"})
    try:
        s.files.write("/home/user/p.txt", "paused at timeout")
        server = s.commands.run("sleep 600", background=True)
        deadline = time.time() + 30
        while time.time() < deadline and s.get_info().state != SandboxState.PAUSED:
            time.sleep(0.5)
        assert s.get_info().state == SandboxState.PAUSED
        back = Sandbox.connect(s.sandbox_id)
        assert back.files.read("/home/user/p.txt") == "paused at timeout"
        alive = back.commands.run(f"kill -0 {server.pid} && echo alive")
        assert alive.stdout.strip() == "alive"
    finally:
        s.kill()


def test_unknown_template():
    with pytest.raises(Exception, match="template no-such-template not found"):
        Sandbox.create(template="no-such-template")
