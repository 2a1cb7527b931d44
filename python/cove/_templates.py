"""Template calls from a build context, shared by the sync and async clients (see ``_core``)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from typing import Any, List, Mapping, Optional, Tuple, Union

from ._core import Call, Req, wait_operation
from .types import NetworkPolicy, Operation

Context = Union[bytes, str, "os.PathLike[str]"]


def build_context(context: Context) -> bytes:
    """A build context as ``POST /v1/templates`` takes it: tar bytes as given, or a local
    directory packed into a tar (names relative to it; symlinks kept as links)."""
    if isinstance(context, (bytes, bytearray)):
        return bytes(context)
    root = os.fspath(context)
    if not os.path.isdir(root):
        raise ValueError(f"{root!r} is not a directory (give a directory or tar bytes)")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for entry in sorted(os.listdir(root)):
            tar.add(os.path.join(root, entry), arcname=entry)
    return buf.getvalue()


def create_template(
    name: str,
    context: Context,
    file: Optional[str] = None,
    no_cache: bool = False,
    network: Union[NetworkPolicy, Mapping[str, Any], None] = None,
    wait: bool = True,
    timeout: float = 3600,
    build_args: Optional[Mapping[str, str]] = None,
) -> Call:
    """Creates template ``name`` from a template file (a Dockerfile subset) in ``context``, or
    builds its next release; returns the build operation (final when ``wait``; a failed build
    raises :class:`OperationFailed`; a bad file is ``invalid_argument`` naming its line).
    ``file`` is its path in the context (default ``Dockerfile``); ``network`` the egress
    policy of its ``RUN`` steps; ``build_args`` replace the defaults of the file's ``ARG``s
    (``docker build --build-arg``)."""
    params: List[Tuple[str, str]] = [("name", name)]
    if file:
        params.append(("file", file))
    if no_cache:
        params.append(("no_cache", "true"))
    if network is not None:
        policy = network.to_json() if isinstance(network, NetworkPolicy) else dict(network)
        params.append(("network", json.dumps(policy)))
    if build_args:
        params.append(("build_args", json.dumps(dict(build_args))))
    data = yield Req(
        "POST",
        "/v1/templates",
        params=params,
        content=build_context(context),
        headers={"Content-Type": "application/x-tar"},
        timeout=600,
    )
    op = Operation.from_json(data["operation"])
    if wait:
        op = yield from wait_operation(op.id, timeout)
    return op
