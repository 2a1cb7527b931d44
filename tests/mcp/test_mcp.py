"""Cove's MCP server driven by the official `mcp` Python SDK (PyPI) as the client, over
stdio (`cove mcp` as a subprocess) and over streamable HTTP (`/mcp` on the server): list the
tools, create a sandbox, run commands, move files, follow a background command, and see API
errors arrive as tool errors carrying the API's code."""

import base64
import contextlib

import httpx2
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

TOOLS = {
    "create_sandbox", "list_sandboxes", "get_sandbox", "pause_sandbox", "resume_sandbox",
    "suspend_sandbox", "wake_sandbox", "delete_sandbox", "run_command",
    "start_background_command", "read_output", "kill_command", "write_file", "read_file",
    "list_files", "list_templates", "get_network_policy", "set_network_policy", "preview_url",
    "create_checkpoint", "list_checkpoints", "rollback_sandbox", "fork_sandbox",
}


def stdio_client(cove, token=None):
    params = StdioServerParameters(
        command=cove.bin,
        args=["mcp", "--url", cove.api_url],
        env={"COVE_TOKEN": token or cove.token},
    )
    return Client(params, read_timeout_seconds=300)


@contextlib.asynccontextmanager
async def http_client(cove, token=None):
    headers = {"Authorization": f"Bearer {token or cove.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(f"{cove.api_url}/mcp", http_client=http)
        async with Client(transport, read_timeout_seconds=300) as client:
            yield client


@contextlib.asynccontextmanager
async def connect(cove, how):
    if how == "stdio":
        async with stdio_client(cove) as client:
            yield client
    else:
        async with http_client(cove) as client:
            yield client


async def call(client, tool, **args):
    result = await client.call_tool(tool, args)
    assert not result.is_error, f"{tool}: {result.content}"
    return result.structured_content


async def call_error(client, tool, **args):
    result = await client.call_tool(tool, args)
    assert result.is_error, f"{tool} should fail: {result.content}"
    return result.structured_content


@pytest.mark.parametrize("how", ["stdio", "http"])
async def test_an_agent_drives_a_sandbox(cove, how):
    async with connect(cove, how) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert TOOLS <= set(tools), sorted(tools)
        assert "sandbox_id" in tools["run_command"].input_schema["properties"]

        sandbox = await call(client, "create_sandbox", template="base", metadata={"via": how})
        sid = sandbox["id"]
        assert sandbox["state"] == "running"
        try:
            listed = await call(client, "list_sandboxes", state="running")
            assert sid in [s["id"] for s in listed["sandboxes"]]

            ran = await call(client, "run_command", sandbox_id=sid,
                             command="echo hi; echo oops >&2; exit 3")
            assert ran["exit_code"] == 3
            assert ran["stdout"] == "hi\n"
            assert ran["stderr"] == "oops\n"

            wrote = await call(client, "write_file", sandbox_id=sid, path="/tmp/mcp/note.txt",
                               content="from an agent\n")
            assert wrote["size"] == 14
            read = await call(client, "read_file", sandbox_id=sid, path="/tmp/mcp/note.txt")
            assert read["content"] == "from an agent\n"
            assert not read["truncated"]
            blob = bytes(range(256))
            await call(client, "write_file", sandbox_id=sid, path="/tmp/mcp/blob",
                       content=base64.b64encode(blob).decode(), encoding="base64")
            read = await call(client, "read_file", sandbox_id=sid, path="/tmp/mcp/blob",
                              encoding="base64")
            assert base64.b64decode(read["content"]) == blob
            listing = await call(client, "list_files", sandbox_id=sid, path="/tmp/mcp")
            assert {(e["path"], e["type"]) for e in listing["entries"]} == {
                ("/tmp/mcp/note.txt", "file"), ("/tmp/mcp/blob", "file")}

            missing = await call_error(client, "read_file", sandbox_id=sid, path="/nope")
            assert missing["code"] == "file_not_found"
            assert missing["request_id"]
        finally:
            await call(client, "delete_sandbox", sandbox_id=sid)
        gone = await call_error(client, "get_sandbox", sandbox_id=sid)
        assert gone["code"] == "sandbox_not_found"


async def test_background_commands_are_followed_and_killed(cove):
    async with stdio_client(cove) as client:
        sid = (await call(client, "create_sandbox", template="base"))["id"]
        try:
            started = await call(client, "start_background_command", sandbox_id=sid,
                                 command="for i in 1 2 3; do echo line$i; done; sleep 600")
            cid = started["command_id"]
            seen, offset = "", 0
            for _ in range(50):
                out = await call(client, "read_output", sandbox_id=sid, command_id=cid,
                                 offset=offset, wait_s=0.2)
                seen += out["output"]
                offset = out["next_offset"]
                if "line3" in seen:
                    break
            assert seen == "line1\nline2\nline3\n"
            assert out["state"] == "running"
            killed = await call(client, "kill_command", sandbox_id=sid, command_id=cid)
            assert killed["state"] == "exited"
            assert killed["signal"] in ("SIGTERM", "SIGKILL")
            # Reading again from the end answers nothing new, and the end.
            out = await call(client, "read_output", sandbox_id=sid, command_id=cid,
                             offset=offset)
            assert out["output"] == "" and out["state"] == "exited"

            # A command past its timeout is killed; the answer says so.
            slow = await call(client, "run_command", sandbox_id=sid, command="sleep 30",
                              timeout_s=1)
            assert slow["timed_out"]
            # A large output keeps its head and tail, with a note.
            big = await call(client, "run_command", sandbox_id=sid,
                             command="head -c 200000 /dev/zero | tr '\\0' x",
                             max_output_bytes=1000)
            assert big["truncated"] and "left out" in big["note"]
            assert len(big["stdout"]) <= 1000

            # Lifecycle moves answer the state they reached.
            assert (await call(client, "pause_sandbox", sandbox_id=sid))["state"] == "paused"
            not_running = await call_error(client, "run_command", sandbox_id=sid,
                                           command="true")
            assert not_running["code"] == "sandbox_not_running"
            assert (await call(client, "resume_sandbox", sandbox_id=sid))["state"] == "running"
            assert (await call(client, "suspend_sandbox", sandbox_id=sid))["state"] == "suspended"
            assert (await call(client, "wake_sandbox", sandbox_id=sid))["state"] == "running"
            read = await call(client, "run_command", sandbox_id=sid, command="echo awake")
            assert read["stdout"] == "awake\n"
        finally:
            await call(client, "delete_sandbox", sandbox_id=sid)


async def test_bad_arguments_and_tokens_are_refused(cove):
    async with stdio_client(cove) as client:
        bad = await call_error(client, "run_command", sandbox_id="sb-nope")
        assert bad["code"] == "invalid_argument"
        nope = await call_error(client, "run_command", sandbox_id="sb-nope", command="true")
        assert nope["code"] == "sandbox_not_found"
    # stdio with a wrong token: every tool call is a tool error with the API's code.
    async with stdio_client(cove, token="wrong") as client:
        denied = await call_error(client, "list_sandboxes")
        assert denied["code"] == "unauthorized"
    # HTTP: the endpoint itself refuses a missing or wrong token, with the API's error body.
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream"}
    for auth in ({}, {"Authorization": "Bearer wrong"}):
        # A connection each: a refused request's unread body may end its connection.
        async with httpx2.AsyncClient(timeout=30) as http:
            r = await http.post(f"{cove.api_url}/mcp", json=body, headers=headers | auth)
            assert r.status_code == 401, r.text
            assert r.json()["code"] == "unauthorized"
            assert r.json()["request_id"] == r.headers["x-request-id"]


async def test_templates_network_previews_checkpoints_and_forks(cove):
    async with stdio_client(cove) as client:
        templates = await call(client, "list_templates")
        base = [t for t in templates["templates"] if t["name"] == "base"]
        assert base and base[0]["latest_release"] is not None

        sid = (await call(client, "create_sandbox", template="base"))["id"]
        forks = []
        try:
            # The egress policy, live: replaced, read back; a bad rule is invalid_argument.
            net = await call(client, "set_network_policy", sandbox_id=sid, internet=False,
                             allow=["pypi.org", "10.0.0.0/8"], deny=["evil.example"])
            assert net["network"]["internet"] is False
            assert net["network"]["allow"] == ["pypi.org", "10.0.0.0/8"]
            got = await call(client, "get_network_policy", sandbox_id=sid)
            assert got["network"] == net["network"]
            assert "connections_denied" in got["counters"]
            bad = await call_error(client, "set_network_policy", sandbox_id=sid,
                                   allow=["not a rule!"])
            assert bad["code"] == "invalid_argument"

            # A preview link to a port: one use, on the proxy listener, for that port.
            link = await call(client, "preview_url", sandbox_id=sid, port=8000, path="/x")
            assert link["port"] == 8000 and link["url"].startswith("http")
            assert (await call_error(client, "preview_url", sandbox_id=sid,
                                     port=0))["code"] == "invalid_argument"

            # Checkpoint, change, roll back: the file is as it was at the checkpoint.
            await call(client, "run_command", sandbox_id=sid, command="echo before > /tmp/f")
            ck = await call(client, "create_checkpoint", sandbox_id=sid, name="mcp")
            assert ck["state"] == "ready" and ck["sandbox_id"] == sid
            listed = await call(client, "list_checkpoints", sandbox_id=sid)
            assert ck["id"] in [c["id"] for c in listed["checkpoints"]]
            await call(client, "run_command", sandbox_id=sid, command="echo after > /tmp/f")
            rolled = await call(client, "rollback_sandbox", sandbox_id=sid,
                                checkpoint_id=ck["id"])
            assert rolled["state"] == "running"
            out = await call(client, "run_command", sandbox_id=sid, command="cat /tmp/f")
            assert out["stdout"] == "before\n"

            # Fork: a running copy with the same files.
            forked = await call(client, "fork_sandbox", sandbox_id=sid, count=1)
            forks = [s["id"] for s in forked["sandboxes"]]
            assert len(forks) == 1 and forks[0] != sid
            assert forked["sandboxes"][0]["state"] == "running"
            out = await call(client, "run_command", sandbox_id=forks[0], command="cat /tmp/f")
            assert out["stdout"] == "before\n"
            too_many = await call_error(client, "fork_sandbox", sandbox_id=sid, count=99)
            assert too_many["code"] == "invalid_argument"
        finally:
            for f in forks:
                await call(client, "delete_sandbox", sandbox_id=f)
            await call(client, "delete_sandbox", sandbox_id=sid)
