"""What the sync and async clients share, free of I/O.

Each API call is a generator that yields :class:`Req` values and receives their decoded answers
(or has the call's :class:`~cove.errors.CoveError` thrown into it); a driver in ``client.py``
(httpx.Client) or ``aio.py`` (httpx.AsyncClient) sends them. Multi-step calls (create, then wait
for the operation, then read the sandbox) are one generator, written once for both clients.
File calls are in ``_files``; stream parsing (server-sent events, resumable output, PTY
messages) in ``_streams``.
"""

from __future__ import annotations

import base64
import builtins
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, Generator, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from .errors import CoveError, OperationFailed
from .types import (
    Attachment,
    FileInfo,
    Capabilities,
    Checkpoint,
    Command,
    CommandResult,
    NetworkPolicy,
    Operation,
    Pool,
    PortLink,
    Resources,
    Sandbox,
    SandboxMetrics,
    SandboxNetwork,
    SandboxPorts,
    Template,
    Volume,
    from_json_list,
)

#: Default server URL (``COVE_URL`` overrides it).
DEFAULT_URL = "http://127.0.0.1:7700"
#: Default data dir, where the server writes ``admin.token`` (``COVE_DATA_DIR`` overrides it).
DEFAULT_DATA_DIR = "/var/lib/cove"
#: Longest single long-poll the SDK asks the server for, in seconds.
LONG_POLL_S = 30

Call = Generator["Req", Any, Any]
Sandboxish = Union[str, Sandbox]
Commandish = Union[str, Command]


@dataclass
class Req:
    """One HTTP request of a call.

    ``path`` is under the server's base URL, or an absolute URL (the data plane). ``token``
    replaces the management token (an attachment token). The answer is decoded JSON, or the
    raw bytes with ``raw``, or ``None`` for an empty answer. ``timeout`` is the read timeout in
    seconds (long-polls need more than the default).
    """

    method: str
    path: str
    params: List[Tuple[str, str]] = field(default_factory=list)
    json: Any = None
    content: Any = None
    files: Optional[List[Tuple[str, Any]]] = None
    headers: Dict[str, str] = field(default_factory=dict)
    token: Optional[str] = None
    timeout: Optional[float] = None
    raw: bool = False


def default_url() -> str:
    """``COVE_URL``, else :data:`DEFAULT_URL`."""
    return os.environ.get("COVE_URL") or DEFAULT_URL


def default_token() -> str:
    """``COVE_TOKEN``, else the contents of ``$COVE_DATA_DIR/admin.token`` (default data dir
    ``/var/lib/cove``). Raises :class:`CoveError` (code ``no_token``) when neither is there."""
    token = os.environ.get("COVE_TOKEN", "").strip()
    if token:
        return token
    path = os.path.join(os.environ.get("COVE_DATA_DIR") or DEFAULT_DATA_DIR, "admin.token")
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except OSError as err:
        raise CoveError(
            "no_token", f"no token: pass token=, set COVE_TOKEN, or make {path} readable ({err})"
        ) from None
    if not token:
        raise CoveError("no_token", f"{path} is empty")
    return token


def sid(sandbox: Sandboxish) -> str:
    """The id of a sandbox given as an id or a :class:`Sandbox`."""
    return sandbox.id if isinstance(sandbox, Sandbox) else sandbox


def cid(command: Commandish) -> str:
    """The id of a command given as an id or a :class:`Command`."""
    return command.id if isinstance(command, Command) else command


def seg(value: str) -> str:
    """A path segment, percent-encoded."""
    return quote(value, safe="")


def sandbox_path(sandbox: Sandboxish, *rest: str) -> str:
    return "/v1/sandboxes/" + seg(sid(sandbox)) + "".join(rest)


def path_params(path: Union[str, bytes], key: str = "path") -> List[Tuple[str, str]]:
    """A path as a query parameter: text as ``path``, bytes as ``path_b64``."""
    if isinstance(path, bytes):
        return [(f"{key}_b64", base64.b64encode(path).decode())]
    return [(key, path)]


def drop_none(**kwargs: Any) -> Dict[str, Any]:
    return {k: v for k, v in kwargs.items() if v is not None}


# ---------------------------------------------------------------------------------------------
# Operations and lifecycle


def get_operation(operation_id: str) -> Call:
    data = yield Req("GET", f"/v1/operations/{seg(operation_id)}")
    return Operation.from_json(data)


def wait_operation(operation_id: str, timeout: float = 1800, check: bool = True) -> Call:
    """Long-polls until the operation is final; with ``check``, a failed or cancelled one
    raises :class:`OperationFailed`. Past ``timeout`` seconds: ``CoveError("timeout")``."""
    give_up = time.monotonic() + timeout
    while True:
        left = give_up - time.monotonic()
        wait = max(0, min(LONG_POLL_S, int(left + 0.999)))
        data = yield Req(
            "GET",
            f"/v1/operations/{seg(operation_id)}",
            params=[("wait", f"{wait}s")],
            timeout=wait + 30,
        )
        op = Operation.from_json(data)
        if op.is_final:
            if check and op.state != "succeeded":
                raise OperationFailed(op)
            return op
        if time.monotonic() >= give_up:
            raise CoveError("timeout", f"operation {operation_id} still {op.state} after {timeout}s")


def list_operations(sandbox: Optional[Sandboxish] = None, limit: Optional[int] = None) -> Call:
    params = []
    if sandbox is not None:
        params.append(("sandbox_id", sid(sandbox)))
    if limit is not None:
        params.append(("limit", str(limit)))
    data = yield Req("GET", "/v1/operations", params=params)
    return from_json_list(Operation, data["operations"])


def cancel_operation(operation_id: str) -> Call:
    data = yield Req("POST", f"/v1/operations/{seg(operation_id)}/cancel", json={})
    return Operation.from_json(data)


def _lifecycle(verb: str, sandbox: Sandboxish, wait: bool, deadline_s: Optional[int]) -> Call:
    data = yield Req("POST", sandbox_path(sandbox, f"/{verb}"), json=drop_none(deadline_s=deadline_s))
    op = Operation.from_json(data)
    if wait:
        op = yield from wait_operation(op.id)
    return op


def pause(sandbox: Sandboxish, wait: bool = True, deadline_s: Optional[int] = None) -> Call:
    """Freezes the sandbox's processes; returns the operation (final when ``wait``)."""
    return (yield from _lifecycle("pause", sandbox, wait, deadline_s))


def resume(sandbox: Sandboxish, wait: bool = True, deadline_s: Optional[int] = None) -> Call:
    """Thaws a paused sandbox; returns the operation (final when ``wait``)."""
    return (yield from _lifecycle("resume", sandbox, wait, deadline_s))


def suspend(sandbox: Sandboxish, wait: bool = True, deadline_s: Optional[int] = None) -> Call:
    """Saves the sandbox to the snapshot store and frees its node resources."""
    return (yield from _lifecycle("suspend", sandbox, wait, deadline_s))


def wake(sandbox: Sandboxish, wait: bool = True, deadline_s: Optional[int] = None) -> Call:
    """Restores a suspended sandbox (``Sandbox.memory_restored`` says whether processes did)."""
    return (yield from _lifecycle("wake", sandbox, wait, deadline_s))


def capabilities() -> Call:
    data = yield Req("GET", "/v1/capabilities")
    return Capabilities.from_json(data)


# ---------------------------------------------------------------------------------------------
# Sandboxes


def create_sandbox(
    template: Optional[str] = None,
    *,
    release: Optional[int] = None,
    runtime: Optional[str] = None,
    resources: Union[Resources, Mapping[str, int], None] = None,
    env: Optional[Mapping[str, str]] = None,
    metadata: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    user: Optional[str] = None,
    idle_timeout_s: Optional[int] = None,
    ttl_s: Optional[int] = None,
    expires_at: Optional[datetime] = None,
    on_expiry: Optional[str] = None,
    network: Union[NetworkPolicy, Mapping[str, Any], None] = None,
    secrets: Optional[Mapping[str, Mapping[str, Any]]] = None,
    public: bool = False,
    volumes: Optional[Sequence[Union[str, Mapping[str, Any]]]] = None,
    checkpoint: Union[str, Checkpoint, None] = None,
    idempotency_key: Optional[str] = None,
    wait: bool = True,
    timeout: float = 600,
) -> Call:
    """Creates a sandbox; with ``wait``, returns it once it runs (a failed create raises
    :class:`OperationFailed`), else at once in state ``creating``. ``network`` is its egress
    policy (:class:`NetworkPolicy` or ``{"internet": bool, "allow": [...], "deny": [...]}``);
    ``secrets`` maps a name to ``{"value": ..., "hosts": [...]}``: commands get a placeholder in
    that variable, and the gateway puts the value in its place in HTTPS requests to ``hosts``.
    ``runtime`` (``runc``, ``qemu``) must be the server's (:meth:`capabilities`) when given.
    ``public`` makes its ports reachable without a credential (:meth:`set_ports` changes it).
    ``volumes`` mounts volumes (:meth:`create_volume`): ``"NAME:/path"``, ``"NAME:/path:ro"``
    or ``{"name", "path", "read_only"}`` each. ``checkpoint`` starts it from a ``ready``
    checkpoint (or its id; its template, release and resources, so leave those out).
    ``ttl_s`` (seconds after creation) or ``expires_at`` (an aware datetime) is when it
    expires; ``on_expiry`` (``"delete"``, the default, ``"suspend"`` or ``"pause"``) what that does
    (:meth:`set_expiry` changes both live)."""
    if isinstance(resources, Resources):
        resources = drop_none(**vars(resources))
    if isinstance(network, NetworkPolicy):
        network = network.to_json()
    body = drop_none(
        template=template,
        release=release,
        runtime=runtime,
        resources=dict(resources) if resources else None,
        env=dict(env) if env else None,
        metadata=dict(metadata) if metadata else None,
        cwd=cwd,
        user=user,
        idle_timeout_s=idle_timeout_s,
        ttl_s=ttl_s,
        expires_at=expires_at.isoformat() if expires_at is not None else None,
        on_expiry=on_expiry,
        network=dict(network) if network is not None else None,
        secrets={k: dict(v) for k, v in secrets.items()} if secrets else None,
        public=True if public else None,
        volumes=[volume_mount(v) for v in volumes] if volumes else None,
        checkpoint=checkpoint.id if isinstance(checkpoint, Checkpoint) else checkpoint,
    )
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    data = yield Req("POST", "/v1/sandboxes", json=body, headers=headers)
    sandbox = Sandbox.from_json(data["sandbox"])
    if not wait:
        return sandbox
    yield from wait_operation(data["operation"]["id"], timeout)
    return (yield from get_sandbox(sandbox.id))


def volume_mount(v: Union[str, Mapping[str, Any]]) -> Dict[str, Any]:
    """One entry of ``volumes``: ``"NAME:/path[:ro]"`` or a mapping, as the API takes it."""
    if not isinstance(v, str):
        return dict(v)
    name, sep, rest = v.partition(":")
    if not sep or not rest.startswith("/"):
        raise ValueError(f"{v!r} is not NAME:/path or NAME:/path:ro")
    path, read_only = (rest[:-3], True) if rest.endswith(":ro") else (rest, False)
    return drop_none(name=name, path=path, read_only=True if read_only else None)


def get_sandbox(sandbox: Sandboxish) -> Call:
    data = yield Req("GET", sandbox_path(sandbox))
    return Sandbox.from_json(data)


def sandbox_metrics(sandbox: Sandboxish) -> Call:
    """CPU, memory and disk use of a running or paused sandbox, now and its last minutes."""
    data = yield Req("GET", sandbox_path(sandbox, "/metrics"))
    return SandboxMetrics.from_json(data)


def network(sandbox: Sandboxish) -> Call:
    """A sandbox's egress policy and its gateway's counters."""
    data = yield Req("GET", sandbox_path(sandbox, "/network"))
    return SandboxNetwork.from_json(data)


def set_network(
    sandbox: Sandboxish,
    policy: Union[NetworkPolicy, Mapping[str, Any], None] = None,
    *,
    internet: bool = True,
    allow: Sequence[str] = (),
    deny: Sequence[str] = (),
) -> Call:
    """Replaces a sandbox's egress policy (``policy``, or ``internet``/``allow``/``deny``);
    the next connection follows it. Returns the network as the gateway now enforces it."""
    if isinstance(policy, NetworkPolicy):
        body: Dict[str, Any] = policy.to_json()
    elif policy is not None:
        body = dict(policy)
    else:
        body = {"internet": internet, "allow": list(allow), "deny": list(deny)}
    data = yield Req("PUT", sandbox_path(sandbox, "/network"), json=body)
    return SandboxNetwork.from_json(data)


def set_expiry(
    sandbox: Sandboxish,
    in_s: Optional[int] = None,
    *,
    at: Optional[datetime] = None,
    on_expiry: Optional[str] = None,
) -> Call:
    """Sets when a sandbox expires: ``in_s`` seconds from now, or ``at`` (an aware datetime);
    a time past expires it at once. ``on_expiry`` (``"delete"``, ``"suspend"`` or ``"pause"``) says what
    the expiry does (default: what it did before). Returns the sandbox."""
    if (in_s is None) == (at is None):
        raise ValueError("give exactly one of in_s and at")
    body = drop_none(
        in_s=in_s,
        expires_at=at.isoformat() if at is not None else None,
        on_expiry=on_expiry,
    )
    data = yield Req("PUT", sandbox_path(sandbox, "/expiry"), json=body)
    return Sandbox.from_json(data)


def clear_expiry(sandbox: Sandboxish) -> Call:
    """The sandbox expires no more (its TTL included). Returns the sandbox."""
    data = yield Req("DELETE", sandbox_path(sandbox, "/expiry"))
    return Sandbox.from_json(data)


def ports(sandbox: Sandboxish) -> Call:
    """How to reach a sandbox's ports (:class:`SandboxPorts`: proxy host, token, public)."""
    data = yield Req("GET", sandbox_path(sandbox, "/ports"))
    return SandboxPorts.from_json(data)


def set_ports(sandbox: Sandboxish, public: bool) -> Call:
    """Makes a sandbox's ports public (no credential) or private again; the next request
    follows it."""
    data = yield Req("PUT", sandbox_path(sandbox, "/ports"), json={"public": public})
    return SandboxPorts.from_json(data)


def port_link(sandbox: Sandboxish, port: int, path: Optional[str] = None) -> Call:
    """A one-time link to ``port`` for a browser (:class:`PortLink`); needs the server's proxy
    listener."""
    data = yield Req("POST", sandbox_path(sandbox, "/ports:link"), json=drop_none(port=port, path=path))
    return PortLink.from_json(data)


def list_sandboxes(
    state: Optional[str] = None,
    template: Optional[str] = None,
    metadata: Optional[Mapping[str, str]] = None,
    limit: Optional[int] = None,
) -> Call:
    """Sandboxes, newest first, filtered by state, template and metadata (every given
    ``KEY: VALUE`` must match). Follows the pages; ``limit`` caps the total."""
    out: List[Sandbox] = []
    cursor: Optional[str] = None
    while True:
        params = [("state", state), ("template", template), ("cursor", cursor)]
        params += [(f"metadata.{k}", v) for k, v in (metadata or {}).items()]
        if limit is not None:
            params.append(("limit", str(min(100, limit - len(out)))))
        data = yield Req("GET", "/v1/sandboxes", params=[(k, v) for k, v in params if v is not None])
        out += from_json_list(Sandbox, data["sandboxes"])
        cursor = data.get("next_cursor")
        if not cursor or (limit is not None and len(out) >= limit):
            return out


def delete_sandbox(sandbox: Sandboxish, wait: bool = True) -> Call:
    """Deletes a sandbox (and its snapshot); returns the operation (final when ``wait``)."""
    data = yield Req("DELETE", sandbox_path(sandbox))
    op = Operation.from_json(data)
    if wait:
        op = yield from wait_operation(op.id)
    return op


# ---------------------------------------------------------------------------------------------
# Templates


def list_templates() -> Call:
    data = yield Req("GET", "/v1/templates")
    return from_json_list(Template, data["templates"])


def get_template(name: str) -> Call:
    data = yield Req("GET", f"/v1/templates/{seg(name)}")
    return Template.from_json(data)


def build_release(name: str, no_cache: bool = False, wait: bool = True, timeout: float = 3600) -> Call:
    """Builds a new release of template ``name``; returns the build operation (final when
    ``wait``; a failed build raises :class:`OperationFailed`)."""
    data = yield Req("POST", f"/v1/templates/{seg(name)}/releases", json={"no_cache": no_cache})
    op = Operation.from_json(data["operation"])
    if wait:
        op = yield from wait_operation(op.id, timeout)
    return op


# ---------------------------------------------------------------------------------------------
# Warm pools


def put_pool(
    name: str,
    template: str,
    *,
    min_ready: int = 1,
    max: Optional[int] = None,
    release: Optional[int] = None,
    resources: Union[Resources, Mapping[str, int], None] = None,
) -> Call:
    """Creates warm pool ``name`` or changes its settings (its counters stay); the server boots
    members in the background. ``max`` defaults to ``min_ready`` (at least 1); ``release``
    defaults to the template's latest, followed when a new one is built."""
    if isinstance(resources, Resources):
        resources = drop_none(**vars(resources))
    body = drop_none(
        template=template,
        release=release,
        resources=dict(resources) if resources else None,
        min_ready=min_ready,
        max=max if max is not None else builtins.max(min_ready, 1),
    )
    data = yield Req("PUT", f"/v1/pools/{seg(name)}", json=body)
    return Pool.from_json(data)


def get_pool(name: str) -> Call:
    data = yield Req("GET", f"/v1/pools/{seg(name)}")
    return Pool.from_json(data)


def list_pools() -> Call:
    data = yield Req("GET", "/v1/pools")
    return from_json_list(Pool, data["pools"])


def delete_pool(name: str) -> Call:
    """Deletes the pool; the sandboxes it kept ready are deleted in the background."""
    yield Req("DELETE", f"/v1/pools/{seg(name)}")


# ---------------------------------------------------------------------------------------------
# Volumes


def create_volume(name: str, size_mib: int, storage: str = "local") -> Call:
    """Makes an empty volume of ``size_mib`` MiB in the caller's org (writes past the size fail
    with ENOSPC in a sandbox, :class:`ApiError` ``insufficient_storage`` through the files API).
    ``storage="object"`` keeps it in the server's snapshot store: it follows its sandboxes to
    whichever node they run or wake on (``"local"``: the disk of one node)."""
    body = {"name": name, "size_mib": size_mib}
    if storage != "local":
        body["storage"] = storage
    data = yield Req("POST", "/v1/volumes", json=body)
    return Volume.from_json(data)


def get_volume(name: str) -> Call:
    data = yield Req("GET", f"/v1/volumes/{seg(name)}")
    return Volume.from_json(data)


def list_volumes() -> Call:
    data = yield Req("GET", "/v1/volumes")
    return from_json_list(Volume, data["volumes"])


def delete_volume(name: str) -> Call:
    """Deletes the volume and its data (``volume_in_use`` while a sandbox mounts it)."""
    yield Req("DELETE", f"/v1/volumes/{seg(name)}")


def write_volume_file(
    name: str,
    path: str,
    data: Union[bytes, str, Any],
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    mode: Optional[int] = None,
) -> Call:
    """Writes one file of a volume atomically, without a sandbox (missing parents are made);
    owned by ``uid``/``gid`` (default 1000) with ``mode`` (default 0o644). Returns its FileInfo."""
    content = data.encode() if isinstance(data, str) else data
    params = [("path", path)] + _attr_params(uid, gid, mode)
    resp = yield Req("PUT", f"/v1/volumes/{seg(name)}/files", params=params, content=content, timeout=600)
    return FileInfo.from_json(resp)


def _attr_params(uid: Optional[int], gid: Optional[int], mode: Optional[int]) -> List[Tuple[str, str]]:
    return [(k, str(v)) for k, v in (("uid", uid), ("gid", gid), ("mode", mode)) if v is not None]


def _attrs(uid: Optional[int], gid: Optional[int], mode: Optional[int]) -> Dict[str, int]:
    return {k: v for k, v in (("uid", uid), ("gid", gid), ("mode", mode)) if v is not None}


def stat_volume_file(name: str, path: str) -> Call:
    """Describes a path of a volume (``lstat``), with ``uid``, ``gid``, ``atime``, ``ctime``."""
    data = yield Req("GET", f"/v1/volumes/{seg(name)}/files:stat", params=[("path", path)])
    return FileInfo.from_json(data)


def remove_volume_file(name: str, path: str) -> Call:
    """Removes a path of a volume: a file, a symlink (the link only) or a directory with
    everything below it."""
    yield Req("DELETE", f"/v1/volumes/{seg(name)}/files", params=[("path", path)])


def make_volume_dir(
    name: str,
    path: str,
    parents: bool = True,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    mode: Optional[int] = None,
) -> Call:
    """Makes a directory of a volume (``parents``: with its parents, fine when it exists)."""
    body = {"path": path, "parents": parents, **_attrs(uid, gid, mode)}
    data = yield Req("POST", f"/v1/volumes/{seg(name)}/files:mkdir", json=body)
    return FileInfo.from_json(data)


def set_volume_file_attrs(
    name: str,
    path: str,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    mode: Optional[int] = None,
) -> Call:
    """Sets the owner and permission bits of a path of a volume (absent ones are kept)."""
    data = yield Req("PATCH", f"/v1/volumes/{seg(name)}/files", params=[("path", path)], json=_attrs(uid, gid, mode))
    return FileInfo.from_json(data)


def read_volume_file(name: str, path: str) -> Call:
    """The bytes of one file of a volume, without a sandbox."""
    data = yield Req("GET", f"/v1/volumes/{seg(name)}/files", params=[("path", path)], raw=True, timeout=600)
    return data


def list_volume_files(name: str, path: str = "/", depth: int = 1) -> Call:
    """The entries of a directory of a volume, by name, down to ``depth`` levels (each
    directory's entries right after it)."""
    params = [("path", path), ("depth", str(depth))]
    data = yield Req("GET", f"/v1/volumes/{seg(name)}/files:list", params=params)
    return from_json_list(FileInfo, data["entries"])


# ---------------------------------------------------------------------------------------------
# Commands


def command_request(
    command: Union[str, Sequence[str], None],
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    user: Optional[str] = None,
    stdin: bool = False,
    timeout_s: Optional[float] = None,
    pty: bool = False,
    cols: Optional[int] = None,
    rows: Optional[int] = None,
) -> Dict[str, Any]:
    """The body of ``POST .../commands``: a string is a shell line (``bash -l -c``), a list an
    argv run without a shell; ``None`` (with ``pty``) the user's login shell."""
    if command is None:
        if not pty:
            raise ValueError("a command is needed (a string for the shell, or an argv list)")
        command = 'exec "${SHELL:-/bin/sh}" -l'
    body: Dict[str, Any] = drop_none(
        env=dict(env) if env else None,
        cwd=cwd,
        user=user,
        timeout_s=timeout_s,
        cols=cols,
        rows=rows,
    )
    if isinstance(command, str):
        body["shell"] = command
    else:
        body["argv"] = list(command)
    body["stdin"] = stdin
    body["pty"] = pty
    return body


def start_command(sandbox: Sandboxish, body: Dict[str, Any], idempotency_key: Optional[str] = None) -> Call:
    """Starts a command; with ``idempotency_key`` a retry returns the first command (a new
    attachment token, never a second process)."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    data = yield Req("POST", sandbox_path(sandbox, "/commands"), json=body, headers=headers)
    return Command.from_json(data["command"]), Attachment.from_json(data["attachment"])


def get_command(sandbox: Sandboxish, command: Commandish, wait: Optional[float] = None) -> Call:
    """The command; with ``wait`` seconds, long-polls until it has exited (or the wait ends)."""
    params = [("wait", f"{int(min(wait, LONG_POLL_S))}s")] if wait else []
    data = yield Req(
        "GET",
        sandbox_path(sandbox, f"/commands/{seg(cid(command))}"),
        params=params,
        timeout=(wait or 0) + 30,
    )
    return Command.from_json(data)


def list_commands(sandbox: Sandboxish, state: Optional[str] = None) -> Call:
    params = [("state", state)] if state else []
    data = yield Req("GET", sandbox_path(sandbox, "/commands"), params=params)
    return from_json_list(Command, data["commands"])


def signal_command(sandbox: Sandboxish, command: Commandish, signal: str = "SIGTERM") -> Call:
    data = yield Req(
        "POST", sandbox_path(sandbox, f"/commands/{seg(cid(command))}/signal"), json={"signal": signal}
    )
    return Command.from_json(data)


def kill_command(sandbox: Sandboxish, command: Commandish, grace_ms: Optional[int] = None) -> Call:
    """SIGTERM to the command's whole session, SIGKILL after ``grace_ms``; returns once gone."""
    data = yield Req(
        "POST",
        sandbox_path(sandbox, f"/commands/{seg(cid(command))}/kill"),
        json=drop_none(grace_ms=grace_ms),
        timeout=90,
    )
    return Command.from_json(data)


def forget_command(sandbox: Sandboxish, command: Commandish) -> Call:
    yield Req("DELETE", sandbox_path(sandbox, f"/commands/{seg(cid(command))}"))


def new_attachment(sandbox: Sandboxish, command: Commandish) -> Call:
    data = yield Req("POST", sandbox_path(sandbox, f"/commands/{seg(cid(command))}/attachment"), json={})
    return Attachment.from_json(data)


def command_output(
    sandbox: Sandboxish,
    command: Commandish,
    wait: Optional[float] = None,
    max_bytes: Optional[int] = None,
) -> Call:
    """Buffered output (head and tail within ``max_bytes``), after waiting up to ``wait``
    seconds for the command to exit."""
    params = []
    if wait:
        params.append(("wait", f"{int(min(wait, 60))}s"))
    if max_bytes is not None:
        params.append(("max_bytes", str(max_bytes)))
    data = yield Req(
        "GET",
        sandbox_path(sandbox, f"/commands/{seg(cid(command))}/output"),
        params=params,
        timeout=(wait or 0) + 30,
    )
    return CommandResult(
        command=Command.from_json(data["command"]),
        stdout=base64.b64decode(data["stdout"]),
        stderr=base64.b64decode(data["stderr"]),
    )


def stdin_write(attachment: Attachment, data: Union[bytes, str]) -> Call:
    payload = data.encode() if isinstance(data, str) else bytes(data)
    # The data plane takes at most 1 MiB a request.
    for start in range(0, max(len(payload), 1), 1 << 20):
        yield Req(
            "POST",
            attachment.url + "/stdin",
            content=payload[start : start + (1 << 20)],
            headers={"Content-Type": "application/octet-stream"},
            token=attachment.token,
        )


def stdin_close(attachment: Attachment) -> Call:
    yield Req("POST", attachment.url + "/stdin:close", token=attachment.token)
