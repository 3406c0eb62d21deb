"""File-system helpers: crash-safe writes, hole punching, typed errors for OSError."""

from __future__ import annotations

import json
import os
from typing import Any, Callable

from .protocol import AgentError


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: str, value: Any) -> None:
    """Temp file, fsync, rename, fsync the directory: a crash leaves the old file or the new one."""
    tmp = "%s.%s.tmp" % (path, os.urandom(4).hex())
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


_FALLOC_PUNCH_HOLE_KEEP_SIZE = 0x02 | 0x01
_fallocate: Callable[[int, int, int, int], int] | None = None


def punch_hole(path: str, offset: int, length: int) -> bool:
    """Frees the disk blocks of [offset, offset+length) of a file, keeping its size and every
    offset in it (Linux fallocate PUNCH_HOLE). False where unsupported (no libc, old kernel, fs)."""
    global _fallocate
    try:
        if _fallocate is None:
            # Imported here: a minimal Python without ctypes still runs the agent (it truncates).
            import ctypes
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            _fallocate = libc.fallocate
        fd = os.open(path, os.O_WRONLY)
        try:
            return bool(_fallocate(fd, _FALLOC_PUNCH_HOLE_KEEP_SIZE, offset, length) == 0)
        finally:
            os.close(fd)
    except (ImportError, OSError, AttributeError):
        return False


def os_error(err: OSError, path: str, action: str) -> AgentError:
    details = {"path": path, "errno": err.errno}
    if isinstance(err, FileNotFoundError):
        return AgentError("FILE_NOT_FOUND", "cannot %s %s: no such file" % (action, path), details)
    if isinstance(err, IsADirectoryError):
        return AgentError("FILE_IS_DIRECTORY", "cannot %s %s: it is a directory" % (action, path), details)
    if isinstance(err, PermissionError):
        return AgentError("FILE_ACCESS_DENIED", "cannot %s %s: permission denied" % (action, path), details)
    return AgentError("FILE_IO", "cannot %s %s: %s" % (action, path, err.strerror or err), details)
