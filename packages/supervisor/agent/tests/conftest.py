"""Shared fixtures: the host's limits (shrunk where a test needs it), a context in a temp dir."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pi_sandbox_agent.context import Context
from pi_sandbox_agent.protocol import JsonDict, Limits, Wire
from pi_sandbox_agent.state import StateDir

# The values the host sends today (LIMITS in @pi-sandbox/config plus the transfer sizes); the
# agent itself has no copy of them.
HOST_LIMITS: JsonDict = {
    "yamlMaxBytes": 1024 * 1024,
    "outputMaxBytes": 64 * 1024,
    "execWaitDefaultMs": 10_000,
    "execWaitMaxMs": 60_000,
    "completedExecHandles": 128,
    "setupDeadlineMs": 20 * 60 * 1000,
    "resumeWaitMs": 10_000,
    "readinessDefaultMs": 30_000,
    "adhocReadinessMs": 60_000,
    "serviceRestartDelayMs": 1_000,
    "logLinesDefault": 100,
    "logLinesMax": 500,
    "transferChunkBytes": 256 * 1024,
    "readMaxBytes": 64 * 1024 * 1024,
    "writeMaxBytes": 256 * 1024 * 1024,
}


class RecordingWire(Wire):
    """A wire whose output is kept in memory, one decoded message per line."""

    def __init__(self) -> None:
        self.buffer = io.BytesIO()
        super().__init__(self.buffer)

    @property
    def messages(self) -> list[JsonDict]:
        return [json.loads(line) for line in self.buffer.getvalue().splitlines()]

    def events(self, name: str) -> list[JsonDict]:
        return [m["data"] for m in self.messages if m.get("event") == name]


def make_limits(**changes: int) -> Limits:
    from pi_sandbox_agent.protocol import parse_limits

    return parse_limits(HOST_LIMITS)._replace(**changes)


@pytest.fixture
def limits() -> Limits:
    return make_limits()


@pytest.fixture
def wire() -> RecordingWire:
    return RecordingWire()


@pytest.fixture
def make_ctx(tmp_path: Path, wire: RecordingWire) -> Callable[..., Context]:
    def make(**changes: int) -> Context:
        state = StateDir(str(tmp_path / "state"))
        state.reset()
        workspace = tmp_path / "ws"
        workspace.mkdir(exist_ok=True)
        return Context(wire, make_limits(**changes), state, str(workspace), "/bin/sh")

    return make


@pytest.fixture
def ctx(make_ctx: Callable[..., Context]) -> Context:
    return make_ctx()


def wait_until(check: Callable[[], Any], timeout_s: float = 10.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out waiting for %s" % what)
        time.sleep(0.02)


@pytest.fixture
def no_env_marker(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("PI_SANDBOX_RUN", raising=False)
    yield
