"""File transfers: chunks of the host's size, size limits, offsets and checksums."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_sandbox_agent.context import Context
from pi_sandbox_agent.files import Transfers
from pi_sandbox_agent.protocol import AgentError, JsonDict


def transfers(make_ctx: Callable[..., Context], **changes: int) -> Transfers:
    return Transfers(make_ctx(**changes).limits)


@pytest.fixture
def files(tmp_path: Path) -> Path:
    path = tmp_path / "files"
    path.mkdir()
    return path


def read_all(t: Transfers, opened: JsonDict) -> bytes:
    if "data" in opened:
        return base64.b64decode(opened["data"])
    parts, offset = [], 0
    while offset < opened["length"]:
        piece = base64.b64decode(t.read_chunk({"token": opened["token"], "offset": offset})["data"])
        assert 0 < len(piece) <= opened["chunkBytes"]
        parts.append(piece)
        offset += len(piece)
    t.read_close({"token": opened["token"]})
    return b"".join(parts)


def test_reads_come_inline_up_to_one_chunk_then_in_chunks_of_the_host_size(
    make_ctx: Callable[..., Context], files: Path
) -> None:
    t = transfers(make_ctx, transfer_chunk_bytes=1024)
    small, big = files / "small", files / "big"
    small.write_bytes(os.urandom(1024))
    big.write_bytes(os.urandom(5000))
    inline = t.read_open({"path": str(small), "maxBytes": 10_000, "exact": True})
    assert "token" not in inline and read_all(t, inline) == small.read_bytes()
    chunked = t.read_open({"path": str(big), "maxBytes": 10_000, "exact": True})
    assert chunked["chunkBytes"] == 1024 and chunked["length"] == 5000
    data = read_all(t, chunked)
    assert data == big.read_bytes() and hashlib.sha256(data).hexdigest() == chunked["sha256"]
    with pytest.raises(AgentError) as closed:
        t.read_chunk({"token": chunked["token"], "offset": 0})
    assert closed.value.code == "TRANSFER_NOT_FOUND"


def test_reads_honour_max_bytes_and_the_host_read_limit(make_ctx: Callable[..., Context], files: Path) -> None:
    t = transfers(make_ctx, read_max_bytes=100_000)
    path = files / "f"
    path.write_bytes(b"x" * 3000)
    capped = t.read_open({"path": str(path), "maxBytes": 1000})
    assert (capped["size"], capped["length"], capped["truncated"]) == (3000, 1000, True)
    with pytest.raises(AgentError) as exact:
        t.read_open({"path": str(path), "maxBytes": 1000, "exact": True})
    assert exact.value.code == "FILE_TOO_LARGE"
    with pytest.raises(AgentError) as over:
        t.read_open({"path": str(path), "maxBytes": 100_001})
    assert over.value.code == "INVALID_ARGUMENT"
    default = t.read_open({"path": str(path)})  # the host's output cap
    assert default["length"] == 3000 and not default["truncated"]


def write(t: Transfers, path: Path, data: bytes, chunk: int, **extra: object) -> JsonDict:
    opened = t.write_open({"path": str(path), "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), **extra})
    for offset in range(0, len(data), chunk):
        piece = base64.b64encode(data[offset : offset + chunk]).decode()
        assert t.write_chunk({"token": opened["token"], "offset": offset, "data": piece})["written"] == min(
            len(data), offset + chunk
        )
    return t.write_commit({"token": opened["token"]})


def test_chunked_writes_are_atomic_and_keep_the_mode(make_ctx: Callable[..., Context], files: Path) -> None:
    t = transfers(make_ctx, transfer_chunk_bytes=1024)
    path = files / "out.bin"
    path.write_bytes(b"old")
    path.chmod(0o751)
    data = os.urandom(4000)
    done = write(t, path, data, 1024)
    assert done == {"path": str(path), "size": 4000, "sha256": hashlib.sha256(data).hexdigest()}
    assert path.read_bytes() == data and path.stat().st_mode & 0o777 == 0o751
    assert [p.name for p in files.iterdir()] == ["out.bin"]


def test_a_chunk_out_of_order_ends_the_transfer_and_leaves_nothing(
    make_ctx: Callable[..., Context], files: Path
) -> None:
    t = transfers(make_ctx)
    path = files / "out"
    opened = t.write_open({"path": str(path), "size": 10, "sha256": "0" * 64})
    with pytest.raises(AgentError) as caught:
        t.write_chunk({"token": opened["token"], "offset": 5, "data": base64.b64encode(b"12345").decode()})
    assert caught.value.code == "INVALID_ARGUMENT"
    with pytest.raises(AgentError) as gone:
        t.write_commit({"token": opened["token"]})
    assert gone.value.code == "TRANSFER_NOT_FOUND"
    assert list(files.iterdir()) == []


def test_more_data_than_declared_or_a_wrong_sum_writes_nothing(make_ctx: Callable[..., Context], files: Path) -> None:
    t = transfers(make_ctx)
    path = files / "out"
    path.write_text("original")
    too_much = base64.b64encode(b"123456").decode()
    with pytest.raises(AgentError) as more:
        t.write_open({"path": str(path), "size": 5, "sha256": "0" * 64, "data": too_much})
    assert more.value.code == "INVALID_ARGUMENT"
    data = base64.b64encode(b"12345").decode()
    with pytest.raises(AgentError) as wrong:
        t.write_open({"path": str(path), "size": 5, "sha256": "0" * 64, "data": data})
    assert wrong.value.code == "FILE_CHECKSUM_MISMATCH"
    assert path.read_text() == "original" and [p.name for p in files.iterdir()] == ["out"]


def test_writes_over_the_host_write_limit_are_refused(make_ctx: Callable[..., Context], files: Path) -> None:
    t = transfers(make_ctx, write_max_bytes=1000)
    with pytest.raises(AgentError) as caught:
        t.write_open({"path": str(files / "x"), "size": 1001, "sha256": "0" * 64})
    assert caught.value.code == "INVALID_ARGUMENT" and caught.value.details == {"key": "size"}
    with pytest.raises(AgentError) as parent:
        t.write_open({"path": str(files / "no" / "x"), "size": 1, "sha256": "0" * 64})
    assert parent.value.code == "FILE_PARENT_MISSING"
