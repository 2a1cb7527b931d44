"""The asynchronous client (httpx.AsyncClient; PTY sessions over ``websockets``' asyncio API).

The same calls as :class:`cove.Client`, as coroutines and async iterators; callbacks may be
plain functions or coroutine functions.

>>> async with cove.AsyncClient() as c:
...     sb = await c.create_sandbox("base")
...     r = await c.run(sb, ["python3", "-c", "print(1)"], on_stdout=print)
...     await c.delete_sandbox(sb)
"""

from __future__ import annotations

import functools
import inspect
import asyncio
import contextlib
import json
import os
from typing import Any, AsyncIterator, Callable, Mapping, Optional, Sequence, Union

import httpx

from . import _checkpoints, _core, _files, _streams, _templates
from ._core import Commandish, Req, Sandboxish
from ._streams import AttachCursor, SseParser, StdoutCursor, _StreamBroke
from .client import decode
from .errors import Conflict, CoveError, TransportError, Unauthorized, from_answer
from .types import (
    Attachment,
    BuildLog,
    Command,
    CommandResult,
    Event,
    FileEvent,
    Gap,
    Operation,
    Output,
)

Callback = Callable[[bytes], Any]


def _async(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A coroutine method that runs the shared call ``fn`` (see ``_core``) over HTTP."""

    @functools.wraps(fn)
    async def method(self: "AsyncClient", *args: Any, **kwargs: Any) -> Any:
        return await self._run(fn(*args, **kwargs))

    return method


async def _call(callback: Optional[Callable[..., Any]], *args: Any) -> None:
    if callback is None:
        return
    result = callback(*args)
    if inspect.isawaitable(result):
        await result


def _async_content(content: Any) -> Any:
    """Request content httpx.AsyncClient can send: bytes as they are; a file object or an
    iterable of chunks read into an async generator."""
    if content is None or isinstance(content, (bytes, bytearray)) or hasattr(content, "__aiter__"):
        return content
    if hasattr(content, "read"):

        async def chunks() -> AsyncIterator[bytes]:
            while True:
                block = content.read(1 << 20)
                if not block:
                    return
                yield block

        return chunks()

    async def items() -> AsyncIterator[bytes]:
        for block in content:
            yield block

    return items()


class AsyncClient:
    """An asyncio client of one Cove server; arguments as for :class:`cove.Client`."""

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: float = 60.0,
        http: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self.url = (url or _core.default_url()).rstrip("/")
        self._token = token or _core.default_token()
        self._timeout = timeout
        self._own_http = http is None
        self._http = http or httpx.AsyncClient(timeout=timeout)

    async def aclose(self) -> None:
        """Closes the connection pool (when the client made it)."""
        if self._own_http:
            await self._http.aclose()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    # -- transport ---------------------------------------------------------------------------

    def _target(self, req: Req) -> tuple:
        url = req.path if req.path.startswith(("http://", "https://")) else self.url + req.path
        headers = {"Authorization": f"Bearer {req.token or self._token}", **req.headers}
        return url, headers

    async def _send(self, req: Req) -> Any:
        url, headers = self._target(req)
        timeout = httpx.Timeout(self._timeout, read=req.timeout or self._timeout)
        try:
            resp = await self._http.request(
                req.method,
                url,
                params=req.params or None,
                json=req.json,
                content=_async_content(req.content),
                files=req.files,
                headers=headers,
                timeout=timeout,
            )
        except httpx.TransportError as err:
            raise TransportError(f"{req.method} {url}: {err}") from err
        return decode(resp, req)

    async def _run(self, call: _core.Call) -> Any:
        try:
            req = next(call)
            while True:
                try:
                    answer = await self._send(req)
                except CoveError as err:
                    req = call.throw(err)
                else:
                    req = call.send(answer)
        except StopIteration as stop:
            return stop.value

    @contextlib.asynccontextmanager
    async def _stream(self, req: Req) -> AsyncIterator[httpx.Response]:
        """As :meth:`cove.Client._stream`."""
        url, headers = self._target(req)
        try:
            async with self._http.stream(
                "GET",
                url,
                params=req.params or None,
                headers=headers,
                timeout=httpx.Timeout(self._timeout, read=None),
            ) as resp:
                if resp.status_code >= 400:
                    raise from_answer(resp.status_code, await resp.aread())
                yield resp
        except httpx.TransportError as err:
            raise TransportError(f"GET {url}: {err}") from err

    async def _sse(self, req: Req) -> AsyncIterator[tuple]:
        async with self._stream(req) as resp:
            parser = SseParser()
            async for line in resp.aiter_lines():
                event = parser.line(line)
                if event is not None:
                    yield event

    async def _raw(self, req: Req) -> AsyncIterator[bytes]:
        """As :meth:`cove.Client._raw`."""
        async with self._stream(req) as resp:
            async for chunk in resp.aiter_raw():
                if chunk:
                    yield chunk

    # -- sandboxes, lifecycle, operations, templates ------------------------------------------

    create_sandbox = _async(_core.create_sandbox)
    get_sandbox = _async(_core.get_sandbox)
    sandbox_metrics = _async(_core.sandbox_metrics)
    network = _async(_core.network)
    set_network = _async(_core.set_network)
    set_expiry = _async(_core.set_expiry)
    clear_expiry = _async(_core.clear_expiry)
    ports = _async(_core.ports)
    set_ports = _async(_core.set_ports)
    port_link = _async(_core.port_link)
    list_sandboxes = _async(_core.list_sandboxes)
    delete_sandbox = _async(_core.delete_sandbox)
    pause = _async(_core.pause)
    resume = _async(_core.resume)
    suspend = _async(_core.suspend)
    wake = _async(_core.wake)
    capabilities = _async(_core.capabilities)
    get_operation = _async(_core.get_operation)
    wait_operation = _async(_core.wait_operation)
    list_operations = _async(_core.list_operations)
    cancel_operation = _async(_core.cancel_operation)
    list_templates = _async(_core.list_templates)
    get_template = _async(_core.get_template)
    put_pool = _async(_core.put_pool)
    get_pool = _async(_core.get_pool)
    list_pools = _async(_core.list_pools)
    delete_pool = _async(_core.delete_pool)
    create_volume = _async(_core.create_volume)
    get_volume = _async(_core.get_volume)
    list_volumes = _async(_core.list_volumes)
    delete_volume = _async(_core.delete_volume)
    write_volume_file = _async(_core.write_volume_file)
    read_volume_file = _async(_core.read_volume_file)
    list_volume_files = _async(_core.list_volume_files)
    stat_volume_file = _async(_core.stat_volume_file)
    remove_volume_file = _async(_core.remove_volume_file)
    make_volume_dir = _async(_core.make_volume_dir)
    set_volume_file_attrs = _async(_core.set_volume_file_attrs)
    create_checkpoint = _async(_checkpoints.create_checkpoint)
    get_checkpoint = _async(_checkpoints.get_checkpoint)
    list_checkpoints = _async(_checkpoints.list_checkpoints)
    delete_checkpoint = _async(_checkpoints.delete_checkpoint)
    rollback = _async(_checkpoints.rollback)
    fork = _async(_checkpoints.fork)
    import_checkpoint = _async(_checkpoints.import_checkpoint)

    async def export_checkpoint(
        self, checkpoint: Any, dest: Optional[Union[str, "os.PathLike[str]"]] = None
    ) -> Union[bytes, int]:
        """As :meth:`cove.Client.export_checkpoint`."""
        req = _checkpoints.archive_request(checkpoint)
        if dest is None:
            return b"".join([chunk async for chunk in self._raw(req)])
        with _checkpoints.written_whole(dest) as f:
            async for chunk in self._raw(req):
                f.write(chunk)
            return f.tell()

    async def build_release(
        self,
        name: str,
        no_cache: bool = False,
        wait: bool = True,
        on_log: Optional[Callable[[BuildLog], Any]] = None,
        timeout: float = 3600,
    ) -> Operation:
        """As :meth:`cove.Client.build_release`."""
        if on_log is None:
            return await self._run(_core.build_release(name, no_cache, wait, timeout))
        op = await self._run(_core.build_release(name, no_cache, wait=False))
        return await self._follow_build(op, on_log, timeout)

    async def create_template(
        self,
        name: str,
        context: Any,
        file: Optional[str] = None,
        no_cache: bool = False,
        network: Any = None,
        wait: bool = True,
        on_log: Optional[Callable[[BuildLog], Any]] = None,
        timeout: float = 3600,
        build_args: Optional[Mapping[str, str]] = None,
    ) -> Operation:
        """As :meth:`cove.Client.create_template`."""
        if on_log is None:
            return await self._run(_templates.create_template(name, context, file, no_cache, network, wait, timeout, build_args))
        op = await self._run(_templates.create_template(name, context, file, no_cache, network, wait=False, build_args=build_args))
        return await self._follow_build(op, on_log, timeout)

    async def _follow_build(self, op: Operation, on_log: Callable[[BuildLog], Any], timeout: float) -> Operation:
        async for log in self.build_logs(op.id):
            await _call(on_log, log)
        return await self._run(_core.wait_operation(op.id, timeout))

    async def build_logs(self, operation_id: str) -> AsyncIterator[BuildLog]:
        """A build's log from its start, until ``done``."""
        req = Req("GET", f"/v1/operations/{_core.seg(operation_id)}/logs")
        async for event, data, _ in self._sse(req):
            if event in ("log", "progress", "done"):
                log = BuildLog.from_json(json.loads(data))
                yield log
                if log.type == "done":
                    return

    async def events(self, after: Optional[int] = None) -> AsyncIterator[Event]:
        """Lifecycle events after ``after``, then live; endless."""
        params = [("after", str(after))] if after is not None else []
        async for event, data, _ in self._sse(Req("GET", "/v1/events", params=params)):
            if event in ("lifecycle", "network_denied"):
                yield Event.from_json(json.loads(data))

    # -- commands ---------------------------------------------------------------------------

    get_command = _async(_core.get_command)
    list_commands = _async(_core.list_commands)
    signal_command = _async(_core.signal_command)
    kill_command = _async(_core.kill_command)
    forget_command = _async(_core.forget_command)
    command_output = _async(_core.command_output)

    async def start(
        self,
        sandbox: Sandboxish,
        command: Union[str, Sequence[str]],
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        stdin: bool = False,
        timeout_s: Optional[float] = None,
        idempotency_key: Optional[str] = None,
    ) -> "AsyncCommandHandle":
        """As :meth:`cove.Client.start`."""
        body = _core.command_request(command, env, cwd, user, stdin, timeout_s)
        cmd, attachment = await self._run(_core.start_command(sandbox, body, idempotency_key))
        return AsyncCommandHandle(self, cmd, attachment)

    async def run(
        self,
        sandbox: Sandboxish,
        command: Union[str, Sequence[str]],
        *,
        on_stdout: Optional[Callback] = None,
        on_stderr: Optional[Callback] = None,
        stdin: Union[bytes, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout_s: Optional[float] = None,
    ) -> CommandResult:
        """As :meth:`cove.Client.run`."""
        handle = await self.start(
            sandbox, command, env=env, cwd=cwd, user=user, stdin=stdin is not None, timeout_s=timeout_s
        )
        if stdin is not None:
            await handle.write_stdin(stdin)
            await handle.close_stdin()
        return await handle.wait(on_stdout=on_stdout, on_stderr=on_stderr)

    async def attach(self, sandbox: Sandboxish, command: Commandish, offset: int = 0) -> "AsyncCommandHandle":
        """As :meth:`cove.Client.attach`."""
        attachment = await self._run(_core.new_attachment(sandbox, command))
        cmd = await self._run(_core.get_command(sandbox, command))
        return AsyncCommandHandle(self, cmd, attachment, offset)

    async def pty(
        self,
        sandbox: Sandboxish,
        command: Union[str, Sequence[str], None] = None,
        *,
        cols: int = 80,
        rows: int = 24,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
    ) -> "AsyncPtySession":
        """As :meth:`cove.Client.pty`."""
        body = _core.command_request(command, env, cwd, user, True, None, True, cols, rows)
        cmd, attachment = await self._run(_core.start_command(sandbox, body))
        return await AsyncPtySession.connect(self, cmd, attachment)

    # -- files ------------------------------------------------------------------------------

    write_file = _async(_files.write_file)
    read_file = _async(_files.read_file)
    upload_files = _async(_files.upload_files)
    upload_dir = _async(_files.upload_dir)
    download_dir = _async(_files.download_dir)
    list_files = _async(_files.list_files)
    stat_file = _async(_files.stat_file)
    file_exists = _async(_files.file_exists)
    make_dir = _async(_files.make_dir)
    move_file = _async(_files.move_file)
    remove_file = _async(_files.remove_file)

    async def watch(self, sandbox: Sandboxish, path: str, recursive: bool = False) -> AsyncIterator[FileEvent]:
        """As :meth:`cove.Client.watch`."""
        params = [("path", path), ("recursive", "true" if recursive else "false")]
        req = Req("GET", _core.sandbox_path(sandbox, "/files:watch"), params=params)
        async for event, data, _ in self._sse(req):
            parsed = json.loads(data)
            if event == "error":
                raise CoveError(parsed.get("code", "internal"), parsed.get("message", ""))
            yield FileEvent.from_json(parsed)


class AsyncCommandHandle:
    """As :class:`cove.CommandHandle`, with coroutines."""

    def __init__(self, client: AsyncClient, command: Command, attachment: Attachment, offset: int = 0) -> None:
        self.client = client
        self.command = command
        self.attachment = attachment
        self.offset = offset

    @property
    def id(self) -> str:
        """The command's id."""
        return self.command.id

    @property
    def sandbox_id(self) -> str:
        """The sandbox's id."""
        return self.command.sandbox_id

    async def output(self) -> AsyncIterator[Union[Output, Gap]]:
        """As :meth:`cove.CommandHandle.output`."""
        cursor = AttachCursor(self.attachment, self.offset)
        renewed = False
        while True:
            try:
                async for event, data, _ in self.client._sse(cursor.request()):
                    item = cursor.on_event(event, data)
                    self.offset = cursor.offset
                    if isinstance(item, Command):
                        self.command = item
                        return
                    if item is not None:
                        yield item
                cursor.failed(CoveError("transport", "the output stream ended before the exit"))
            except (TransportError, _StreamBroke) as err:
                cursor.failed(err)
            except Unauthorized:
                if renewed:
                    raise
                renewed = True
                self.attachment = await self.client._run(_core.new_attachment(self.sandbox_id, self.id))
                cursor.attachment = self.attachment

    async def stdout_bytes(self, offset: int = 0) -> AsyncIterator[bytes]:
        """As :meth:`cove.CommandHandle.stdout_bytes`."""
        cursor = StdoutCursor(self.attachment, offset)
        while True:
            try:
                async for chunk in self.client._raw(cursor.request()):
                    cursor.on_bytes(chunk)
                    yield chunk
                break
            except TransportError as err:
                cursor.failed(err)
            except Conflict as err:
                if err.code != "failed_precondition" or cursor.failures == 0:
                    raise
                cursor.failed(err)
                await asyncio.sleep(0.1 * cursor.failures)
        self.command = await self.client.get_command(self.sandbox_id, self.id, wait=30)

    async def wait(self, on_stdout: Optional[Callback] = None, on_stderr: Optional[Callback] = None) -> CommandResult:
        """As :meth:`cove.CommandHandle.wait`."""
        result = CommandResult(self.command)
        out, err = bytearray(), bytearray()
        async for item in self.output():
            if isinstance(item, Gap):
                result.gaps.append(item)
            elif item.stream == "stdout":
                out += item.data
                await _call(on_stdout, item.data)
            else:
                err += item.data
                await _call(on_stderr, item.data)
        result.command = self.command
        result.stdout, result.stderr = bytes(out), bytes(err)
        return result

    async def write_stdin(self, data: Union[bytes, str]) -> None:
        """Writes to the command's stdin."""
        await self.client._run(_core.stdin_write(self.attachment, data))

    async def close_stdin(self) -> None:
        """Closes the command's stdin."""
        await self.client._run(_core.stdin_close(self.attachment))

    async def signal(self, signal: str = "SIGTERM") -> Command:
        """Sends a signal to the command."""
        return await self.client.signal_command(self.sandbox_id, self.id, signal)

    async def kill(self, grace_ms: Optional[int] = None) -> Command:
        """Kills the command's whole session; returns once it is gone."""
        return await self.client.kill_command(self.sandbox_id, self.id, grace_ms)

    async def refresh(self) -> Command:
        """The command's current state."""
        self.command = await self.client.get_command(self.sandbox_id, self.id)
        return self.command


class AsyncPtySession:
    """As :class:`cove.PtySession`, with coroutines."""

    def __init__(self, client: AsyncClient, command: Command, attachment: Attachment, ws: Any) -> None:
        self.client = client
        self.command = command
        self.attachment = attachment
        self._ws = ws

    @classmethod
    async def connect(
        cls, client: AsyncClient, command: Command, attachment: Attachment, offset: int = 0
    ) -> "AsyncPtySession":
        from websockets.asyncio.client import connect
        from websockets.exceptions import InvalidStatus

        url = _streams.pty_url(attachment, offset)
        try:
            ws = await connect(url, additional_headers={"Authorization": f"Bearer {attachment.token}"})
        except InvalidStatus as err:
            raise from_answer(err.response.status_code, err.response.body or b"") from err
        except OSError as err:
            raise TransportError(f"GET {url}: {err}") from err
        return cls(client, command, attachment, ws)

    async def send(self, data: Union[bytes, str]) -> None:
        """Writes keys to the terminal."""
        await self._ws.send(data.encode() if isinstance(data, str) else bytes(data))

    async def resize(self, cols: int, rows: int) -> None:
        """Changes the terminal's size."""
        await self._ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    async def recv(self) -> Union[Output, Gap, Command, None]:
        """As :meth:`cove.PtySession.recv` (use ``asyncio.wait_for`` for a timeout)."""
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                message = await self._ws.recv()
            except ConnectionClosed:
                return None
            item = _streams.pty_message(message)
            if isinstance(item, Command):
                self.command = item
            if item is not None:
                return item

    async def wait(self, on_output: Optional[Callback] = None) -> CommandResult:
        """Reads the terminal until the command exits; the output is ``result.stdout``."""
        out = bytearray()
        result = CommandResult(self.command)
        while True:
            item = await self.recv()
            if item is None or isinstance(item, Command):
                break
            if isinstance(item, Gap):
                result.gaps.append(item)
                continue
            out += item.data
            await _call(on_output, item.data)
        result.command, result.stdout = self.command, bytes(out)
        return result

    async def close(self) -> None:
        """Closes the WebSocket (the command keeps running)."""
        await self._ws.close()

    async def __aenter__(self) -> "AsyncPtySession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


__all__ = ["AsyncClient", "AsyncCommandHandle", "AsyncPtySession"]
