"""Transfers through the transfer disk: windows, CRC-32s, the shared destination handling."""

from __future__ import annotations

import base64
import os
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from pi_sandbox_agent.context import Context
from pi_sandbox_agent.disk_transfer import DiskTransfers, find_drive
from pi_sandbox_agent.files import Transfers
from pi_sandbox_agent.protocol import AgentError

MiB = 1024 * 1024


@pytest.fixture
def drive(tmp_path: Path) -> Path:
    """The drive as a plain file of 4 MiB (opened without O_DIRECT where the file system has none)."""
    path = tmp_path / "drive"
    with open(path, "wb") as f:
        f.truncate(4 * MiB)
    return path


@pytest.fixture
def files(tmp_path: Path) -> Path:
    path = tmp_path / "files"
    path.mkdir()
    return path


def disk(make_ctx: Callable[..., Context], drive: Path | None) -> DiskTransfers:
    return DiskTransfers(Transfers(make_ctx().limits), lambda: str(drive) if drive else None)


def put(drive: Path, window: int, data: bytes) -> None:
    with open(drive, "r+b") as f:
        f.seek(window)
        f.write(data)


def take(drive: Path, window: int, length: int) -> bytes:
    with open(drive, "rb") as f:
        f.seek(window)
        return f.read(length)


def test_the_drive_is_found_by_its_serial(tmp_path: Path) -> None:
    for name, serial in [("vda", ""), ("vdb", "pisb-transfer\n"), ("loop0", None)]:
        (tmp_path / name).mkdir()
        if serial is not None:
            (tmp_path / name / "serial").write_text(serial)
    assert find_drive(str(tmp_path)) == "/dev/vdb"
    (tmp_path / "vdb" / "serial").write_text("other")
    assert find_drive(str(tmp_path)) is None
    assert find_drive(str(tmp_path / "missing")) is None


def test_a_write_in_windows_lands_atomically_with_its_mode_and_crc(
    make_ctx: Callable[..., Context], drive: Path, files: Path
) -> None:
    d = disk(make_ctx, drive)
    data = os.urandom(3 * MiB + 123)
    target = files / "sub" / "out.bin"
    opened = d.write_open({"path": str(target), "size": len(data), "mode": 0o640, "createParents": True})
    piece, windows, crc = MiB, [0, MiB, 2 * MiB], 0
    for i, offset in enumerate(range(0, len(data), piece)):
        chunk = data[offset : offset + piece]
        window = windows[i % len(windows)]
        put(drive, window, chunk)
        done = d.write_piece({"token": opened["token"], "offset": offset, "length": len(chunk), "window": window})
        crc = zlib.crc32(chunk, crc)
        assert done == {"written": offset + len(chunk), "crc32": crc}
    assert not target.exists()
    assert d.write_commit({"token": opened["token"], "crc32": crc}) == {
        "path": str(target),
        "size": len(data),
        "crc32": zlib.crc32(data),
    }
    assert target.read_bytes() == data and target.stat().st_mode & 0o777 == 0o640
    assert [p.name for p in target.parent.iterdir()] == ["out.bin"]


def test_a_wrong_crc_a_gap_or_a_window_outside_the_drive_writes_nothing(
    make_ctx: Callable[..., Context], drive: Path, files: Path
) -> None:
    d = disk(make_ctx, drive)
    target = files / "out"
    target.write_text("original")
    put(drive, 0, b"12345")

    def opened() -> str:
        token = d.write_open({"path": str(target), "size": 10})["token"]
        assert isinstance(token, str)
        return token

    token = opened()
    d.write_piece({"token": token, "offset": 0, "length": 5, "window": 0})
    d.write_piece({"token": token, "offset": 5, "length": 5, "window": 0})
    with pytest.raises(AgentError) as wrong:
        d.write_commit({"token": token, "crc32": zlib.crc32(b"1234512346")})
    assert wrong.value.code == "FILE_CHECKSUM_MISMATCH"
    for bad in [
        {"offset": 5, "length": 5, "window": 0},  # a gap
        {"offset": 0, "length": 11, "window": 0},  # more than declared
        {"offset": 0, "length": 5, "window": 4 * MiB},  # past the drive's end
        {"offset": 0, "length": 5, "window": 100},  # not aligned
        {"offset": 0, "length": 5},  # no window
    ]:
        token = opened()
        with pytest.raises(AgentError) as refused:
            d.write_piece({"token": token, **bad})
        assert refused.value.code == "INVALID_ARGUMENT", bad
        with pytest.raises(AgentError) as gone:
            d.write_commit({"token": token, "crc32": 0})
        assert gone.value.code == "TRANSFER_NOT_FOUND"
    token = opened()
    d.write_piece({"token": token, "offset": 0, "length": 5, "window": 0})
    with pytest.raises(AgentError) as short:
        d.write_commit({"token": token, "crc32": zlib.crc32(b"12345")})
    assert short.value.code == "FILE_CHECKSUM_MISMATCH"
    assert target.read_text() == "original" and [p.name for p in files.iterdir()] == ["out"]


def test_writes_refuse_what_the_other_write_path_refuses(
    make_ctx: Callable[..., Context], drive: Path, files: Path
) -> None:
    d = disk(make_ctx, drive)
    for args, code in [
        ({"path": str(files / "none" / "f"), "size": 1}, "FILE_PARENT_MISSING"),
        ({"path": str(files), "size": 1}, "FILE_IS_DIRECTORY"),
        ({"path": "relative", "size": 1}, "INVALID_ARGUMENT"),
        ({"path": str(files / "f"), "size": 257 * MiB}, "INVALID_ARGUMENT"),
    ]:
        with pytest.raises(AgentError) as refused:
            d.write_open(args)
        assert refused.value.code == code
    assert list(files.iterdir()) == []


def test_a_read_goes_piece_by_piece_into_the_windows_named(
    make_ctx: Callable[..., Context], drive: Path, files: Path
) -> None:
    d = disk(make_ctx, drive)
    data = os.urandom(2 * MiB + 77)
    source = files / "in.bin"
    source.write_bytes(data)
    opened = d.read_open({"path": str(source), "maxBytes": 64 * MiB, "exact": True})
    assert {k: opened[k] for k in ("size", "length", "truncated", "drive")} == {
        "size": len(data),
        "length": len(data),
        "truncated": False,
        "drive": str(drive),
    }
    got = b""
    for offset, window in [(0, 2 * MiB), (MiB, 0), (2 * MiB, MiB)]:
        length = min(MiB, len(data) - offset)
        piece = d.read_piece({"token": opened["token"], "offset": offset, "length": length, "window": window})
        assert piece == {"offset": offset, "length": length, "crc32": zlib.crc32(data[offset : offset + length])}
        got += take(drive, window, length)
    assert got == data
    with pytest.raises(AgentError) as past:
        d.read_piece({"token": opened["token"], "offset": 2 * MiB, "length": 78, "window": 0})
    assert past.value.code == "INVALID_ARGUMENT"
    # The file shrank: fewer bytes, said so.
    source.write_bytes(data[:100])
    assert d.read_piece({"token": opened["token"], "offset": 0, "length": MiB, "window": 0})["length"] == 100
    with pytest.raises(AgentError) as too_large:
        d.read_open({"path": str(source), "maxBytes": 99, "exact": True})
    assert too_large.value.code == "FILE_TOO_LARGE"
    # At most one chunk comes inline, as through the channel.
    capped = d.read_open({"path": str(source), "maxBytes": 99})
    assert (capped["length"], capped["truncated"], "token" in capped) == (99, True, False)
    assert base64.b64decode(capped["data"]) == data[:99] and capped["crc32"] == zlib.crc32(data[:99])


def test_without_a_drive_every_open_says_so(make_ctx: Callable[..., Context], files: Path) -> None:
    d = disk(make_ctx, None)
    (files / "f").write_bytes(b"x")
    with pytest.raises(AgentError) as reading:
        d.read_open({"path": str(files / "f"), "maxBytes": 10})
    with pytest.raises(AgentError) as writing:
        d.write_open({"path": str(files / "g"), "size": 1})
    assert [reading.value.code, writing.value.code] == ["TRANSFER_DISK_MISSING"] * 2
    assert sorted(p.name for p in files.iterdir()) == ["f"]
