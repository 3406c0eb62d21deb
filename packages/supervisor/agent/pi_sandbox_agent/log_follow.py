"""Following a service log: what was written after a cursor, across rotations and restarts.

A cursor is `<inode>:<offset>` of the log file the last read ended in. The log is rotated by
renaming `<name>.log` to `<name>.log.1`, so a cursor whose inode is no longer the current file's
continues in `.1` first. Only file names and inodes are used, never the writer's state: a service
restart keeps appending to the same file, so a follower goes on across it. (Two rotations between
reads can hand the freed inode to the new file; the offset is then wrong but stays within it.)
"""

from __future__ import annotations

import os
import re
from typing import Any, Callable

from .output import cap_tail, decode, utf8_cut_end
from .protocol import AgentError, JsonDict, Limits, check_str, need_int

CURSOR = re.compile(r"^([0-9]{1,20}):([0-9]{1,20})$")
SKIPPED = "[... pi-sandbox: the log was rotated more than once since the last read; lines were skipped ...]\n"


def _read(path: str, inode: int | None, offset: int, budget: int) -> tuple[int, int, bytes] | None:
    """(inode, size, bytes from `offset`, at most `budget`) of `path`; None when it is missing or
    is not the file `inode` names."""
    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            if inode is not None and st.st_ino != inode:
                return None
            if offset > st.st_size:
                offset = 0  # the file was truncated: start again
            f.seek(offset)
            return st.st_ino, st.st_size, f.read(budget)
    except FileNotFoundError:
        return None


def _cursor(inode: int, offset: int) -> str:
    return "%d:%d" % (inode, offset)


def log_tail_with_cursor(path: str, lines: int, cap: int) -> JsonDict:
    """The last `lines` lines (across `.1` and the current file) and a cursor at their end."""
    current = _read(path, None, 0, 1 << 30)
    inode, _, data = current if current is not None else (0, 0, b"")
    end = len(data)
    if data.count(b"\n") < lines:
        older = _read(path + ".1", None, 0, 1 << 30)
        if older is not None:
            data = older[2] + data
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    picked = parts[-lines:]
    text, omitted = cap_tail(b"\n".join(picked) + (b"\n" if picked else b""), cap, "log")
    return {"text": text, "lines": len(picked), "truncatedBytes": omitted, "cursor": _cursor(inode, end), "more": False}


def log_since(path: str, cursor: str, cap: int) -> JsonDict:
    """What was written after `cursor`, at most `cap` bytes; `more` when more is waiting."""
    match = CURSOR.match(cursor)
    if match is None:
        raise AgentError("INVALID_ARGUMENT", "cursor must be a cursor from an earlier logs-follow", {"key": "cursor"})
    inode, offset = int(match.group(1)), int(match.group(2))
    out = b""
    note = ""
    same = _read(path, inode, offset, cap) if inode != 0 else None
    if same is not None:
        _, size, data = same
        start = offset if offset <= size else 0
        data = utf8_cut_end(data) if start + len(data) < size else data
        more = start + len(data) < size
        return {"text": decode(data), "truncatedBytes": 0, "cursor": _cursor(inode, start + len(data)), "more": more}
    if inode != 0:
        # Rotated since the last read: the rest of the old file is `.1`, unless it rotated again.
        old = _read(path + ".1", inode, offset, cap)
        if old is None:
            note = SKIPPED
        else:
            _, size, out = old
            start = offset if offset <= size else 0
            if start + len(out) < size:
                out = utf8_cut_end(out)
                return {
                    "text": decode(out),
                    "truncatedBytes": 0,
                    "cursor": _cursor(inode, start + len(out)),
                    "more": True,
                }
    current = _read(path, None, 0, max(0, cap - len(out)))
    if current is None:
        return {"text": note + decode(out), "truncatedBytes": 0, "cursor": _cursor(0, 0), "more": False}
    new_inode, size, data = current
    data = utf8_cut_end(data) if len(data) < size else data
    return {
        "text": note + decode(out + data),
        "truncatedBytes": 0,
        "cursor": _cursor(new_inode, len(data)),
        "more": len(data) < size,
    }


class LogFollow:
    """The `logs-follow` op: a service log's tail and a cursor, or what came after a cursor."""

    def __init__(self, limits: Limits, known: Callable[[str], bool], log_path: Callable[[str], str]):
        self.limits = limits
        self.known = known
        self.log_path = log_path

    def op(self, args: JsonDict) -> JsonDict:
        limits = self.limits
        name = check_str(args, "service")
        if not self.known(name):
            raise AgentError("SERVICE_NOT_FOUND", "no service named %s has run in this guest" % name, {"service": name})
        path = self.log_path(name)
        cursor: Any = args.get("cursor")
        if cursor is None:
            lines = need_int(args, "lines", limits.log_lines_default, 1, limits.log_lines_max)
            result = log_tail_with_cursor(path, lines, limits.output_max_bytes)
        else:
            if not isinstance(cursor, str):
                raise AgentError("INVALID_ARGUMENT", "cursor must be a string", {"key": "cursor"})
            result = log_since(path, cursor, limits.output_max_bytes)
        result["service"] = name
        result["logPath"] = path
        return result
