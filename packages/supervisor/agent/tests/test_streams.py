"""Transfer streams: raw bytes down a one-time loopback listener, only for the host's key."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pi_sandbox_agent.context import Context
from pi_sandbox_agent.files import Transfers
from pi_sandbox_agent.protocol import AgentError, JsonDict


def run(fn: Callable[[JsonDict], JsonDict], args: JsonDict) -> dict[str, Any]:
    """Runs an op on a thread, as the agent does, so the test can be the host meanwhile."""
    out: dict[str, Any] = {}

    def body() -> None:
        try:
            out["result"] = fn(args)
        except AgentError as err:
            out["error"] = err

    thread = threading.Thread(target=body)
    thread.start()
    out["thread"] = thread
    return out


def connect(door: JsonDict, key: str | None = None) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", door["port"]), timeout=10)
    sock.sendall(((key if key is not None else door["key"]) + "\n").encode())
    return sock


def test_a_streamed_write_takes_exactly_its_bytes_and_a_wrong_key_gets_nothing(
    make_ctx: Callable[..., Context], tmp_path: Path
) -> None:
    t = Transfers(make_ctx(transfer_chunk_bytes=1024).limits)
    path = tmp_path / "out.bin"
    data = os.urandom(3 * 1024 * 1024 + 7)
    opened = t.write_open(
        {"path": str(path), "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "stream": True}
    )
    door = opened["stream"]
    assert 0 < door["port"] < 65536 and len(door["key"]) == 32
    op = run(t.write_stream, {"token": opened["token"]})
    # Another guest user connecting first, without the key, is dropped and the wait goes on.
    intruder = connect(door, "0" * 32)
    assert intruder.recv(1) == b""
    intruder.close()
    host = connect(door)
    host.sendall(data + b"more than declared")
    op["thread"].join(10)
    host.close()
    assert op["result"] == {"written": len(data)}
    assert t.write_commit({"token": opened["token"]})["size"] == len(data)
    assert path.read_bytes() == data
    # One use only: the listener is gone.
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", door["port"]), timeout=2)


def test_a_streamed_write_that_ends_early_leaves_nothing(make_ctx: Callable[..., Context], tmp_path: Path) -> None:
    t = Transfers(make_ctx(transfer_chunk_bytes=1024).limits)
    path = tmp_path / "out.bin"
    opened = t.write_open({"path": str(path), "size": 5000, "sha256": "0" * 64, "stream": True})
    op = run(t.write_stream, {"token": opened["token"]})
    host = connect(opened["stream"])
    host.sendall(b"x" * 100)
    host.close()
    op["thread"].join(10)
    assert op["error"].code == "FILE_IO" and "100 of 5000" in op["error"].message
    with pytest.raises(AgentError) as gone:
        t.write_commit({"token": opened["token"]})
    assert gone.value.code == "TRANSFER_NOT_FOUND"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".out.bin")] == []
    assert not path.exists()


def test_a_streamed_read_sends_its_length_raw_then_ends(make_ctx: Callable[..., Context], tmp_path: Path) -> None:
    t = Transfers(make_ctx(transfer_chunk_bytes=1024).limits)
    path = tmp_path / "in.bin"
    data = os.urandom(2 * 1024 * 1024 + 3)
    path.write_bytes(data)
    opened = t.read_open({"path": str(path), "maxBytes": 10 * 1024 * 1024, "exact": True, "stream": True})
    assert "data" not in opened and opened["length"] == len(data)
    op = run(t.read_stream, {"token": opened["token"]})
    host = connect(opened["stream"])
    got = b""
    while piece := host.recv(1 << 20):
        got += piece
    op["thread"].join(10)
    assert op["result"] == {"sent": len(data)}
    assert got == data and hashlib.sha256(got).hexdigest() == opened["sha256"]
    t.read_close({"token": opened["token"]})


def test_streams_only_for_transfers_opened_for_one(make_ctx: Callable[..., Context], tmp_path: Path) -> None:
    t = Transfers(make_ctx(transfer_chunk_bytes=1024).limits)
    path = tmp_path / "in.bin"
    path.write_bytes(os.urandom(5000))
    opened = t.read_open({"path": str(path), "maxBytes": 10_000, "exact": True})
    assert "stream" not in opened
    with pytest.raises(AgentError) as caught:
        t.read_stream({"token": opened["token"]})
    assert caught.value.code == "INVALID_ARGUMENT"
    t.read_close({"token": opened["token"]})
