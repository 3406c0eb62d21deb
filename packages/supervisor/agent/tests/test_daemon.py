"""The agent daemon behind `--attach` bridges: it outlives a bridge, serves the next one with the
same jobs, replaces a session by a newer one, and ends only on shutdown."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from conftest import HOST_LIMITS

from pi_sandbox_agent.bridge import socket_path
from pi_sandbox_agent.protocol import PROTOCOL_VERSION, JsonDict

AGENT_DIR = Path(__file__).resolve().parents[1]
FLAGS = ["--cgroup-root", "none", "--shell", "/bin/sh", "--warm-shell", "off"]


class Bridge:
    def __init__(self, tmp_path: Path):
        dirs = ["--workspace", str(tmp_path / "ws"), "--state-dir", str(tmp_path / "state")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pi_sandbox_agent", "--attach", *FLAGS, *dirs],
            cwd=AGENT_DIR,
            env=dict(os.environ, PYTHONPATH=str(AGENT_DIR), PI_SANDBOX_EXEC_TOKEN="bridge-token"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        self.stdout: IO[bytes] = self.proc.stdout  # type: ignore[assignment]

    def receive(self) -> JsonDict:
        line = self.stdout.readline()
        assert line, "the bridge closed its stdout"
        message: JsonDict = json.loads(line)
        return message

    def request(self, req_id: int, op: str, args: JsonDict | None = None) -> JsonDict:
        self.stdin.write(json.dumps({"id": req_id, "op": op, "args": args or {}}).encode() + b"\n")
        self.stdin.flush()
        while True:
            message = self.receive()
            if message.get("id") == req_id:
                return message

    def hello(self) -> JsonDict:
        event = self.receive()
        assert event["event"] == "hello"
        reply = self.request(1, "hello", {"protocol": PROTOCOL_VERSION, "limits": HOST_LIMITS})
        assert reply["ok"], reply
        data: JsonDict = event["data"]
        return data

    def end(self) -> None:
        self.stdin.close()
        assert self.proc.wait(timeout=10) == 0


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.fixture
def daemon_pids() -> Iterator[list[int]]:
    pids: list[int] = []
    yield pids
    for pid in pids:
        if alive(pid):
            os.kill(pid, signal.SIGTERM)


def test_the_daemon_outlives_its_bridge_and_serves_the_next_with_the_same_jobs(
    tmp_path: Path, daemon_pids: list[int]
) -> None:
    first = Bridge(tmp_path)
    facts = first.hello()
    daemon = facts["pid"]
    daemon_pids.append(daemon)
    assert facts["sessions"] == 0
    assert daemon != first.proc.pid
    assert os.stat(socket_path(str(tmp_path / "state"))).st_mode & 0o077 == 0
    # The host kills an exec's processes by its token; the daemon (and so its jobs) do not carry it.
    with open("/proc/%d/environ" % daemon, "rb") as f:
        assert not any(item.startswith(b"PI_SANDBOX_EXEC_TOKEN=") for item in f.read().split(b"\0"))
    started = first.request(2, "exec", {"command": "sleep 1000 & echo $!; wait", "timeoutMs": 0})["result"]
    handle = started["handle"]
    assert started["running"] is True
    first.end()  # the host's channel is gone

    second = Bridge(tmp_path)
    again = second.hello()
    assert again["pid"] == daemon and again["sessions"] == 1
    # Each read returns only new output: collect until `echo $!` has come (in the exec's own reply
    # or later; it races the timeoutMs 0 answer).
    output = started["output"]
    for attempt in range(100):
        status = second.request(3 + attempt, "exec-status", {"handle": handle, "timeoutMs": 100})["result"]
        assert status["running"] is True
        output += status["output"]
        if output.endswith("\n"):
            break
    sleeper = int(output.strip())
    assert alive(sleeper)

    # A newer bridge replaces this session; the older one's channel ends.
    third = Bridge(tmp_path)
    assert third.hello()["sessions"] == 2
    assert second.stdout.readline() == b""
    assert second.proc.wait(timeout=10) == 0

    assert third.request(2, "shutdown") == {"id": 2, "ok": True, "result": {}}
    assert third.proc.wait(timeout=10) == 0
    deadline = time.monotonic() + 10
    while (alive(daemon) or alive(sleeper)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(daemon) and not alive(sleeper)
    assert not os.path.exists(socket_path(str(tmp_path / "state")))


def test_a_session_with_other_limits_is_refused(tmp_path: Path, daemon_pids: list[int]) -> None:
    first = Bridge(tmp_path)
    daemon_pids.append(first.hello()["pid"])
    first.end()
    second = Bridge(tmp_path)
    assert second.receive()["event"] == "hello"
    other = dict(HOST_LIMITS, outputMaxBytes=HOST_LIMITS["outputMaxBytes"] * 2)
    refused = second.request(1, "hello", {"protocol": PROTOCOL_VERSION, "limits": other})
    assert refused["error"]["code"] == "PROTOCOL_MISMATCH"
    assert second.proc.wait(timeout=10) == 0


def test_a_daemon_that_cannot_start_is_a_fatal_event(tmp_path: Path) -> None:
    (tmp_path / "state").write_text("a file where the state dir should be")
    bridge = Bridge(tmp_path)
    event = bridge.receive()
    assert event["event"] == "fatal" and event["data"]["code"] == "AGENT_DAEMON"
    assert "cannot prepare" in event["data"]["message"]
    assert bridge.proc.wait(timeout=10) == 2


class TcpSession(Bridge):
    """A host session through the daemon's loopback TCP door instead of a bridge."""

    def __init__(self, port: int, token: str):  # no bridge process: only the socket
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.sock.sendall(token.encode() + b"\n")
        self.stdin = self.sock.makefile("wb")
        self.stdout = self.sock.makefile("rb")


def said_nothing(sock: socket.socket) -> bool:
    """The peer closed without sending a byte (a reset when it left our bytes unread)."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_the_tcp_door_admits_the_token_only_and_serves_the_same_agent(tmp_path: Path, daemon_pids: list[int]) -> None:
    first = Bridge(tmp_path)
    facts = first.hello()
    daemon_pids.append(facts["pid"])
    door = facts["attach"]
    assert door["port"] > 0 and len(door["token"]) == 32
    started = first.request(2, "exec", {"command": "sleep 1000", "timeoutMs": 0})["result"]

    # A guest process that found the port, with a wrong token or none: closed, and the host's
    # session goes on.
    for attempt in (b"0" * 32 + b"\n", b"\n", b"x" * 200, b""):
        with socket.create_connection(("127.0.0.1", door["port"]), timeout=10) as probe:
            probe.sendall(attempt)
            if attempt == b"":
                probe.shutdown(socket.SHUT_WR)
            assert said_nothing(probe)
    assert first.request(3, "exec-status", {"handle": started["handle"], "timeoutMs": 0})["result"]["running"] is True

    # The token: the same agent, its jobs, and the newest session wins as with a bridge.
    tcp = TcpSession(door["port"], door["token"])
    again = tcp.hello()
    assert again["pid"] == facts["pid"] and again["sessions"] == 1
    assert first.stdout.readline() == b""
    status = tcp.request(2, "exec-status", {"handle": started["handle"], "timeoutMs": 0})["result"]
    assert status["running"] is True
    assert tcp.request(3, "shutdown") == {"id": 3, "ok": True, "result": {}}
    assert first.proc.wait(timeout=10) == 0
