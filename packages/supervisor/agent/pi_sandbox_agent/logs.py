"""Service logs: two rotated files per service, and their tail for the host."""

from __future__ import annotations

import os
import threading
from typing import BinaryIO

from .output import cap_tail
from .procs import now_iso

LOG_ROTATE_BYTES = 1024 * 1024


class RotatingLog:
    """Append-only log bounded to two files of `limit` bytes each (<name>.log and <name>.log.1)."""

    def __init__(self, path: str, limit: int = LOG_ROTATE_BYTES):
        self.path = path
        self.limit = limit
        self._lock = threading.Lock()
        self._file: BinaryIO | None = open(path, "ab")
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            if self._file is None:
                return
            if len(data) > self.limit:
                data = data[-self.limit :]
            if self._size + len(data) > self.limit and self._size > 0:
                self._file = self._rotate(self._file)
            self._file.write(data)
            self._file.flush()
            self._size += len(data)

    def note(self, text: str) -> None:
        self.write(("[pi-sandbox %s] %s\n" % (now_iso(), text)).encode("utf-8", "replace"))

    def _rotate(self, current: BinaryIO) -> BinaryIO:
        current.close()
        os.replace(self.path, self.path + ".1")
        self._size = 0
        return open(self.path, "ab")

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def tail_log(path: str, lines: int, cap: int) -> tuple[str, int, int]:
    """Last `lines` lines across <path>.1 and <path>, capped at `cap` bytes: (text, omitted, count)."""
    data = b""
    for p in (path + ".1", path):
        try:
            with open(p, "rb") as f:
                data += f.read()
        except FileNotFoundError:
            pass
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    picked = parts[-lines:] if lines > 0 else []
    text, omitted = cap_tail(b"\n".join(picked) + (b"\n" if picked else b""), cap, "log")
    return text, omitted, len(picked)
