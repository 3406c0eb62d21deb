"""Raw byte streams for large file transfers.

A chunk of the channel carries its bytes as base64 inside a JSON line, which the agent encodes or
decodes in Python, one round trip per chunk: under TCG that, not the disk, is what a large copy
waits for. A transfer opened with `stream` gets a loopback listener of its own instead: the host
connects to it through the VM's TCP connector, proves it is the host with a one-time key it got
over the channel (another guest user could connect first: never theirs to write or read the
file), and the bytes then go raw, exactly the transfer's length, once. The sha256 checks stay
where they are.
"""

from __future__ import annotations

import hmac
import os
import queue
import socket
import threading
from typing import BinaryIO, Callable

from .procs import mono
from .protocol import AgentError, JsonDict

# How long the host has to connect and send its key after the open's reply.
STREAM_ACCEPT_S = 30.0
# How long one connection may take to send its key; a wrong one is closed and the wait goes on.
STREAM_KEY_S = 5.0
# How long the stream may stall (no byte either way) before the transfer fails.
STREAM_IDLE_S = 120.0
# Bytes moved per read or sendfile call.
STREAM_PIECE_BYTES = 1 << 20
# Pieces read ahead of the file write (at most this many MiB held).
STREAM_QUEUE_PIECES = 16


def stream_error(message: str) -> AgentError:
    return AgentError("FILE_IO", "the transfer stream failed: %s; retry the copy" % message)


class StreamDoor:
    """A one-time loopback listener for one transfer, and the key the host must send first."""

    def __init__(self) -> None:
        self.key = os.urandom(16).hex()
        self.closed = False
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._sock.bind(("127.0.0.1", 0))
            self._sock.listen(4)
        except OSError as err:
            self._sock.close()
            raise stream_error("cannot listen on loopback (%s)" % err) from None
        self.port: int = self._sock.getsockname()[1]

    def describe(self) -> JsonDict:
        return {"port": self.port, "key": self.key}

    def close(self) -> None:
        self.closed = True
        try:
            self._sock.close()
        except OSError:
            pass

    def accept(self) -> socket.socket:
        """The host's connection (its key checked), then the listener is closed: one use only."""
        deadline = mono() + STREAM_ACCEPT_S
        try:
            while True:
                left = deadline - mono()
                if self.closed or left <= 0:
                    raise stream_error("the host did not connect in time")
                self._sock.settimeout(min(left, 1.0))
                try:
                    conn, _ = self._sock.accept()
                except socket.timeout:
                    continue
                except OSError as err:
                    raise stream_error("accept failed (%s)" % err) from None
                if self._key_ok(conn):
                    conn.settimeout(STREAM_IDLE_S)
                    return conn
                conn.close()
        finally:
            self.close()

    def _key_ok(self, conn: socket.socket) -> bool:
        want = (self.key + "\n").encode("ascii")
        got = b""
        conn.settimeout(STREAM_KEY_S)
        try:
            while len(got) < len(want):
                piece = conn.recv(len(want) - len(got))
                if not piece:
                    return False
                got += piece
        except OSError:
            return False
        return hmac.compare_digest(got, want)


def receive_into(conn: socket.socket, length: int, sink: Callable[[bytes], None], touch: Callable[[], None]) -> int:
    """Reads exactly `length` bytes from `conn` into `sink` (never more); fails on an early end.

    A thread of its own keeps reading while `sink` writes and hashes: Gondolin's guest helper
    drops a stream as soon as 256 KiB wait for its guest socket, and a file write can stall for
    a while (the kernel throttling dirty pages). At most STREAM_QUEUE_PIECES wait in between."""
    pieces: queue.Queue[bytes | AgentError | None] = queue.Queue(maxsize=STREAM_QUEUE_PIECES)

    def hand(item: bytes | AgentError | None) -> bool:
        try:
            pieces.put(item, timeout=STREAM_IDLE_S)
            return True
        except queue.Full:
            return False  # the consumer is gone

    def read() -> None:
        done = 0
        try:
            while done < length:
                piece = conn.recv(min(STREAM_PIECE_BYTES, length - done))
                if not piece:
                    hand(stream_error("the host ended it after %d of %d bytes" % (done, length)))
                    return
                done += len(piece)
                if not hand(piece):
                    return
            hand(None)
        except OSError as err:
            hand(stream_error("receiving failed after %d of %d bytes (%s)" % (done, length, err)))

    threading.Thread(target=read, name="transfer-stream", daemon=True).start()
    done = 0
    while True:
        try:
            item = pieces.get(timeout=STREAM_IDLE_S)
        except queue.Empty:
            raise stream_error(
                "nothing arrived for %d s after %d of %d bytes" % (STREAM_IDLE_S, done, length)
            ) from None
        if item is None:
            return done
        if isinstance(item, AgentError):
            raise item
        sink(item)
        done += len(item)
        touch()


def send_from(conn: socket.socket, file: BinaryIO, length: int, touch: Callable[[], None]) -> int:
    """Sends the first `length` bytes of `file` (by offset, zero-copy); fewer when it shrank."""
    done = 0
    while done < length:
        want = min(STREAM_PIECE_BYTES, length - done)
        try:
            sent = conn.sendfile(file, done, want)
        except (OSError, ValueError) as err:
            raise stream_error("sending failed after %d of %d bytes (%s)" % (done, length, err)) from None
        if sent == 0:
            break  # the file is shorter now: the host sees a short stream and keeps nothing
        done += sent
        touch()
    try:
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    return done
