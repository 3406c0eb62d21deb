"""File transfers: chunked, sha256-checked reads and atomic writes.

They go through the agent, never through Gondolin's own file channel, which waits behind every
exec in flight (and the agent's channel is an exec that never ends). Chunk size and size limits
are the host's (`Limits`).
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
import zlib
from typing import Any, BinaryIO, Union

from .fsutil import fsync_dir, os_error
from .procs import mono
from .protocol import AgentError, JsonDict, Limits, check_abs_path, check_int, check_str, need_int, require_int
from .streams import StreamDoor, receive_into, send_from

TRANSFER_IDLE_S = 120.0


class ReadTransfer:
    """A read too large for one reply: the open file, read chunk by chunk at the offsets asked for
    (never more than `length` bytes), until closed or idle for too long. The guest holds no copy."""

    kind = "read"

    def __init__(self, file: BinaryIO, length: int, door: StreamDoor | None):
        self.token = os.urandom(8).hex()
        self.file = file
        self.length = length
        self.door = door
        self.touched = mono()
        self.lock = threading.Lock()

    def touch(self) -> None:
        self.touched = mono()

    def discard(self) -> None:
        if self.door is not None:
            self.door.close()
        try:
            self.file.close()
        except OSError:
            pass


class WriteTransfer:
    """A write in progress: a temp file next to the target, renamed over it on commit."""

    kind = "write"

    def __init__(self, path: str, target: str, size: int, sha256: str | None, mode: int | None):
        self.token = os.urandom(8).hex()
        self.path = path
        self.target = target
        self.size = size
        # With no sha256 (a transfer-disk write), the bytes are checked by their CRC-32 instead.
        self.sha256 = sha256.lower() if sha256 is not None else None
        self.mode = mode
        self.written = 0
        self.hasher = hashlib.sha256()
        self.crc = 0
        parent = os.path.dirname(target) or "/"
        self.tmp = os.path.join(parent, ".%s.pi-sandbox-%s.part" % (os.path.basename(target), self.token))
        self.file: BinaryIO | None = None
        self.door: StreamDoor | None = None
        self.touched = mono()
        self.lock = threading.Lock()

    def touch(self) -> None:
        self.touched = mono()

    def append(self, data: memoryview | bytes) -> None:
        assert self.file is not None
        try:
            self.file.write(data)
        except (OSError, ValueError) as err:
            raise AgentError("FILE_IO", "cannot write %s: %s" % (self.path, err)) from None
        if self.sha256 is None:
            self.crc = zlib.crc32(data, self.crc)
        else:
            self.hasher.update(data)
        self.written += len(data)

    def discard(self) -> None:
        if self.door is not None:
            self.door.close()
        try:
            if self.file is not None:
                self.file.close()
        except OSError:
            pass
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


Transfer = Union[ReadTransfer, WriteTransfer]


class Transfers:
    """Open transfers by token; one idle for TRANSFER_IDLE_S is dropped (a write's temp file too)."""

    def __init__(self, limits: Limits):
        self.limits = limits
        self._lock = threading.Lock()
        self._items: dict[str, Transfer] = {}

    def put(self, t: Transfer) -> None:
        self._put(t)

    def take_read(self, token: Any) -> ReadTransfer:
        return self._take_read(token)

    def take_write(self, token: Any) -> WriteTransfer:
        return self._take_write(token)

    def drop(self, token: Any) -> Transfer | None:
        return self._drop(token)

    def _put(self, t: Transfer) -> None:
        with self._lock:
            self._reap_locked()
            self._items[t.token] = t

    def _reap_locked(self) -> None:
        now = mono()
        for token, t in list(self._items.items()):
            if now - t.touched > TRANSFER_IDLE_S:
                del self._items[token]
                t.discard()

    def _take(self, token: Any, kind: str) -> Transfer:
        with self._lock:
            t = self._items.get(token) if isinstance(token, str) else None
        if t is None or t.kind != kind:
            raise AgentError(
                "TRANSFER_NOT_FOUND", "no open %s transfer %r (it may have been idle too long)" % (kind, token)
            )
        t.touched = mono()
        return t

    def _take_read(self, token: Any) -> ReadTransfer:
        t = self._take(token, "read")
        assert isinstance(t, ReadTransfer)
        return t

    def _take_write(self, token: Any) -> WriteTransfer:
        t = self._take(token, "write")
        assert isinstance(t, WriteTransfer)
        return t

    def _drop(self, token: Any) -> Transfer | None:
        with self._lock:
            return self._items.pop(token, None) if isinstance(token, str) else None

    # -- reads

    def open_read(self, args: JsonDict) -> tuple[str, BinaryIO, int, int]:
        """A read's file open (path, file, size at the open, maxBytes): FILE_TOO_LARGE for an
        `exact` read of a larger file. Shared by every way of reading."""
        path = check_abs_path(args)
        max_bytes = need_int(args, "maxBytes", self.limits.output_max_bytes, 0, self.limits.read_max_bytes)
        try:
            f = open(path, "rb")
        except OSError as err:
            raise os_error(err, path, "read") from None
        try:
            size = os.fstat(f.fileno()).st_size
        except OSError as err:
            f.close()
            raise os_error(err, path, "read") from None
        if args.get("exact") and size > max_bytes:
            f.close()
            raise AgentError(
                "FILE_TOO_LARGE",
                "%s is %d bytes, more than the %d allowed" % (path, size, max_bytes),
                {"path": path, "size": size, "maxBytes": max_bytes},
            )
        return path, f, size, max_bytes

    def read_open(self, args: JsonDict) -> JsonDict:
        path, f, size, max_bytes = self.open_read(args)
        exact = bool(args.get("exact"))
        chunk = self.limits.transfer_chunk_bytes
        try:
            # One pass for the sha256; the chunks are read again from the open file, so a file
            # changed in between arrives with a sha256 that does not match (the host refuses it).
            hasher = hashlib.sha256()
            length = 0
            head = b""
            while length < max_bytes:
                piece = f.read(min(1 << 20, max_bytes - length))
                if not piece:
                    break
                hasher.update(piece)
                if length <= chunk:
                    head += piece
                length += len(piece)
            more = f.read(1) != b""
        except OSError as err:
            f.close()
            raise os_error(err, path, "read") from None
        except BaseException:
            f.close()
            raise
        if exact and more:
            f.close()
            raise AgentError(
                "FILE_TOO_LARGE", "%s grew past %d bytes while being read" % (path, max_bytes), {"path": path}
            )
        size = max(size, length + (1 if more else 0))
        result: JsonDict = {
            "size": size,
            "length": length,
            "sha256": hasher.hexdigest(),
            "truncated": more or size > length,
        }
        if length <= chunk:
            f.close()
            result["data"] = base64.b64encode(head[:length]).decode("ascii")
            return result
        try:
            door = StreamDoor() if args.get("stream") is True else None
        except BaseException:
            f.close()
            raise
        t = ReadTransfer(f, length, door)
        self._put(t)
        result["token"] = t.token
        result["chunkBytes"] = chunk
        if door is not None:
            result["stream"] = door.describe()
        return result

    def read_stream(self, args: JsonDict) -> JsonDict:
        """Sends the open read's bytes, raw, down its stream once the host connected with the key."""
        t = self._take_read(args.get("token"))
        if t.door is None:
            raise AgentError("INVALID_ARGUMENT", "read transfer %s was not opened for a stream" % t.token)
        with t.lock:
            conn = t.door.accept()
            try:
                sent = send_from(conn, t.file, t.length, t.touch)
            finally:
                conn.close()
        return {"sent": sent}

    def read_chunk(self, args: JsonDict) -> JsonDict:
        t = self._take_read(args.get("token"))
        offset = need_int(args, "offset", 0, 0, t.length)
        want = min(self.limits.transfer_chunk_bytes, t.length - offset)
        with t.lock:
            try:
                piece = os.pread(t.file.fileno(), want, offset)
            except (OSError, ValueError) as err:
                raise AgentError("FILE_IO", "cannot read the open transfer: %s" % err) from None
        return {
            "data": base64.b64encode(piece).decode("ascii"),
            "offset": offset,
            "eof": offset + len(piece) >= t.length,
        }

    def read_close(self, args: JsonDict) -> JsonDict:
        t = self._drop(args.get("token"))
        if t is not None:
            t.discard()
        return {}

    # -- writes

    def write_open(self, args: JsonDict) -> JsonDict:
        t = self.open_write(args, check_str(args, "sha256"))
        inline = args.get("data")
        if inline is not None:
            try:
                self._append(t, inline, 0)
                return self._commit(t)
            except BaseException:
                t.discard()
                raise
        if args.get("stream") is True:
            try:
                t.door = StreamDoor()
            except BaseException:
                t.discard()
                raise
        self._put(t)
        result: JsonDict = {"token": t.token, "chunkBytes": self.limits.transfer_chunk_bytes}
        if t.door is not None:
            result["stream"] = t.door.describe()
        return result

    def open_write(self, args: JsonDict, digest: str | None) -> WriteTransfer:
        """A write's destination checked (every way of writing refuses the same paths) and its temp
        file open beside it; `digest` None checks the bytes by CRC-32 (disk_transfer.py)."""
        path = check_abs_path(args)
        size = require_int(args, "size", 0, self.limits.write_max_bytes)
        mode = check_int(args, "mode", None, 0, 0o7777)
        target = os.path.realpath(path) if os.path.islink(path) else path
        parent = os.path.dirname(target) or "/"
        if not os.path.isdir(parent):
            if args.get("createParents"):
                try:
                    os.makedirs(parent, exist_ok=True)
                except OSError as err:
                    raise os_error(err, parent, "create directory") from None
            else:
                raise AgentError(
                    "FILE_PARENT_MISSING",
                    "cannot write %s: directory %s does not exist; create it first" % (path, parent),
                    {"path": path, "parent": parent},
                )
        if os.path.isdir(target):
            raise AgentError("FILE_IS_DIRECTORY", "cannot write %s: it is a directory" % path, {"path": path})
        t = WriteTransfer(path, target, size, digest, mode)
        try:
            t.file = open(t.tmp, "wb")
        except OSError as err:
            raise os_error(err, path, "write") from None
        return t

    def _append(self, t: WriteTransfer, data_b64: Any, offset: Any) -> None:
        if offset != t.written:
            raise AgentError(
                "INVALID_ARGUMENT", "chunk offset %s does not follow %d bytes written" % (offset, t.written)
            )
        if not isinstance(data_b64, str):
            raise AgentError("INVALID_ARGUMENT", "data must be base64 text")
        try:
            data = base64.b64decode(data_b64.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise AgentError("INVALID_ARGUMENT", "data is not valid base64") from None
        if t.written + len(data) > t.size:
            raise AgentError("INVALID_ARGUMENT", "more data than the declared %d bytes" % t.size)
        t.append(data)

    def write_stream(self, args: JsonDict) -> JsonDict:
        """Takes the rest of the open write's bytes, raw, from its stream (never more than declared);
        the commit that follows checks their sha256. A stream that ends early ends the transfer."""
        t = self._take_write(args.get("token"))
        if t.door is None:
            raise AgentError("INVALID_ARGUMENT", "write transfer %s was not opened for a stream" % t.token)
        with t.lock:
            try:
                conn = t.door.accept()
                try:
                    receive_into(conn, t.size - t.written, t.append, t.touch)
                finally:
                    conn.close()
            except AgentError:
                self._drop(t.token)
                t.discard()
                raise
            return {"written": t.written}

    def write_chunk(self, args: JsonDict) -> JsonDict:
        t = self._take_write(args.get("token"))
        with t.lock:
            try:
                self._append(t, args.get("data"), args.get("offset"))
            except AgentError:
                self._drop(t.token)
                t.discard()
                raise
            return {"written": t.written}

    def write_commit(self, args: JsonDict) -> JsonDict:
        t = self._take_write(args.get("token"))
        self._drop(t.token)
        with t.lock:
            try:
                return self._commit(t)
            except BaseException:
                t.discard()
                raise

    def write_abort(self, args: JsonDict) -> JsonDict:
        token = args.get("token")
        with self._lock:
            t = self._items.pop(token, None) if isinstance(token, str) else None
        if isinstance(t, WriteTransfer):
            t.discard()
        return {}

    def _commit(self, t: WriteTransfer) -> JsonDict:
        actual = t.hasher.hexdigest()
        if actual != t.sha256:
            raise AgentError(
                "FILE_CHECKSUM_MISMATCH",
                "sha256 of the received data for %s does not match; nothing was written" % t.path,
                {"path": t.path, "expected": t.sha256, "actual": actual},
            )
        self.finish_write(t)
        return {"path": t.path, "size": t.size, "sha256": actual}

    def finish_write(self, t: WriteTransfer) -> None:
        """All bytes there (else FILE_CHECKSUM_MISMATCH): fsync, mode and owner, rename into place."""
        if t.written != t.size:
            raise AgentError(
                "FILE_CHECKSUM_MISMATCH",
                "received %d of %d bytes for %s" % (t.written, t.size, t.path),
                {"path": t.path},
            )
        assert t.file is not None
        try:
            t.file.flush()
            os.fsync(t.file.fileno())
            t.file.close()
            try:
                old: os.stat_result | None = os.stat(t.target)
            except FileNotFoundError:
                old = None
            mode = t.mode if t.mode is not None else (old.st_mode & 0o7777 if old else 0o644)
            os.chmod(t.tmp, mode)
            if old is not None:
                try:
                    os.chown(t.tmp, old.st_uid, old.st_gid)
                except OSError:
                    pass
            os.replace(t.tmp, t.target)
            fsync_dir(os.path.dirname(t.target) or "/")
        except OSError as err:
            raise os_error(err, t.path, "write") from None
