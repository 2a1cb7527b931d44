"""The API's wire types as dataclasses.

Each has ``from_json(dict)``, which ignores fields it does not know (a newer server may add
some). Times are :class:`datetime.datetime` in UTC; states and kinds are the API's strings
(``"running"``, ``"create_sandbox"``, ...).
"""

from __future__ import annotations

import base64
import dataclasses
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Dict, List, Optional, Type, TypeVar

T = TypeVar("T")

#: Final operation states.
FINAL_OPERATION_STATES = ("succeeded", "failed", "cancelled")

#: Every sandbox state. ``degraded``: its guest agent died or stopped answering
#: (``state_reason`` says why); the server repairs it, keeping its files, and it returns to
#: ``running`` (or ends ``failed``). Commands and files answer ``sandbox_not_running`` meanwhile.
SANDBOX_STATES = (
    "creating",
    "running",
    "paused",
    "degraded",
    "suspending",
    "suspended",
    "waking",
    "deleting",
    "deleted",
    "failed",
)


def _time(value: Optional[str]) -> Optional[datetime]:
    if value is None:
        return None
    # Python < 3.11 does not read a trailing "Z" or more than 6 fraction digits.
    text = value.replace("Z", "+00:00")
    if "." in text:
        head, _, rest = text.partition(".")
        # The fraction's digits end where the zone (``+00:00``) begins.
        digits = rest[: len(rest) - len(rest.lstrip("0123456789"))]
        zone = rest[len(digits):]
        text = f"{head}.{digits[:6]}{zone}"
    return datetime.fromisoformat(text)


def _known(cls: Type[Any], data: Dict[str, Any]) -> Dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass
class Resources:
    """Limits of a sandbox: vCPUs, memory in MiB, process count, own disk in MiB (or none)."""

    vcpus: int = 1
    memory_mib: int = 512
    pids_max: int = 1024
    disk_mib: Optional[int] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Resources":
        return cls(**_known(cls, data))


@dataclass
class OperationError:
    """Why an operation failed: an API error code and a message."""

    code: str
    message: str


@dataclass
class Operation:
    """An asynchronous lifecycle change (create, delete, pause, ..., build)."""

    id: str
    kind: str
    state: str
    sandbox_id: Optional[str]
    template: Optional[str]
    release: Optional[int]
    progress: Optional[int]
    error: Optional[OperationError]
    created_at: datetime
    updated_at: datetime
    deadline: datetime

    @property
    def is_final(self) -> bool:
        """Whether the operation has ended (succeeded, failed or cancelled)."""
        return self.state in FINAL_OPERATION_STATES

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Operation":
        d = _known(cls, data)
        d["error"] = OperationError(**data["error"]) if data.get("error") else None
        for k in ("created_at", "updated_at", "deadline"):
            d[k] = _time(data[k])
        return cls(**d)


@dataclass
class NetworkPolicy:
    """A sandbox's egress policy. ``internet``: whether destinations no rule names are
    reachable; ``allow``/``deny``: IPv4 CIDRs or addresses, domains, ``*.domain`` (deny wins).
    The node's floor (its own addresses, metadata, other sandboxes, private ranges) stays closed
    whatever it says."""

    internet: bool = True
    allow: List[str] = field(default_factory=list)
    deny: List[str] = field(default_factory=list)

    def to_json(self) -> Dict[str, Any]:
        return {"internet": self.internet, "allow": list(self.allow), "deny": list(self.deny)}

    @classmethod
    def from_json(cls, data: Optional[Dict[str, Any]]) -> "NetworkPolicy":
        return cls(**_known(cls, data or {}))


@dataclass
class NetworkCounters:
    """Traffic of a sandbox through its gateway since its network was attached."""

    bytes_out: int = 0
    bytes_in: int = 0
    connections_allowed: int = 0
    connections_denied: int = 0
    dns_answered: int = 0
    dns_refused: int = 0

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "NetworkCounters":
        return cls(**_known(cls, data))


@dataclass
class SandboxNetwork:
    """A sandbox's network: its policy, whether a gateway enforces it now (not while
    suspended), its address and counters."""

    sandbox_id: str
    network: NetworkPolicy
    enforced: bool
    counters: NetworkCounters
    address: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "SandboxNetwork":
        d = _known(cls, data)
        d["network"] = NetworkPolicy.from_json(data.get("network"))
        d["counters"] = NetworkCounters.from_json(data.get("counters", {}))
        return cls(**d)


@dataclass
class SandboxPorts:
    """How to reach a sandbox's ports: ``host`` on the proxy listener with ``{port}`` in place
    of the port (``None`` without a proxy listener), ``path`` on the API, the port ``token``
    (header ``x-cove-port-token``), whether they are ``public`` (no credential needed), and
    the TCP ports its release ``EXPOSE``s (``exposed``: the ports to preview)."""

    sandbox_id: str
    token: str
    path: str
    public: bool = False
    host: Optional[str] = None
    exposed: List[int] = field(default_factory=list)

    def url(self, port: int, path: str = "/") -> Optional[str]:
        """``http://{port}-{id}.{domain}:{proxy port}{path}``, or ``None`` without a proxy."""
        if self.host is None:
            return None
        return "http://" + self.host.replace("{port}", str(port)) + path

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "SandboxPorts":
        return cls(**_known(cls, data))


@dataclass
class PortLink:
    """A one-time link to a port for a browser: the first visit before ``expires_at`` sets a
    cookie for that port's host and redirects; a second visit is refused."""

    sandbox_id: str
    port: int
    url: str
    expires_at: datetime

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "PortLink":
        d = _known(cls, data)
        d["expires_at"] = _time(data["expires_at"])
        return cls(**d)


@dataclass
class Sandbox:
    """A sandbox: an instance of a template release. ``state`` is one of
    :data:`SANDBOX_STATES`; ``state_reason`` says why it is ``degraded`` or ``failed``."""

    id: str
    template: str
    release: int
    state: str
    state_reason: Optional[str]
    runtime: str
    resources: Resources
    env: Dict[str, str]
    metadata: Dict[str, str]
    cwd: str
    user: str
    created_at: datetime
    updated_at: datetime
    idle_timeout_s: int = 0
    ttl_s: Optional[int] = None
    last_activity_at: Optional[datetime] = None
    memory_restored: Optional[bool] = None
    #: Content digest of the release it runs (``sha256:…``); pin it with ``template@digest``.
    release_digest: Optional[str] = None
    network: NetworkPolicy = field(default_factory=NetworkPolicy)
    #: Secret name -> the hosts its value is sent to (values are never shown).
    secrets: Dict[str, List[str]] = field(default_factory=dict)
    #: Whether its ports are reachable without a credential.
    public: bool = False
    #: The volumes it mounts: ``{"name", "path", "read_only"?}`` each.
    volumes: List[Dict[str, Any]] = field(default_factory=list)
    #: When it expires (``None``: never); then it is deleted or suspended (``on_expiry``).
    expires_at: Optional[datetime] = None
    #: What its expiry does: ``"delete"``, ``"suspend"`` or ``"pause"``.
    on_expiry: str = "delete"

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Sandbox":
        d = _known(cls, data)
        d["resources"] = Resources.from_json(data["resources"])
        d["network"] = NetworkPolicy.from_json(data.get("network"))
        d["secrets"] = {k: list(v.get("hosts", [])) for k, v in (data.get("secrets") or {}).items()}
        for k in ("created_at", "updated_at", "last_activity_at", "expires_at"):
            d[k] = _time(data.get(k))
        return cls(**d)


@dataclass
class Attachment:
    """Where and how to reach a command on the data plane (token scoped to that command)."""

    url: str
    token: str
    expires_at: datetime

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Attachment":
        return cls(url=data["url"], token=data["token"], expires_at=_time(data["expires_at"]))


@dataclass
class Command:
    """A process started in a sandbox. ``exit_code`` is ``None`` while it runs or when a
    signal ended it (then ``signal`` names it, e.g. ``"SIGKILL"``)."""

    id: str
    sandbox_id: str
    argv: List[str]
    user: str
    cwd: str
    pid: int
    state: str
    exit_code: Optional[int]
    signal: Optional[str]
    timed_out: bool
    truncated: bool
    output_bytes: int
    stdin_open: bool
    started_at: datetime
    ended_at: Optional[datetime]
    oom_killed: bool = False
    pty: bool = False

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Command":
        d = _known(cls, data)
        d["started_at"] = _time(data["started_at"])
        d["ended_at"] = _time(data.get("ended_at"))
        return cls(**d)


@dataclass
class Output:
    """A piece of a command's output: ``stream`` is ``"stdout"`` or ``"stderr"``; ``offset`` is
    the position of its first byte in the command's combined output."""

    stream: str
    offset: int
    data: bytes

    @classmethod
    def from_event(cls, stream: str, data: Dict[str, Any]) -> "Output":
        return cls(stream=stream, offset=data["offset"], data=base64.b64decode(data["data"]))


@dataclass
class Gap:
    """Output dropped over the kept cap: ``len`` bytes from ``offset`` are gone."""

    offset: int
    len: int


@dataclass
class CommandResult:
    """A finished command and everything it printed (as far as it was read)."""

    command: Command
    stdout: bytes = b""
    stderr: bytes = b""
    gaps: List[Gap] = field(default_factory=list)

    @property
    def exit_code(self) -> Optional[int]:
        """The exit code; ``None`` when a signal ended the command."""
        return self.command.exit_code

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.command.exit_code == 0

    @property
    def text(self) -> str:
        """stdout decoded as UTF-8 (bad bytes replaced)."""
        return self.stdout.decode("utf-8", errors="replace")


@dataclass
class FileInfo:
    """A file in a sandbox (``lstat``): ``type`` is ``file``, ``dir``, ``symlink`` or ``other``."""

    name: str
    path: str
    type: str
    size: int
    mode: int
    owner: str
    group: str
    mtime: datetime
    symlink_target: Optional[str] = None
    name_b64: Optional[str] = None
    path_b64: Optional[str] = None
    symlink_target_b64: Optional[str] = None
    #: A volume's files only (``/v1/volumes/{name}/files``): numeric owner and more times.
    uid: Optional[int] = None
    gid: Optional[int] = None
    atime: Optional[datetime] = None
    ctime: Optional[datetime] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "FileInfo":
        d = _known(cls, data)
        d["mtime"] = _time(data["mtime"])
        for k in ("atime", "ctime"):
            if data.get(k):
                d[k] = _time(data[k])
        return cls(**d)


@dataclass
class FileEvent:
    """A change under a watched path: ``event`` is ``create``, ``write``, ``remove``,
    ``rename`` (``from_path`` is the old path), ``chmod`` or ``overflow``."""

    event: str
    path: str
    type: str
    from_path: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "FileEvent":
        return cls(
            event=data["event"],
            path=data.get("path", ""),
            type=data.get("type", "other"),
            from_path=data.get("from"),
        )


@dataclass
class Release:
    """An immutable, numbered build of a template (``state``: building, ready, failed)."""

    template: str
    number: int
    state: str
    size_bytes: Optional[int]
    recipe_hash: str
    created_at: datetime
    #: Content digest of its root filesystem and defaults (``sha256:…``; when ready).
    digest: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Release":
        d = _known(cls, data)
        d["created_at"] = _time(data["created_at"])
        return cls(**d)


@dataclass
class Template:
    """A named starting environment and its releases."""

    name: str
    description: str
    defaults: Dict[str, Any]
    latest_release: Optional[int]
    releases: List[Release]

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Template":
        d = _known(cls, data)
        d["releases"] = [Release.from_json(r) for r in data.get("releases", [])]
        return cls(**d)


@dataclass
class Pool:
    """A warm pool: booted sandboxes of one template release and size kept ready, so a
    matching create is served at once. ``release`` is ``None`` when it follows the latest;
    ``ready`` and ``starting`` count its members now; ``hits`` and ``misses`` count creates
    it served and creates that matched it but found it empty."""

    name: str
    template: str
    release: Optional[int]
    resources: Resources
    min_ready: int
    max: int
    ready: int
    starting: int
    hits: int
    misses: int
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Pool":
        d = _known(cls, data)
        d["resources"] = Resources.from_json(data["resources"])
        d["created_at"] = _time(data["created_at"])
        d["updated_at"] = _time(data["updated_at"])
        return cls(**d)


@dataclass
class Volume:
    """A persistent volume: a node-local filesystem of ``size_mib`` MiB that sandboxes mount
    at create (``create_sandbox(volumes=[...])``). ``used_bytes`` is what its filesystem uses
    now (``None`` when the node cannot tell); ``mounted_by`` the ids of the sandboxes that
    mount it (it cannot be deleted while any does); ``node`` the node that keeps it on a
    cluster (``None`` for the server's own node): the sandboxes that mount it run there.
    ``storage`` is ``"local"`` or ``"object"`` (kept in the snapshot store; while no sandbox
    holds it, it is on no node: ``node`` and ``used_bytes`` are ``None``)."""

    name: str
    org: str
    size_mib: int
    created_at: datetime
    used_bytes: Optional[int] = None
    mounted_by: List[str] = field(default_factory=list)
    node: Optional[str] = None
    storage: str = "local"

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Volume":
        d = _known(cls, data)
        d["created_at"] = _time(data["created_at"])
        d["mounted_by"] = list(data.get("mounted_by") or [])
        return cls(**d)


@dataclass
class Checkpoint:
    """A saved state of a sandbox (``create_checkpoint``): its files, and with ``memory`` its
    processes' memory (qemu). ``state`` is ``creating``, ``ready`` or ``failed``; sandboxes are
    created from a ``ready`` one (``create_sandbox(checkpoint=...)``) with its template,
    release and resources. ``file_bytes`` is the file content saved and ``pause_ms`` how long
    the sandbox was frozen for it (both known once ``ready``)."""

    id: str
    org: str
    sandbox_id: str
    state: str
    template: str
    release: int
    resources: Resources
    runtime: str
    memory: bool
    created_at: datetime
    name: Optional[str] = None
    state_reason: Optional[str] = None
    env: Dict[str, str] = field(default_factory=dict)
    cwd: str = ""
    user: str = ""
    file_bytes: int = 0
    pause_ms: Optional[int] = None
    operation_id: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Checkpoint":
        d = _known(cls, data)
        d["resources"] = Resources.from_json(data["resources"])
        d["created_at"] = _time(data["created_at"])
        d["env"] = dict(data.get("env") or {})
        return cls(**d)


@dataclass
class Event:
    """A lifecycle event, or a refusal of a sandbox's gateway (``type`` ``network.denied``,
    ``destination`` and ``reason``): ``seq`` orders them (resume with ``after=seq``)."""

    seq: int
    time: datetime
    type: str
    sandbox_id: str
    operation_id: Optional[str] = None
    reason: Optional[str] = None
    #: For ``network.denied``: what the sandbox tried to reach.
    destination: Optional[str] = None
    #: For ``network.denied``: the host it tried (the name it carried, else the address).
    host: Optional[str] = None
    #: For ``network.denied``: the port it tried (``None`` for a DNS question).
    port: Optional[int] = None
    #: For ``network.denied``: the rule that refused it (``deny RULE``, ``floor (...)``, or
    #: ``internet off and no allow rule names it``).
    rule: Optional[str] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Event":
        d = _known(cls, data)
        d["time"] = _time(data["time"])
        return cls(**d)


@dataclass
class BuildLog:
    """An event of a build's log: ``type`` is ``log`` (``line``), ``progress`` (``percent``,
    ``phase``) or ``done`` (``operation``)."""

    type: str
    line: Optional[str] = None
    percent: Optional[int] = None
    phase: Optional[str] = None
    operation: Optional[Operation] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "BuildLog":
        op = data.get("operation")
        return cls(
            type=data["type"],
            line=data.get("line"),
            percent=data.get("percent"),
            phase=data.get("phase"),
            operation=Operation.from_json(op) if op else None,
        )


@dataclass
class Capabilities:
    """What the server's runtime can do."""

    runtime: str
    pause: bool
    suspend_memory: bool
    snapshot_store: str
    boundary: str = ""
    #: Sandboxes get a network behind an egress gateway (policies and secrets work).
    network: bool = False
    #: Each sandbox's root is an unprivileged host id range of its own (a user namespace;
    #: runc). ``False`` on qemu, whose boundary is the VM.
    user_namespaces: bool = False
    #: Persistent volumes are offered (runc on the server's node or on a cluster's nodes, the
    #: feature on).
    volumes: bool = False
    #: Seconds each class of record is kept (``operations_s``, ``events_s``, ``commands_s``,
    #: ``snapshots_s``, ``audit_s``); ``None``: kept until its owner goes.
    retention: Dict[str, Optional[int]] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "Capabilities":
        return cls(**_known(cls, data))


def from_json_list(cls: Type[T], items: List[Dict[str, Any]]) -> List[T]:
    """``[cls.from_json(item) for item in items]``."""
    return [cls.from_json(item) for item in items]  # type: ignore[attr-defined]


@dataclass
class CpuMetrics:
    """CPU use: ``usage_us`` microseconds used since start; ``rate`` CPUs busy on average since
    the previous sample (``None`` without one)."""

    usage_us: int
    rate: Optional[float] = None


@dataclass
class MemoryMetrics:
    """Memory use in bytes: now, the peak (``None`` if unknown), the limit (``None``: none)."""

    bytes: int
    peak_bytes: Optional[int] = None
    limit_bytes: Optional[int] = None


@dataclass
class DiskMetrics:
    """Disk use in bytes of the writable layer or own disk, and the own disk's size (``None``:
    no own disk)."""

    used_bytes: Optional[int] = None
    limit_bytes: Optional[int] = None


@dataclass
class NetworkMetrics:
    """Network traffic in bytes since start (not measured yet: the server sends ``null``)."""

    rx_bytes: int
    tx_bytes: int


@dataclass
class MetricsSample:
    """One reading of a sandbox's usage; ``network`` is ``None`` in this server version."""

    at: datetime
    cpu: CpuMetrics
    memory: MemoryMetrics
    disk: DiskMetrics
    network: Optional[NetworkMetrics] = None

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "MetricsSample":
        net = data.get("network")
        return cls(
            at=_time(data["at"]),
            cpu=CpuMetrics(**_known(CpuMetrics, data["cpu"])),
            memory=MemoryMetrics(**_known(MemoryMetrics, data["memory"])),
            disk=DiskMetrics(**_known(DiskMetrics, data["disk"])),
            network=NetworkMetrics(**_known(NetworkMetrics, net)) if net else None,
        )


@dataclass
class SandboxMetrics:
    """A sandbox's usage now (``current``) and its samples of the last 10 minutes, oldest
    first, one every ``interval_s`` seconds."""

    sandbox_id: str
    current: MetricsSample
    history: List[MetricsSample]
    interval_s: int

    @classmethod
    def from_json(cls, data: Dict[str, Any]) -> "SandboxMetrics":
        return cls(
            sandbox_id=data["sandbox_id"],
            current=MetricsSample.from_json(data["current"]),
            history=[MetricsSample.from_json(s) for s in data.get("history", [])],
            interval_s=data["interval_s"],
        )
