"""Cove's Python SDK: sandboxes for AI agents on your own machines.

``Client`` (sync) and ``AsyncClient`` (asyncio) cover the REST API and its data plane:
sandboxes and their lifecycle (with operation waits), commands (streamed output with
callbacks, re-attachment from any byte offset, stdin, signals, PTY sessions), files (one, many
at once, whole directories, watch), templates and their builds, and the lifecycle event
stream. Every API error raises a :class:`CoveError` subclass carrying ``code`` and
``request_id``.
"""

from .aio import AsyncClient, AsyncCommandHandle, AsyncPtySession
from .client import Client, CommandHandle, PtySession
from .errors import (
    Conflict,
    CoveError,
    InternalError,
    InvalidArgument,
    NoSpace,
    NotFound,
    OperationFailed,
    PayloadTooLarge,
    PermissionDenied,
    SandboxNotRunning,
    TransportError,
    Unauthorized,
    Unavailable,
)
from .types import (
    SANDBOX_STATES,
    Attachment,
    BuildLog,
    Capabilities,
    Checkpoint,
    Command,
    CommandResult,
    Event,
    FileEvent,
    FileInfo,
    Gap,
    NetworkCounters,
    NetworkPolicy,
    Operation,
    OperationError,
    Output,
    Pool,
    Volume,
    Release,
    Resources,
    MetricsSample,
    Sandbox,
    SandboxMetrics,
    SandboxNetwork,
    SandboxPorts,
    PortLink,
    Template,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "Checkpoint",
    "AsyncCommandHandle",
    "AsyncPtySession",
    "Attachment",
    "BuildLog",
    "Capabilities",
    "Client",
    "Command",
    "CommandHandle",
    "CommandResult",
    "Conflict",
    "CoveError",
    "Event",
    "FileEvent",
    "FileInfo",
    "Gap",
    "NetworkCounters",
    "NetworkPolicy",
    "InternalError",
    "InvalidArgument",
    "NoSpace",
    "NotFound",
    "Operation",
    "OperationError",
    "OperationFailed",
    "Output",
    "PayloadTooLarge",
    "PermissionDenied",
    "Pool",
    "Volume",
    "PtySession",
    "Release",
    "Resources",
    "MetricsSample",
    "Sandbox",
    "SandboxMetrics",
    "SandboxNetwork",
    "SandboxPorts",
    "PortLink",
    "SandboxNotRunning",
    "SANDBOX_STATES",
    "Template",
    "TransportError",
    "Unauthorized",
    "Unavailable",
]
