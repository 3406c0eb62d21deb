"""Host entropy at hello: written into the kernel's pool, and the CRNG reseeded."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from conftest import HOST_LIMITS, RecordingWire

from pi_sandbox_agent import protocol
from pi_sandbox_agent.entropy import mix_host_entropy
from pi_sandbox_agent.protocol import PROTOCOL_VERSION, LineReader, await_hello


def test_the_hosts_bytes_are_written_to_the_pool(tmp_path: Path) -> None:
    pool = tmp_path / "pool"
    pool.write_bytes(b"")
    # A regular file takes the write but not the reseed ioctl: not reported as taken.
    assert mix_host_entropy("00ff10ab", str(pool)) is False
    assert pool.read_bytes() == b"\x00\xff\x10\xab"


@pytest.mark.parametrize("value", [None, 7, "", "xyz", "abc", "00" * 65, ["00"]])
def test_anything_but_bounded_hex_is_ignored(tmp_path: Path, value: object) -> None:
    pool = tmp_path / "pool"
    pool.write_bytes(b"")
    assert mix_host_entropy(value, str(pool)) is False
    assert pool.read_bytes() == b""


def test_a_missing_device_is_no_error(tmp_path: Path) -> None:
    assert mix_host_entropy("00" * 32, str(tmp_path / "none" / "urandom")) is False


@pytest.mark.skipif(os.geteuid() != 0, reason="RNDRESEEDCRNG needs root (CI and guests run as root)")
def test_as_root_the_kernel_reseeds_from_the_hosts_bytes() -> None:
    assert mix_host_entropy(os.urandom(32).hex()) is True


def test_the_hello_hands_its_entropy_to_the_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[object] = []

    def record(value: object) -> bool:
        seen.append(value)
        return True

    monkeypatch.setattr(protocol, "mix_host_entropy", record)
    args = {"protocol": PROTOCOL_VERSION, "limits": HOST_LIMITS, "entropy": "ab" * 32}
    hello = {"id": 1, "op": "hello", "args": args}
    reader = LineReader(io.BytesIO((json.dumps(hello) + "\n").encode()))
    result = await_hello(reader, RecordingWire())
    assert result is not None and result[0] == 1
    assert seen == ["ab" * 32]
