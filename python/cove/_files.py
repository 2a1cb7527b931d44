"""File calls shared by the sync and async clients (see ``_core``): one file, many at once
(multipart), whole directories, list, stat, exists, mkdir, move, remove."""

from __future__ import annotations

import os
from typing import Any, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from ._core import Call, Req, Sandboxish, drop_none, path_params, sandbox_path
from .types import FileInfo, from_json_list

FileData = Union[bytes, str, os.PathLike]


def write_file(
    sandbox: Sandboxish,
    path: Union[str, bytes],
    data: Union[bytes, str, Iterable[bytes], Any],
    mode: Optional[int] = None,
    user: Optional[str] = None,
) -> Call:
    """Writes a file atomically (parents created); ``data`` is bytes, text, a binary file
    object or an iterable of byte chunks. Returns its :class:`FileInfo`."""
    params = path_params(path)
    if mode is not None:
        params.append(("mode", f"0o{mode:o}"))
    if user is not None:
        params.append(("user", user))
    content = data.encode() if isinstance(data, str) else data
    resp = yield Req("PUT", sandbox_path(sandbox, "/files"), params=params, content=content, timeout=600)
    return FileInfo.from_json(resp)


def read_file(
    sandbox: Sandboxish,
    path: Union[str, bytes],
    offset: Optional[int] = None,
    length: Optional[int] = None,
) -> Call:
    params = path_params(path)
    params += [(k, str(v)) for k, v in (("offset", offset), ("length", length)) if v is not None]
    data = yield Req("GET", sandbox_path(sandbox, "/files"), params=params, raw=True, timeout=600)
    return data


def upload_files(
    sandbox: Sandboxish,
    files: Union[Mapping[str, Any], Sequence[Tuple[str, Any]]],
    user: Optional[str] = None,
) -> Call:
    """Writes many files in one multipart request: ``{remote_path: bytes | str | local path
    (os.PathLike) | binary file}``. Each file is atomic, in order; returns their FileInfo."""
    items = list(files.items()) if isinstance(files, Mapping) else list(files)
    if not items:
        return []
    parts: List[Tuple[str, Any]] = []
    opened = []
    try:
        for remote, data in items:
            parts.append(("path", (None, remote.encode())))
            if isinstance(data, os.PathLike):
                fh = open(data, "rb")
                opened.append(fh)
                mode = os.stat(data).st_mode & 0o7777
                parts.append(("mode", (None, f"0o{mode:o}".encode())))
                data = fh
            elif isinstance(data, str):
                data = data.encode()
            parts.append(("file", ("file", data, "application/octet-stream")))
        params = [("user", user)] if user else []
        resp = yield Req("POST", sandbox_path(sandbox, "/files:upload"), params=params, files=parts, timeout=600)
    finally:
        for fh in opened:
            fh.close()
    return from_json_list(FileInfo, resp["files"])


def list_files(sandbox: Sandboxish, path: Union[str, bytes], depth: Optional[int] = None) -> Call:
    params = path_params(path)
    if depth is not None:
        params.append(("depth", str(depth)))
    data = yield Req("GET", sandbox_path(sandbox, "/files:list"), params=params)
    return from_json_list(FileInfo, data["entries"])


def stat_file(sandbox: Sandboxish, path: Union[str, bytes]) -> Call:
    data = yield Req("GET", sandbox_path(sandbox, "/files:stat"), params=path_params(path))
    return FileInfo.from_json(data)


def file_exists(sandbox: Sandboxish, path: Union[str, bytes]) -> Call:
    data = yield Req("GET", sandbox_path(sandbox, "/files:exists"), params=path_params(path))
    return bool(data["exists"])


def make_dir(sandbox: Sandboxish, path: str, user: Optional[str] = None) -> Call:
    data = yield Req("POST", sandbox_path(sandbox, "/files:mkdir"), json=drop_none(path=path, user=user))
    return FileInfo.from_json(data)


def move_file(sandbox: Sandboxish, src: str, dst: str, user: Optional[str] = None) -> Call:
    data = yield Req(
        "POST", sandbox_path(sandbox, "/files:move"), json=drop_none(**{"from": src, "to": dst, "user": user})
    )
    return FileInfo.from_json(data)


def remove_file(sandbox: Sandboxish, path: Union[str, bytes]) -> Call:
    yield Req("DELETE", sandbox_path(sandbox, "/files"), params=path_params(path))


def upload_dir(
    sandbox: Sandboxish, local_dir: Union[str, os.PathLike], remote_dir: str, user: Optional[str] = None
) -> Call:
    """Copies a local directory tree into ``remote_dir`` (files in one multipart request,
    modes kept, empty directories created). Symlinks are followed. Returns the files written."""
    root = os.fspath(local_dir)
    files: List[Tuple[str, Any]] = []
    empty: List[str] = []
    for here, dirs, names in os.walk(root, followlinks=True):
        rel = os.path.relpath(here, root)
        remote_here = remote_dir.rstrip("/") + ("" if rel == "." else "/" + rel.replace(os.sep, "/"))
        if not dirs and not names:
            empty.append(remote_here)
        for name in sorted(names):
            files.append((f"{remote_here}/{name}", _LocalPath(os.path.join(here, name))))
    for d in [remote_dir] + empty:
        yield from make_dir(sandbox, d, user)
    return (yield from upload_files(sandbox, files, user))


def download_dir(sandbox: Sandboxish, remote_dir: str, local_dir: Union[str, os.PathLike]) -> Call:
    """Copies ``remote_dir`` (its whole tree, up to 64 levels) into ``local_dir``: files with
    their modes, directories, symlinks as symlinks. Returns the local paths written."""
    root = os.fspath(local_dir)
    base = remote_dir.rstrip("/") or "/"
    entries = yield from list_files(sandbox, base, depth=64)
    os.makedirs(root, exist_ok=True)
    written = []
    for entry in sorted(entries, key=lambda e: e.path):
        rel = entry.path[len(base):].lstrip("/")
        if not rel or ".." in rel.split("/"):
            continue
        local = os.path.join(root, *rel.split("/"))
        if entry.type == "dir":
            os.makedirs(local, exist_ok=True)
        elif entry.type == "symlink" and entry.symlink_target is not None:
            if os.path.lexists(local):
                os.remove(local)
            os.symlink(entry.symlink_target, local)
        elif entry.type == "file":
            os.makedirs(os.path.dirname(local), exist_ok=True)
            data = yield from read_file(sandbox, entry.path)
            with open(local, "wb") as f:
                f.write(data)
            os.chmod(local, entry.mode & 0o7777)
        else:
            continue
        written.append(local)
    return written


class _LocalPath(os.PathLike):
    """A local file path for :func:`upload_files` (read and sent with its mode)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __fspath__(self) -> str:
        return self.path
