"""Exceptions of the SDK.

Every error answer of the API is ``{"code", "message", "request_id"}``; it becomes a
:class:`CoveError` subclass chosen by ``code`` (one table, :data:`_BY_CODE`), carrying ``code``,
``message``, ``request_id`` and the HTTP ``status``. A request that got no answer at all raises
:class:`TransportError`; an operation that ended ``failed`` or ``cancelled`` while the SDK waited
for it raises :class:`OperationFailed`.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type


class CoveError(Exception):
    """An error answer of the Cove API.

    Attributes:
        code: the API's error code (``"sandbox_not_found"``, ``"invalid_state"``, ...).
        message: the human-readable message.
        request_id: the server's id of the request (quote it when reporting a problem), or
            ``None`` when there was no answer.
        status: the HTTP status, or ``None`` when there was no answer.
    """

    def __init__(
        self,
        code: str,
        message: str,
        request_id: Optional[str] = None,
        status: Optional[int] = None,
    ) -> None:
        self.code = code
        self.message = message
        self.request_id = request_id
        self.status = status
        suffix = f" (request {request_id})" if request_id else ""
        super().__init__(f"{code}: {message}{suffix}")


class InvalidArgument(CoveError):
    """400 ``invalid_argument``: a field of the request is wrong; the message names it."""


class Unauthorized(CoveError):
    """401 ``unauthorized``: missing or wrong token."""


class PermissionDenied(CoveError):
    """403 ``forbidden`` or ``permission_denied``."""


class NotFound(CoveError):
    """404: the route, sandbox, template, release, command, operation or file does not exist."""


class Conflict(CoveError):
    """409: the resource is not in a state that allows the call (``invalid_state``,
    ``sandbox_not_running``, ``failed_precondition``, ``idempotency_mismatch``, ``guest_restarted``,
    ``already_exists``, ``cancelled``)."""


class SandboxNotRunning(Conflict):
    """409 ``sandbox_not_running``: the sandbox is paused or suspended (resume or wake it), or
    ``degraded`` while the server repairs its guest agent (retry in a few seconds)."""


class PayloadTooLarge(CoveError):
    """413 ``payload_too_large`` (or 431 ``headers_too_large``)."""


class NoSpace(CoveError):
    """507 ``no_space``: the sandbox's disk is full."""


class Unavailable(CoveError):
    """503 ``unavailable``, 501 ``not_implemented`` or 504 ``deadline_exceeded``."""


class InternalError(CoveError):
    """500 ``internal``: a server-side failure (details are in the server's log), or
    ``snapshot_corrupt``: a suspended sandbox's snapshot cannot be read back, or
    ``release_corrupt``: a release fetched from the snapshot store does not match its digest."""


class TransportError(CoveError):
    """No answer: the connection failed or broke. ``code`` is ``"transport"``."""

    def __init__(self, message: str) -> None:
        super().__init__("transport", message)


class OperationFailed(CoveError):
    """An operation the SDK waited for ended ``failed`` or ``cancelled``.

    ``code`` and ``message`` are the operation's error (``"cancelled"`` when it has none);
    ``operation`` is the final :class:`cove.Operation`.
    """

    def __init__(self, operation: Any) -> None:
        self.operation = operation
        error = operation.error
        code = error.code if error else operation.state
        message = error.message if error else f"operation {operation.id} {operation.state}"
        super().__init__(code, message)


_BY_CODE: Dict[str, Type[CoveError]] = {
    "invalid_argument": InvalidArgument,
    "unauthorized": Unauthorized,
    "forbidden": PermissionDenied,
    "permission_denied": PermissionDenied,
    "not_found": NotFound,
    "sandbox_not_found": NotFound,
    "template_not_found": NotFound,
    "release_not_found": NotFound,
    "command_not_found": NotFound,
    "operation_not_found": NotFound,
    "file_not_found": NotFound,
    "pool_not_found": NotFound,
    "node_not_found": NotFound,
    "volume_not_found": NotFound,
    "volume_exists": Conflict,
    "volume_in_use": Conflict,
    "unsupported": InvalidArgument,
    "oci_import_disabled": PermissionDenied,
    "insufficient_storage": NoSpace,
    "method_not_allowed": InvalidArgument,
    "invalid_state": Conflict,
    "sandbox_not_running": SandboxNotRunning,
    "idempotency_mismatch": Conflict,
    "guest_restarted": Conflict,
    "already_exists": Conflict,
    "failed_precondition": Conflict,
    "cancelled": Conflict,
    "payload_too_large": PayloadTooLarge,
    "headers_too_large": PayloadTooLarge,
    "no_space": NoSpace,
    "not_implemented": Unavailable,
    "unavailable": Unavailable,
    "deadline_exceeded": Unavailable,
    "snapshot_corrupt": InternalError,
    "release_corrupt": InternalError,
    "internal": InternalError,
}


def from_answer(status: int, body: bytes) -> CoveError:
    """The exception for an error answer with HTTP ``status`` and raw ``body``.

    A body that is not the API's JSON error (a proxy's page, say) keeps its first 200
    characters as the message, with code ``"http_<status>"``.
    """
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and isinstance(parsed.get("code"), str):
        code = parsed["code"]
        cls = _BY_CODE.get(code, CoveError)
        return cls(code, str(parsed.get("message", "")), parsed.get("request_id"), status)
    text = body[:200].decode("utf-8", errors="replace")
    return CoveError(f"http_{status}", text or f"HTTP {status}", None, status)
