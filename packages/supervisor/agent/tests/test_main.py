"""The agent as a process: hello event, the host's hello with its limits, serving, shutdown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from conftest import HOST_LIMITS

from pi_sandbox_agent.protocol import PROTOCOL_VERSION, JsonDict

AGENT_DIR = Path(__file__).resolve().parents[1]
FLAGS = ["--cgroup-root", "none", "--shell", "/bin/sh"]


class Agent:
    def __init__(self, tmp_path: Path):
        dirs = ["--workspace", str(tmp_path / "ws"), "--state-dir", str(tmp_path / "state")]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pi_sandbox_agent", *FLAGS, *dirs],
            cwd=AGENT_DIR,
            env=dict(os.environ, PYTHONPATH=str(AGENT_DIR)),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        self.stdout: IO[bytes] = self.proc.stdout  # type: ignore[assignment]

    def send(self, message: JsonDict) -> None:
        self.stdin.write(json.dumps(message).encode() + b"\n")
        self.stdin.flush()

    def receive(self) -> JsonDict:
        line = self.stdout.readline()
        assert line, "the agent closed its stdout"
        message: JsonDict = json.loads(line)
        return message

    def request(self, req_id: int, op: str, args: JsonDict | None = None) -> JsonDict:
        self.send({"id": req_id, "op": op, "args": args or {}})
        while True:
            message = self.receive()
            if message.get("id") == req_id:
                return message


@pytest.fixture
def agent(tmp_path: Path) -> Iterator[Agent]:
    a = Agent(tmp_path)
    yield a
    if a.proc.poll() is None:
        a.stdin.close()
        a.proc.wait(timeout=10)


def hello_args(**changes: object) -> JsonDict:
    return {"protocol": PROTOCOL_VERSION, "limits": HOST_LIMITS, **changes}


def test_the_agent_says_hello_first_and_serves_nothing_before_the_host_does(agent: Agent) -> None:
    hello = agent.receive()
    assert hello["event"] == "hello"
    assert hello["data"]["protocol"] == PROTOCOL_VERSION and hello["data"]["pid"] == agent.proc.pid
    assert agent.request(1, "ping")["error"]["code"] == "HELLO_REQUIRED"
    wrong = agent.request(2, "hello", hello_args(protocol=PROTOCOL_VERSION + 1))
    assert wrong["error"]["code"] == "PROTOCOL_MISMATCH"
    missing = agent.request(3, "hello", hello_args(limits={"outputMaxBytes": 65536}))
    assert missing["error"]["code"] == "INVALID_ARGUMENT"
    assert agent.request(4, "hello", hello_args()) == {"id": 4, "ok": True, "result": {"protocol": PROTOCOL_VERSION}}
    assert agent.request(5, "ping")["result"]["pid"] == agent.proc.pid
    assert agent.request(6, "hello", hello_args())["error"]["code"] == "PROTOCOL_MISMATCH"


def test_after_hello_requests_run_with_the_host_limits(agent: Agent) -> None:
    agent.receive()
    limits = dict(HOST_LIMITS, outputMaxBytes=1024, execWaitMaxMs=1000, execWaitDefaultMs=500)
    assert agent.request(1, "hello", hello_args(limits=limits))["ok"]
    capped = agent.request(2, "exec", {"command": "head -c 5000 /dev/zero | tr '\\0' y", "timeoutMs": 1000})
    assert len(capped["result"]["output"]) <= 1024 and capped["result"]["truncatedBytes"] > 0
    too_long = agent.request(3, "exec", {"command": "true", "timeoutMs": 1001})
    assert too_long["error"]["details"] == {"key": "timeoutMs"}


def test_bad_lines_are_reported_and_the_agent_goes_on(agent: Agent) -> None:
    agent.receive()
    agent.stdin.write(b"not json\n")
    agent.stdin.flush()
    assert agent.receive() == {"event": "protocol-error", "data": {"message": "request is not JSON"}}
    assert agent.request(1, "hello", hello_args())["ok"]
    assert agent.request(2, "no-such-op")["error"]["code"] == "UNKNOWN_OP"
    assert agent.request(3, "shutdown") == {"id": 3, "ok": True, "result": {}}
    assert agent.proc.wait(timeout=10) == 0


def test_end_of_input_before_hello_ends_the_agent(agent: Agent) -> None:
    agent.receive()
    agent.stdin.close()
    assert agent.proc.wait(timeout=10) == 0


def test_an_unusable_state_dir_is_a_fatal_event(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "pi_sandbox_agent", "--state-dir", str(blocker / "state"), "--cgroup-root", "none"],
        cwd=AGENT_DIR,
        env=dict(os.environ, PYTHONPATH=str(AGENT_DIR)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    assert proc.returncode == 2
    fatal = json.loads(proc.stdout)
    assert fatal["event"] == "fatal" and fatal["data"]["code"] == "AGENT_STATE_DIR"
