"""Checkpoint calls shared by the sync and async clients (see ``_core``): save a running
sandbox's state, list and delete checkpoints, roll a sandbox back, fork it, and move a
checkpoint between servers as an archive."""

from __future__ import annotations

import contextlib
import os
from typing import Any, BinaryIO, Dict, Iterator, List, Mapping, Optional, Tuple, Union

from ._core import Call, Req, Sandboxish, drop_none, get_sandbox, sandbox_path, seg, wait_operation
from .types import Checkpoint, Sandbox, from_json_list

Checkpointish = Union[str, Checkpoint]


def cid(checkpoint: Checkpointish) -> str:
    """The id of a checkpoint or of a :class:`Checkpoint`."""
    return checkpoint.id if isinstance(checkpoint, Checkpoint) else checkpoint


def create_checkpoint(
    sandbox: Sandboxish,
    name: Optional[str] = None,
    *,
    idempotency_key: Optional[str] = None,
    wait: bool = True,
    timeout: float = 1800,
) -> Call:
    """Saves the sandbox's state while it keeps running (its files; memory and processes on
    qemu). With ``wait``, returns the checkpoint once ``ready`` (``pause_ms`` says how long
    the sandbox was frozen); a failed save raises :class:`OperationFailed`."""
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
    data = yield Req("POST", sandbox_path(sandbox, "/checkpoints"), json=drop_none(name=name), headers=headers)
    checkpoint = Checkpoint.from_json(data["checkpoint"])
    if not wait:
        return checkpoint
    yield from wait_operation(data["operation"]["id"], timeout)
    return (yield from get_checkpoint(checkpoint.id))


def get_checkpoint(checkpoint: Checkpointish) -> Call:
    data = yield Req("GET", f"/v1/checkpoints/{seg(cid(checkpoint))}")
    return Checkpoint.from_json(data)


def list_checkpoints(sandbox: Optional[Sandboxish] = None) -> Call:
    """The checkpoints of one sandbox, or of the caller's org; newest first."""
    path = sandbox_path(sandbox, "/checkpoints") if sandbox is not None else "/v1/checkpoints"
    data = yield Req("GET", path)
    return from_json_list(Checkpoint, data["checkpoints"])


def delete_checkpoint(checkpoint: Checkpointish) -> Call:
    """Deletes the checkpoint and its data in the snapshot store."""
    yield Req("DELETE", f"/v1/checkpoints/{seg(cid(checkpoint))}")


def rollback(
    sandbox: Sandboxish,
    checkpoint: Checkpointish,
    *,
    wait: bool = True,
    timeout: float = 1800,
) -> Call:
    """Returns the sandbox to a ``ready`` checkpoint of its own; commands started after the
    checkpoint end (their output says why). With ``wait``, returns the sandbox afterwards."""
    data = yield Req("POST", sandbox_path(sandbox, "/rollback"), json={"checkpoint": cid(checkpoint)})
    if wait:
        yield from wait_operation(data["id"], timeout)
    return (yield from get_sandbox(sandbox))


def fork(
    sandbox: Sandboxish,
    count: int = 1,
    *,
    metadata: Optional[Mapping[str, str]] = None,
    wait: bool = True,
    timeout: float = 1800,
) -> Call:
    """Creates ``count`` (1 to 16) sandboxes from a fresh checkpoint of a running sandbox; each
    gets its own address and random state. With ``wait``, returns them once running (a failed
    fork raises :class:`OperationFailed`), else at once in state ``creating``."""
    body = drop_none(count=count, metadata=dict(metadata) if metadata else None)
    data = yield Req("POST", sandbox_path(sandbox, "/fork"), json=body)
    forks = [Sandbox.from_json(s["sandbox"]) for s in data["sandboxes"]]
    if not wait:
        return forks
    out: List[Sandbox] = []
    for s, resp in zip(forks, data["sandboxes"]):
        yield from wait_operation(resp["operation"]["id"], timeout)
        out.append((yield from get_sandbox(s.id)))
    return out


def archive_request(checkpoint: Checkpointish) -> Req:
    """The ``GET`` of a checkpoint's archive (an uncompressed tar, format ``cove-checkpoint``
    version 1), for a client to stream."""
    return Req("GET", f"/v1/checkpoints/{seg(cid(checkpoint))}/archive", raw=True, timeout=3600)


@contextlib.contextmanager
def written_whole(dest: Union[str, "os.PathLike[str]"]) -> Iterator[BinaryIO]:
    """A file to write ``dest`` through: written as ``dest.part``, renamed over ``dest`` when
    the block ends normally and removed when it raises, so ``dest`` is whole or untouched."""
    part = f"{os.fspath(dest)}.part"
    try:
        with open(part, "wb") as f:
            yield f
        os.replace(part, dest)
    finally:
        if os.path.exists(part):
            os.remove(part)


def import_checkpoint(archive: Union[bytes, os.PathLike, Any], name: Optional[str] = None) -> Call:
    """Uploads a checkpoint archive (bytes, a local path, or a binary file object); it becomes
    a new ``ready`` checkpoint of the caller's org. A hostile or foreign archive is refused
    whole (``invalid_argument``, field ``archive``)."""
    params: List[Tuple[str, str]] = [("name", name)] if name else []
    headers: Dict[str, str] = {"Content-Type": "application/x-tar"}
    if isinstance(archive, (str, os.PathLike)):
        with open(archive, "rb") as f:
            data = yield Req("POST", "/v1/checkpoints/import", params=params, content=f, headers=headers, timeout=3600)
    else:
        data = yield Req("POST", "/v1/checkpoints/import", params=params, content=archive, headers=headers, timeout=3600)
    return Checkpoint.from_json(data)
