"""Stream parsing shared by the sync and async clients: server-sent events, a command's
output resumed from an exact offset, PTY WebSocket messages."""

from __future__ import annotations

import json
from typing import List, Optional, Tuple, Union

from ._core import Req
from .errors import CoveError
from .types import Attachment, Command, Gap, Output

class SseParser:
    """Parses ``text/event-stream`` lines into ``(event, data, id)`` triples."""

    def __init__(self) -> None:
        self.event = "message"
        self.data: List[str] = []
        self.id: Optional[str] = None

    def line(self, line: str) -> Optional[Tuple[str, str, Optional[str]]]:
        """Feeds one line (without its end); returns an event when a blank line ends one."""
        line = line.rstrip("\r\n")
        if not line:
            if not self.data:
                self.event = "message"
                return None
            out = (self.event, "\n".join(self.data), self.id)
            self.event, self.data = "message", []
            return out
        if line.startswith(":"):
            return None
        name, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if name == "event":
            self.event = value
        elif name == "data":
            self.data.append(value)
        elif name == "id":
            self.id = value
        return None


class _Cursor:
    """Where a reader of one of a command's output streams stands (``offset``), and how often
    it broke in a row without progress."""

    #: Reconnections in a row without progress before giving up.
    MAX_RETRIES = 5
    #: The stream's media type (``Accept``) and its name in errors.
    ACCEPT = ""
    STREAM = ""

    def __init__(self, attachment: Attachment, offset: int = 0) -> None:
        self.attachment = attachment
        self.offset = offset
        self.failures = 0

    def request(self) -> Req:
        return Req(
            "GET",
            self.attachment.url,
            params=[("offset", str(self.offset))],
            token=self.attachment.token,
            headers={"Accept": self.ACCEPT},
        )

    def failed(self, err: Exception) -> None:
        """Counts a broken stream; raises once it keeps breaking without progress."""
        self.failures += 1
        if self.failures > self.MAX_RETRIES:
            message = f"the {self.STREAM} stream keeps failing: {err}"
            raise CoveError("transport", message) from err


class AttachCursor(_Cursor):
    """Where a reader of a command's output stands, so a broken stream resumes exactly.

    ``offset`` is the next byte wanted; :meth:`on_event` turns an SSE event into an
    :class:`Output` (without bytes already seen), a :class:`Gap`, or the exit's
    :class:`Command`, and moves the offset.
    """

    ACCEPT = "text/event-stream"
    STREAM = "output"

    def on_event(self, event: str, data: str) -> Union[Output, Gap, Command, None]:
        if event in ("stdout", "stderr"):
            out = Output.from_event(event, json.loads(data))
            skip = max(0, self.offset - out.offset)
            self.offset = max(self.offset, out.offset + len(out.data))
            self.failures = 0
            if skip >= len(out.data):
                return None
            return Output(out.stream, out.offset + skip, out.data[skip:])
        if event == "gap":
            g = json.loads(data)
            self.offset = max(self.offset, g["offset"] + g["len"])
            return Gap(g["offset"], g["len"])
        if event == "exit":
            return Command.from_json(json.loads(data))
        if event == "error":
            err = json.loads(data)
            raise _StreamBroke(err.get("message", "the output stream broke"))
        return None


class StdoutCursor(_Cursor):
    """Where a reader of a command's raw stdout stream stands: ``offset`` counts the stdout
    bytes already read (stderr is not in this stream), so a broken stream resumes exactly."""

    ACCEPT = "application/octet-stream"
    STREAM = "stdout"

    def on_bytes(self, data: bytes) -> None:
        self.offset += len(data)
        self.failures = 0


class _StreamBroke(Exception):
    """The server said the output stream broke; reconnecting resumes it."""


def pty_url(attachment: Attachment, offset: int = 0) -> str:
    """The WebSocket URL of a pty command's terminal."""
    url = attachment.url + "/pty"
    if url.startswith("https://"):
        url = "wss://" + url[len("https://"):]
    elif url.startswith("http://"):
        url = "ws://" + url[len("http://"):]
    return f"{url}?offset={offset}"


def pty_message(message: Union[str, bytes]) -> Union[Output, Gap, Command, None]:
    """Decodes a WebSocket message from a pty session."""
    if isinstance(message, bytes):
        return Output("stdout", -1, message)
    parsed = json.loads(message)
    if "exit" in parsed:
        return Command.from_json(parsed["exit"])
    if "gap" in parsed:
        return Gap(parsed["gap"]["offset"], parsed["gap"]["len"])
    return None
