"""The synchronous client (httpx.Client; PTY sessions over ``websockets``).

>>> import cove
>>> with cove.Client() as c:                      # COVE_URL / COVE_TOKEN / COVE_DATA_DIR
...     sb = c.create_sandbox("base")             # waits until it runs
...     r = c.run(sb, "echo hi", on_stdout=print)
...     c.delete_sandbox(sb)
"""

from __future__ import annotations

import contextlib
import os
import functools
import json
import time
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

import httpx

from . import _checkpoints, _core, _files, _streams, _templates
from ._core import Commandish, Req, Sandboxish
from ._streams import AttachCursor, SseParser, StdoutCursor, _StreamBroke
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

OutputCallback = Callable[[bytes], Any]


def _sync(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A client method that runs the shared call ``fn`` (see ``_core``) over HTTP."""

    @functools.wraps(fn)
    def method(self: "Client", *args: Any, **kwargs: Any) -> Any:
        return self._run(fn(*args, **kwargs))

    return method


def decode(resp: httpx.Response, req: Req) -> Any:
    """The answer of ``req``: raw bytes, decoded JSON or ``None``; an error status raises."""
    if resp.status_code >= 400:
        raise from_answer(resp.status_code, resp.content)
    if req.raw:
        return resp.content
    if resp.status_code == 204 or not resp.content:
        return None
    return resp.json()


class Client:
    """A client of one Cove server.

    Args:
        url: server URL (default ``COVE_URL``, else ``http://127.0.0.1:7700``).
        token: management token (default ``COVE_TOKEN``, else ``$COVE_DATA_DIR/admin.token``).
        timeout: seconds for connecting and for an ordinary request's answer (long-polls and
            streams wait longer on their own).
        http: an ``httpx.Client`` of your own (proxies, TLS); not closed by :meth:`close`.

    Methods that take a sandbox or a command accept its id or the dataclass. Errors raise
    :class:`cove.CoveError` subclasses carrying ``code`` and ``request_id``.
    """

    def __init__(
        self,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: float = 60.0,
        http: Optional[httpx.Client] = None,
    ) -> None:
        self.url = (url or _core.default_url()).rstrip("/")
        self._token = token or _core.default_token()
        self._timeout = timeout
        self._own_http = http is None
        self._http = http or httpx.Client(timeout=timeout)

    def close(self) -> None:
        """Closes the connection pool (when the client made it)."""
        if self._own_http:
            self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    def _target(self, req: Req) -> tuple:
        url = req.path if req.path.startswith(("http://", "https://")) else self.url + req.path
        headers = {"Authorization": f"Bearer {req.token or self._token}", **req.headers}
        return url, headers

    def _send(self, req: Req) -> Any:
        url, headers = self._target(req)
        timeout = httpx.Timeout(self._timeout, read=req.timeout or self._timeout)
        try:
            resp = self._http.request(
                req.method,
                url,
                params=req.params or None,
                json=req.json,
                content=req.content,
                files=req.files,
                headers=headers,
                timeout=timeout,
            )
        except httpx.TransportError as err:
            raise TransportError(f"{req.method} {url}: {err}") from err
        return decode(resp, req)

    def _run(self, call: _core.Call) -> Any:
        try:
            req = next(call)
            while True:
                try:
                    answer = self._send(req)
                except CoveError as err:
                    req = call.throw(err)
                else:
                    req = call.send(answer)
        except StopIteration as stop:
            return stop.value

    @contextlib.contextmanager
    def _stream(self, req: Req) -> Iterator[httpx.Response]:
        """A streamed ``GET`` whose status is checked; a connection that fails or a body that
        breaks off is a :class:`TransportError`."""
        url, headers = self._target(req)
        try:
            with self._http.stream(
                "GET",
                url,
                params=req.params or None,
                headers=headers,
                timeout=httpx.Timeout(self._timeout, read=None),
            ) as resp:
                if resp.status_code >= 400:
                    raise from_answer(resp.status_code, resp.read())
                yield resp
        except httpx.TransportError as err:
            raise TransportError(f"GET {url}: {err}") from err

    def _sse(self, req: Req) -> Iterator[tuple]:
        """The ``(event, data, id)`` triples of a server-sent event stream."""
        with self._stream(req) as resp:
            parser = SseParser()
            for line in resp.iter_lines():
                event = parser.line(line)
                if event is not None:
                    yield event

    def _raw(self, req: Req) -> Iterator[bytes]:
        """The body of a ``GET`` as it arrives, chunk by chunk; a body that breaks off is a
        :class:`TransportError`."""
        with self._stream(req) as resp:
            for chunk in resp.iter_raw():
                if chunk:
                    yield chunk

    # -- sandboxes, lifecycle, operations, templates ------------------------------------------

    create_sandbox = _sync(_core.create_sandbox)
    get_sandbox = _sync(_core.get_sandbox)
    sandbox_metrics = _sync(_core.sandbox_metrics)
    network = _sync(_core.network)
    set_network = _sync(_core.set_network)
    set_expiry = _sync(_core.set_expiry)
    clear_expiry = _sync(_core.clear_expiry)
    ports = _sync(_core.ports)
    set_ports = _sync(_core.set_ports)
    port_link = _sync(_core.port_link)
    list_sandboxes = _sync(_core.list_sandboxes)
    delete_sandbox = _sync(_core.delete_sandbox)
    pause = _sync(_core.pause)
    resume = _sync(_core.resume)
    suspend = _sync(_core.suspend)
    wake = _sync(_core.wake)
    capabilities = _sync(_core.capabilities)
    get_operation = _sync(_core.get_operation)
    wait_operation = _sync(_core.wait_operation)
    list_operations = _sync(_core.list_operations)
    cancel_operation = _sync(_core.cancel_operation)
    list_templates = _sync(_core.list_templates)
    get_template = _sync(_core.get_template)
    put_pool = _sync(_core.put_pool)
    get_pool = _sync(_core.get_pool)
    list_pools = _sync(_core.list_pools)
    delete_pool = _sync(_core.delete_pool)
    create_volume = _sync(_core.create_volume)
    get_volume = _sync(_core.get_volume)
    list_volumes = _sync(_core.list_volumes)
    delete_volume = _sync(_core.delete_volume)
    write_volume_file = _sync(_core.write_volume_file)
    read_volume_file = _sync(_core.read_volume_file)
    list_volume_files = _sync(_core.list_volume_files)
    stat_volume_file = _sync(_core.stat_volume_file)
    remove_volume_file = _sync(_core.remove_volume_file)
    make_volume_dir = _sync(_core.make_volume_dir)
    set_volume_file_attrs = _sync(_core.set_volume_file_attrs)
    create_checkpoint = _sync(_checkpoints.create_checkpoint)
    get_checkpoint = _sync(_checkpoints.get_checkpoint)
    list_checkpoints = _sync(_checkpoints.list_checkpoints)
    delete_checkpoint = _sync(_checkpoints.delete_checkpoint)
    rollback = _sync(_checkpoints.rollback)
    fork = _sync(_checkpoints.fork)
    import_checkpoint = _sync(_checkpoints.import_checkpoint)

    def export_checkpoint(
        self, checkpoint: Any, dest: Optional[Union[str, "os.PathLike[str]"]] = None
    ) -> Union[bytes, int]:
        """A checkpoint's archive (an uncompressed tar, format ``cove-checkpoint`` version 1)
        that :meth:`import_checkpoint` takes on this or another server: streamed into ``dest``
        (a local path, written whole or not at all) and its size in bytes returned, or without
        ``dest`` returned as bytes."""
        req = _checkpoints.archive_request(checkpoint)
        if dest is None:
            return b"".join(self._raw(req))
        with _checkpoints.written_whole(dest) as f:
            for chunk in self._raw(req):
                f.write(chunk)
            return f.tell()

    def build_release(
        self,
        name: str,
        no_cache: bool = False,
        wait: bool = True,
        on_log: Optional[Callable[[BuildLog], Any]] = None,
        timeout: float = 3600,
    ) -> Operation:
        """Builds a release of template ``name``; returns the build operation (final when
        ``wait``; a failed build raises :class:`OperationFailed`). ``on_log`` gets each log
        line and progress event while it builds."""
        if on_log is None:
            return self._run(_core.build_release(name, no_cache, wait, timeout))
        op = self._run(_core.build_release(name, no_cache, wait=False))
        return self._follow_build(op, on_log, timeout)

    def create_template(
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
        """Creates template ``name`` from a template file (a Dockerfile subset: FROM, RUN,
        COPY/ADD, ENV, WORKDIR, USER, ARG, LABEL, EXPOSE, START, READY) or builds its next
        release. ``context`` is a local directory (packed into a tar) or tar bytes holding the
        file (``file``, default ``Dockerfile``); ``network`` is the egress policy of its ``RUN``
        steps; ``build_args`` replace the defaults of its ``ARG``s. Returns
        the build operation (final when ``wait``; a failed build raises
        :class:`OperationFailed`); ``on_log`` gets each step's log as it builds."""
        if on_log is None:
            return self._run(_templates.create_template(name, context, file, no_cache, network, wait, timeout, build_args))
        op = self._run(_templates.create_template(name, context, file, no_cache, network, wait=False, build_args=build_args))
        return self._follow_build(op, on_log, timeout)

    def _follow_build(self, op: Operation, on_log: Callable[[BuildLog], Any], timeout: float) -> Operation:
        for log in self.build_logs(op.id):
            on_log(log)
        return self._run(_core.wait_operation(op.id, timeout))

    def build_logs(self, operation_id: str) -> Iterator[BuildLog]:
        """A build's log from its start: ``log`` and ``progress`` events, then ``done``."""
        for event, data, _ in self._sse(Req("GET", f"/v1/operations/{_core.seg(operation_id)}/logs")):
            if event in ("log", "progress", "done"):
                log = BuildLog.from_json(json.loads(data))
                yield log
                if log.type == "done":
                    return

    def events(self, after: Optional[int] = None) -> Iterator[Event]:
        """Lifecycle events after ``after`` (default: all kept), then live; endless."""
        params = [("after", str(after))] if after is not None else []
        for event, data, _ in self._sse(Req("GET", "/v1/events", params=params)):
            if event in ("lifecycle", "network_denied"):
                yield Event.from_json(json.loads(data))

    # -- commands ---------------------------------------------------------------------------

    get_command = _sync(_core.get_command)
    list_commands = _sync(_core.list_commands)
    signal_command = _sync(_core.signal_command)
    kill_command = _sync(_core.kill_command)
    forget_command = _sync(_core.forget_command)
    command_output = _sync(_core.command_output)

    def start(
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
    ) -> "CommandHandle":
        """Starts a command (a string: a shell line; a list: an argv) and returns at once; the
        command outlives this client. With ``stdin``, write to it with the handle. With
        ``idempotency_key``, a retry (say after a dropped connection) returns the command the
        first call started, with a new attachment token, never a second process."""
        body = _core.command_request(command, env, cwd, user, stdin, timeout_s)
        cmd, attachment = self._run(_core.start_command(sandbox, body, idempotency_key))
        return CommandHandle(self, cmd, attachment)

    def run(
        self,
        sandbox: Sandboxish,
        command: Union[str, Sequence[str]],
        *,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
        stdin: Union[bytes, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
        timeout_s: Optional[float] = None,
    ) -> CommandResult:
        """Runs a command to its end, calling ``on_stdout``/``on_stderr`` with each piece of
        output as it arrives; ``stdin`` (bytes or text) is written and then closed. A non-zero
        exit is not an error: check ``result.exit_code``."""
        handle = self.start(
            sandbox, command, env=env, cwd=cwd, user=user, stdin=stdin is not None, timeout_s=timeout_s
        )
        if stdin is not None:
            handle.write_stdin(stdin)
            handle.close_stdin()
        return handle.wait(on_stdout=on_stdout, on_stderr=on_stderr)

    def attach(self, sandbox: Sandboxish, command: Commandish, offset: int = 0) -> "CommandHandle":
        """Re-attaches to a command (running or ended) from byte ``offset`` of its output, with a
        new attachment token (the old one is revoked)."""
        attachment = self._run(_core.new_attachment(sandbox, command))
        cmd = self._run(_core.get_command(sandbox, command))
        return CommandHandle(self, cmd, attachment, offset)

    def pty(
        self,
        sandbox: Sandboxish,
        command: Union[str, Sequence[str], None] = None,
        *,
        cols: int = 80,
        rows: int = 24,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        user: Optional[str] = None,
    ) -> "PtySession":
        """Starts a command on a pseudo-terminal (default: the user's login shell) and opens
        its WebSocket session."""
        body = _core.command_request(command, env, cwd, user, True, None, True, cols, rows)
        cmd, attachment = self._run(_core.start_command(sandbox, body))
        return PtySession.connect(self, cmd, attachment)

    # -- files ------------------------------------------------------------------------------

    write_file = _sync(_files.write_file)
    read_file = _sync(_files.read_file)
    upload_files = _sync(_files.upload_files)
    upload_dir = _sync(_files.upload_dir)
    download_dir = _sync(_files.download_dir)
    list_files = _sync(_files.list_files)
    stat_file = _sync(_files.stat_file)
    file_exists = _sync(_files.file_exists)
    make_dir = _sync(_files.make_dir)
    move_file = _sync(_files.move_file)
    remove_file = _sync(_files.remove_file)

    def watch(self, sandbox: Sandboxish, path: str, recursive: bool = False) -> Iterator[FileEvent]:
        """Changes under ``path`` as they happen; endless (break out of the loop to stop)."""
        params = [("path", path), ("recursive", "true" if recursive else "false")]
        req = Req("GET", _core.sandbox_path(sandbox, "/files:watch"), params=params)
        for event, data, _ in self._sse(req):
            parsed = json.loads(data)
            if event == "error":
                raise CoveError(parsed.get("code", "internal"), parsed.get("message", ""))
            yield FileEvent.from_json(parsed)


class CommandHandle:
    """A started command: its output (resumable from any offset), stdin, signals.

    ``offset`` is the next byte of output this handle reads; ``command`` the latest state seen
    (final after :meth:`wait` or once :meth:`output` ends).
    """

    def __init__(self, client: Client, command: Command, attachment: Attachment, offset: int = 0) -> None:
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

    def output(self) -> Iterator[Union[Output, Gap]]:
        """The output from :attr:`offset` until the command exits, reconnecting (and resuming
        exactly) when the stream breaks; afterwards :attr:`command` is the exited command."""
        cursor = AttachCursor(self.attachment, self.offset)
        renewed = False
        while True:
            try:
                for event, data, _ in self.client._sse(cursor.request()):
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
                # The attachment token expired: get a new one (once).
                renewed = True
                self.attachment = self.client._run(_core.new_attachment(self.sandbox_id, self.id))
                cursor.attachment = self.attachment

    def stdout_bytes(self, offset: int = 0) -> Iterator[bytes]:
        """The command's stdout as raw byte chunks, from stdout byte ``offset`` until the command
        exits, over the data plane's binary stream (``Accept: application/octet-stream``: no
        SSE, no base64, no stderr). A broken stream is resumed exactly; afterwards
        :attr:`command` is the exited command, read from the API (the stream itself carries no
        exit status). One binary stream per command at a time: a second answers
        :class:`Conflict` (``failed_precondition``)."""
        cursor = StdoutCursor(self.attachment, offset)
        while True:
            try:
                for chunk in self.client._raw(cursor.request()):
                    cursor.on_bytes(chunk)
                    yield chunk
                break
            except TransportError as err:
                cursor.failed(err)
            except Conflict as err:
                # Right after a break the server may not have seen the old stream go yet.
                if err.code != "failed_precondition" or cursor.failures == 0:
                    raise
                cursor.failed(err)
                time.sleep(0.1 * cursor.failures)
        self.command = self.client.get_command(self.sandbox_id, self.id, wait=30)

    def wait(
        self,
        on_stdout: Optional[OutputCallback] = None,
        on_stderr: Optional[OutputCallback] = None,
    ) -> CommandResult:
        """Reads the output to the end (calling the callbacks with each piece) and returns the
        result with everything read."""
        result = CommandResult(self.command)
        out, err = bytearray(), bytearray()
        for item in self.output():
            if isinstance(item, Gap):
                result.gaps.append(item)
            elif item.stream == "stdout":
                out += item.data
                if on_stdout:
                    on_stdout(item.data)
            else:
                err += item.data
                if on_stderr:
                    on_stderr(item.data)
        result.command = self.command
        result.stdout, result.stderr = bytes(out), bytes(err)
        return result

    def write_stdin(self, data: Union[bytes, str]) -> None:
        """Writes to the command's stdin (started with ``stdin=True``)."""
        self.client._run(_core.stdin_write(self.attachment, data))

    def close_stdin(self) -> None:
        """Closes the command's stdin (it reads EOF)."""
        self.client._run(_core.stdin_close(self.attachment))

    def signal(self, signal: str = "SIGTERM") -> Command:
        """Sends a signal to the command."""
        return self.client.signal_command(self.sandbox_id, self.id, signal)

    def kill(self, grace_ms: Optional[int] = None) -> Command:
        """Kills the command's whole session (SIGTERM, then SIGKILL); returns once it is gone."""
        return self.client.kill_command(self.sandbox_id, self.id, grace_ms)

    def refresh(self) -> Command:
        """The command's current state."""
        self.command = self.client.get_command(self.sandbox_id, self.id)
        return self.command


class PtySession:
    """A command on a pseudo-terminal, over its WebSocket: :meth:`send` keys, :meth:`resize`,
    :meth:`recv` output. Closing the session does not end the command."""

    def __init__(self, client: Client, command: Command, attachment: Attachment, ws: Any) -> None:
        self.client = client
        self.command = command
        self.attachment = attachment
        self._ws = ws

    @classmethod
    def connect(cls, client: Client, command: Command, attachment: Attachment, offset: int = 0) -> "PtySession":
        from websockets.exceptions import InvalidStatus
        from websockets.sync.client import connect

        url = _streams.pty_url(attachment, offset)
        try:
            # Entered by hand: the session outlives this block (closed by `close`); on every
            # websockets version `__enter__` hands out the open connection.
            ws = connect(url, additional_headers={"Authorization": f"Bearer {attachment.token}"}).__enter__()
        except InvalidStatus as err:
            raise from_answer(err.response.status_code, err.response.body or b"") from err
        except OSError as err:
            raise TransportError(f"GET {url}: {err}") from err
        return cls(client, command, attachment, ws)

    def send(self, data: Union[bytes, str]) -> None:
        """Writes keys to the terminal."""
        self._ws.send(data.encode() if isinstance(data, str) else bytes(data))

    def resize(self, cols: int, rows: int) -> None:
        """Changes the terminal's size."""
        self._ws.send(json.dumps({"resize": {"cols": cols, "rows": rows}}))

    def recv(self, timeout: Optional[float] = None) -> Union[Output, Gap, Command, None]:
        """The next terminal output (``Output``), dropped output (``Gap``), or the exited
        ``Command``; ``None`` once the session closed. ``TimeoutError`` after ``timeout`` s."""
        from websockets.exceptions import ConnectionClosed

        while True:
            try:
                message = self._ws.recv(timeout)
            except ConnectionClosed:
                return None
            item = _streams.pty_message(message)
            if isinstance(item, Command):
                self.command = item
            if item is not None:
                return item

    def wait(self, on_output: Optional[OutputCallback] = None, timeout: Optional[float] = None) -> CommandResult:
        """Reads the terminal until the command exits; the output is ``result.stdout``."""
        out = bytearray()
        result = CommandResult(self.command)
        while True:
            item = self.recv(timeout)
            if item is None or isinstance(item, Command):
                break
            if isinstance(item, Gap):
                result.gaps.append(item)
                continue
            out += item.data
            if on_output:
                on_output(item.data)
        result.command, result.stdout = self.command, bytes(out)
        return result

    def close(self) -> None:
        """Closes the WebSocket (the command keeps running)."""
        self._ws.close()

    def __enter__(self) -> "PtySession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


__all__ = ["Client", "CommandHandle", "PtySession"]
