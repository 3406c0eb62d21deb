"""Large file transfers through the transfer disk.

The host gives the guest a second virtio-blk drive (serial `pisb-transfer`) whose backing file it
reads and writes itself. A copy's bytes cross in windows of that drive: for a write, the host puts
a piece of the file in a window and asks the agent to take it (the agent reads the window with
O_DIRECT, so never an old page of its own cache, and appends it to the write's temp file); for a
read, the agent puts a piece of the file into the window the host names and the host reads it from
its side. Each piece's CRC-32 goes back to the host, which compares it with its own: the check is
against accidental damage (a stale cache, a bookkeeping bug), the host trusting no size or offset
of the guest's. Destinations are opened, refused and committed exactly as by the other write path
(files.py). The host moves one transfer at a time through the drive; the buffer lock here only
keeps two requests from sharing the aligned buffer.
"""

from __future__ import annotations

import base64
import mmap
import os
import threading
import zlib
from typing import Callable

from .files import ReadTransfer, Transfers
from .fsutil import os_error
from .protocol import AgentError, JsonDict, require_int

SERIAL = "pisb-transfer"
# O_DIRECT wants offsets and lengths in whole blocks; a page covers every block size.
ALIGN = 4096
# The largest piece one request moves (the host's windows are at most this).
PIECE_MAX_BYTES = 16 * 1024 * 1024


def find_drive(sys_block: str = "/sys/block") -> str | None:
    """The transfer disk's device node, found by its serial; None without one (an older host, an older wrapper)."""
    try:
        names = sorted(os.listdir(sys_block))
    except OSError:
        return None
    for name in names:
        try:
            with open(os.path.join(sys_block, name, "serial"), encoding="ascii", errors="replace") as f:
                serial = f.read().strip()
        except OSError:
            continue
        if serial == SERIAL:
            return "/dev/" + name
    return None


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def open_direct(path: str, flags: int) -> int:
    """Opens `path` with O_DIRECT; where a file system has none (tmpfs, in tests) without it."""
    try:
        return os.open(path, flags | getattr(os, "O_DIRECT", 0))
    except OSError as err:
        if err.errno != 22:  # EINVAL: no O_DIRECT here
            raise
    return os.open(path, flags)


class DiskTransfers:
    """The `file-disk-*` operations over the open transfers of `transfers`."""

    def __init__(self, transfers: Transfers, find: Callable[[], str | None] = find_drive):
        self.transfers = transfers
        self._find = find
        self._buf_lock = threading.Lock()
        self._buf: mmap.mmap | None = None  # page-aligned, as O_DIRECT needs

    def _drive(self) -> str:
        drive = self._find()
        if drive is None:
            raise AgentError(
                "TRANSFER_DISK_MISSING", "this guest has no transfer disk; the host copies over a stream instead"
            )
        return drive

    def _buffer(self) -> mmap.mmap:
        if self._buf is None:
            self._buf = mmap.mmap(-1, PIECE_MAX_BYTES)
        return self._buf

    def _window(self, args: JsonDict, length: int, drive_fd: int) -> int:
        """The window named by the host: aligned, and the piece (rounded up to a block) inside the drive."""
        size = os.lseek(drive_fd, 0, os.SEEK_END)
        window = require_int(args, "window", 0, max(0, size - _aligned(length)))
        if window % ALIGN:
            raise AgentError("INVALID_ARGUMENT", "window %d is not a multiple of %d" % (window, ALIGN))
        return window

    def _move(self, drive: str, args: JsonDict, length: int, view: memoryview, to_drive: bool) -> None:
        """Moves `view` (a piece of `length` bytes rounded up to a block) into the drive's window
        that `args` names, or out of it, with O_DIRECT; OSErrors as FILE_IO of the drive."""
        io = os.pwritev if to_drive else os.preadv
        short = "short write to the transfer disk" if to_drive else "the transfer disk ended early"
        try:
            fd = open_direct(drive, os.O_WRONLY if to_drive else os.O_RDONLY)
            try:
                window = self._window(args, length, fd)
                done = 0
                while done < len(view):
                    n = io(fd, [view[done:]], window + done)
                    if n <= 0:
                        raise OSError(5, short)
                    done += n
            finally:
                os.close(fd)
        except OSError as err:
            raise os_error(err, drive, "write" if to_drive else "read") from None

    # -- reads: guest file -> drive -> host

    def read_open(self, args: JsonDict) -> JsonDict:
        """Like `file-read-open` without the sha256 pass: the size, the length the host will get
        (at most maxBytes), and a token, the bytes then going window by window; a file of at most
        one chunk comes inline instead (`data`, base64, with its CRC-32), as through the channel."""
        drive = self._drive()
        path, f, size, max_bytes = self.transfers.open_read(args)
        length = min(size, max_bytes)
        if length <= self.transfers.limits.transfer_chunk_bytes:
            try:
                data = f.read(length)
            except OSError as err:
                raise os_error(err, path, "read") from None
            finally:
                f.close()
            return {
                "size": size,
                "length": len(data),
                "truncated": size > len(data),
                "data": base64.b64encode(data).decode("ascii"),
                "crc32": zlib.crc32(data),
            }
        t = ReadTransfer(f, length, None)
        self.transfers.put(t)
        return {"size": size, "length": length, "truncated": size > length, "token": t.token, "drive": drive}

    def read_piece(self, args: JsonDict) -> JsonDict:
        """Puts `length` bytes of the file from `offset` into the drive at `window` and answers
        their CRC-32; fewer (the file shrank) are reported as such, the host keeping nothing then."""
        t = self.transfers.take_read(args.get("token"))
        offset = require_int(args, "offset", 0, t.length)
        length = require_int(args, "length", 1, min(PIECE_MAX_BYTES, t.length - offset) or 1)
        if offset + length > t.length:
            raise AgentError("INVALID_ARGUMENT", "the piece ends past the %d bytes of the read" % t.length)
        drive = self._drive()
        with t.lock, self._buf_lock:
            view = memoryview(self._buffer())
            try:
                got = 0
                try:
                    while got < length:
                        n = os.preadv(t.file.fileno(), [view[got:length]], offset + got)
                        if n == 0:
                            break
                        got += n
                except OSError as err:
                    raise AgentError("FILE_IO", "cannot read the open transfer: %s" % err) from None
                crc = zlib.crc32(view[:got])
                self._move(drive, args, length, view[: _aligned(got)], to_drive=True)
            finally:
                view.release()
        t.touch()
        return {"offset": offset, "length": got, "crc32": crc}

    # -- writes: host -> drive -> guest file

    def write_open(self, args: JsonDict) -> JsonDict:
        """Like `file-write-open` (the same destination checks and temp file), checked by CRC-32."""
        self._drive()
        t = self.transfers.open_write(args, None)
        self.transfers.put(t)
        return {"token": t.token}

    def write_piece(self, args: JsonDict) -> JsonDict:
        """Appends the `length` bytes the host put in the drive at `window` to the write, which
        must continue at `offset`, and answers the CRC-32 of all bytes written so far; any failure
        ends the transfer and removes its temp file."""
        t = self.transfers.take_write(args.get("token"))
        try:
            offset = require_int(args, "offset", 0, t.size)
            if offset != t.written:
                raise AgentError(
                    "INVALID_ARGUMENT", "piece offset %d does not follow %d bytes written" % (offset, t.written)
                )
            length = require_int(args, "length", 1, max(1, min(PIECE_MAX_BYTES, t.size - offset)))
            if offset + length > t.size:
                raise AgentError("INVALID_ARGUMENT", "more data than the declared %d bytes" % t.size)
            drive = self._drive()
            with t.lock, self._buf_lock:
                view = memoryview(self._buffer())
                try:
                    self._move(drive, args, length, view[: _aligned(length)], to_drive=False)
                    t.append(view[:length])
                finally:
                    view.release()
        except AgentError:
            self.transfers.drop(t.token)
            t.discard()
            raise
        t.touch()
        return {"written": t.written, "crc32": t.crc}

    def write_commit(self, args: JsonDict) -> JsonDict:
        """Renames the file into place when all bytes came and their CRC-32 is the host's."""
        t = self.transfers.take_write(args.get("token"))
        self.transfers.drop(t.token)
        with t.lock:
            try:
                want = require_int(args, "crc32", 0, 0xFFFFFFFF)
                if t.sha256 is not None or t.crc != want:
                    raise AgentError(
                        "FILE_CHECKSUM_MISMATCH",
                        "the CRC-32 of the data received for %s does not match; nothing was written" % t.path,
                        {"path": t.path, "expected": want, "actual": t.crc},
                    )
                self.transfers.finish_write(t)
            except BaseException:
                t.discard()
                raise
        return {"path": t.path, "size": t.size, "crc32": t.crc}
