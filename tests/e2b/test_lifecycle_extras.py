"""Auto-resume, refreshes, metrics of several sandboxes at once, sandbox logs, and what still
answers "unsupported", through the E2B SDK (the generated client where the SDK's classes have
no method for an endpoint), sync and async."""

import asyncio
import datetime
import time

import pytest
from e2b import AsyncSandbox, CommandExitException, Sandbox, SandboxState
from e2b.api.client.api.sandboxes import (
    get_sandboxes_metrics,
    get_sandboxes_sandbox_id_logs,
    get_v_2_sandboxes_sandbox_id_logs,
    post_sandboxes_sandbox_id_refreshes,
)
from e2b.api.client.models import LogLevel, LogsDirection, SandboxRefreshRequest
from e2b.api.client_async import get_api_client as get_async_api_client
from e2b.api.client_sync import get_api_client
from e2b.connection_config import ConnectionConfig
from e2b.exceptions import SandboxException


def api():
    return get_api_client(ConnectionConfig())


def test_auto_resume_wakes_a_paused_sandbox_for_traffic():
    sbx = Sandbox.create(lifecycle={"on_timeout": "pause", "auto_resume": True})
    plain = Sandbox.create(lifecycle={"on_timeout": "pause"})
    try:
        assert sbx.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": True}
        assert plain.get_info().lifecycle == {"on_timeout": "pause", "auto_resume": False}
        sbx.files.write("/home/user/kept.txt", "kept")
        assert sbx.pause() is True
        assert sbx.get_info().state == SandboxState.PAUSED
        # The next envd request wakes it.
        assert sbx.files.read("/home/user/kept.txt") == "kept"
        assert sbx.get_info().state == SandboxState.RUNNING
        assert sbx.commands.run("echo awake").stdout == "awake\n"
        info = sbx.get_info()
        assert (info.end_at - datetime.datetime.now(datetime.timezone.utc)).total_seconds() > 200

        # Without auto-resume, traffic to a paused sandbox fails and leaves it paused.
        assert plain.pause() is True
        with pytest.raises(Exception):
            plain.commands.run("true", request_timeout=30)
        assert plain.get_info().state == SandboxState.PAUSED
    finally:
        sbx.kill()
        plain.kill()


async def test_async_auto_resume_after_the_timeout_pauses_it():
    sbx = await AsyncSandbox.create(timeout=3, lifecycle={"on_timeout": "pause", "auto_resume": True})
    try:
        await sbx.files.write("/home/user/t.txt", "timed out")
        deadline = time.time() + 30
        while time.time() < deadline and (await sbx.get_info()).state != SandboxState.PAUSED:
            await asyncio.sleep(0.5)
        assert (await sbx.get_info()).state == SandboxState.PAUSED
        assert await sbx.files.read("/home/user/t.txt") == "timed out"
        assert (await sbx.get_info()).state == SandboxState.RUNNING
    finally:
        await sbx.kill()


def test_refresh_extends_and_never_shortens():
    sbx = Sandbox.create(timeout=20)
    try:
        before = sbx.get_info().end_at
        r = post_sandboxes_sandbox_id_refreshes.sync_detailed(
            sbx.sandbox_id, client=api(), body=SandboxRefreshRequest(duration=600)
        )
        assert r.status_code == 204
        after = sbx.get_info().end_at
        assert (after - before).total_seconds() > 500
        r = post_sandboxes_sandbox_id_refreshes.sync_detailed(
            sbx.sandbox_id, client=api(), body=SandboxRefreshRequest(duration=30)
        )
        assert r.status_code == 204
        assert sbx.get_info().end_at == after
        r = post_sandboxes_sandbox_id_refreshes.sync_detailed(
            "doesnotexist0000", client=api(), body=SandboxRefreshRequest()
        )
        assert r.status_code == 404
    finally:
        sbx.kill()


def test_metrics_of_several_sandboxes_at_once():
    a, b = Sandbox.create(), Sandbox.create()
    try:
        b.pause()
        r = get_sandboxes_metrics.sync_detailed(
            client=api(), sandbox_ids=[a.sandbox_id, b.sandbox_id, "doesnotexist0000"]
        )
        assert r.status_code == 200
        got = r.parsed.sandboxes
        # Only the running one has a reading.
        assert list(got) == [a.sandbox_id]
        m = got[a.sandbox_id]
        assert m["cpuCount"] == a.get_info().cpu_count
        assert 0 < m["memUsed"] <= m["memTotal"]
        assert m["timestampUnix"] >= int(time.time()) - 60
    finally:
        a.kill()
        b.kill()


def test_logs_are_the_sandboxs_commands():
    sbx = Sandbox.create()
    try:
        sbx.commands.run("echo one")
        with pytest.raises(CommandExitException):
            sbx.commands.run("exit 3")
        r = get_sandboxes_sandbox_id_logs.sync_detailed(sbx.sandbox_id, client=api())
        assert r.status_code == 200
        lines = [log.line for log in r.parsed.logs]
        assert lines[0] == "sandbox created from template base"
        assert "process ended: exit status 0" in lines
        assert "process ended: exit status 3" in lines
        assert any(line.startswith("process started: ") and "echo one" in line for line in lines)
        entries = r.parsed.log_entries
        assert [e.timestamp for e in entries] == sorted(e.timestamp for e in entries)

        v2 = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
            sbx.sandbox_id, client=api(), level=LogLevel.WARN
        )
        assert v2.status_code == 200
        assert [e.message for e in v2.parsed.logs] == ["process ended: exit status 3"]
        warn = v2.parsed.logs[0]
        assert warn.level == LogLevel.WARN
        assert warn.fields["exitCode"] == "3"

        back = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
            sbx.sandbox_id, client=api(), direction=LogsDirection.BACKWARD, limit=1
        )
        assert [e.message for e in back.parsed.logs] == ["process ended: exit status 3"]
        found = get_v_2_sandboxes_sandbox_id_logs.sync_detailed(
            sbx.sandbox_id, client=api(), search="echo one"
        )
        assert [e.fields["event"] for e in found.parsed.logs] == ["process.start"]
    finally:
        sbx.kill()
    r = get_sandboxes_sandbox_id_logs.sync_detailed(sbx.sandbox_id, client=api())
    assert r.status_code == 404


async def test_async_logs_and_metrics():
    sbx = await AsyncSandbox.create()
    try:
        await sbx.commands.run("true")
        client = get_async_api_client(ConnectionConfig())
        r = await get_v_2_sandboxes_sandbox_id_logs.asyncio_detailed(sbx.sandbox_id, client=client)
        assert "process ended: exit status 0" in [e.message for e in r.parsed.logs]
        m = await get_sandboxes_metrics.asyncio_detailed(client=client, sandbox_ids=[sbx.sandbox_id])
        assert list(m.parsed.sandboxes) == [sbx.sandbox_id]
    finally:
        await sbx.kill()


def test_what_cove_does_not_offer_raises():
    from e2b import Template
    from e2b.secret import Secret

    with pytest.raises(Exception, match="not supported"):
        Secret.create("name", "value")
    with pytest.raises(Exception, match="not supported"):
        Template.exists("some-template")
    with pytest.raises(SandboxException, match="MCP"):
        Sandbox.create(mcp={"exa": {"apiKey": "x"}})
