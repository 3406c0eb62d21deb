"""The daemon started at boot (boot.py): a daemon given a key leaves a script; the script starts the
same daemon for that key only, hands its start lock over once the daemon listens, and leaves a
daemon that already runs alone."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from conftest import HOST_LIMITS

from pi_sandbox_agent.boot import someone_listens
from pi_sandbox_agent.bridge import LOADER, socket_path
from pi_sandbox_agent.protocol import PROTOCOL_VERSION, JsonDict

AGENT_DIR = Path(__file__).resolve().parents[1]
FLAGS = ["--cgroup-root", "none", "--shell", "/bin/sh", "--warm-shell", "off"]
KEY = "0123456789abcdef0123456789abcdef"


@pytest.fixture(scope="module")
def archive(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("agent") / "sandbox_agent.pyz"
    subprocess.run([sys.executable, str(AGENT_DIR / "build.py"), "--out", str(out)], check=True, capture_output=True)
    return str(out)


class Session:
    """A host session through a bridge run the way the host runs it (the loader, from the archive)."""

    def __init__(self, archive: str, state: Path, *extra: str):
        dirs = ["--workspace", str(state.parent / "ws"), "--state-dir", str(state)]
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-u", "-c", LOADER, archive, "--attach", *FLAGS, *dirs, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        self.stdin: IO[bytes] = self.proc.stdin  # type: ignore[assignment]
        self.stdout: IO[bytes] = self.proc.stdout  # type: ignore[assignment]

    def request(self, req_id: int, op: str, args: JsonDict | None = None) -> JsonDict:
        self.stdin.write(json.dumps({"id": req_id, "op": op, "args": args or {}}).encode() + b"\n")
        self.stdin.flush()
        while True:
            message: JsonDict = json.loads(self.stdout.readline())
            if message.get("id") == req_id:
                return message

    def hello(self) -> JsonDict:
        event: JsonDict = json.loads(self.stdout.readline())
        assert event["event"] == "hello"
        assert self.request(1, "hello", {"protocol": PROTOCOL_VERSION, "limits": HOST_LIMITS})["ok"]
        data: JsonDict = event["data"]
        return data

    def shutdown(self) -> None:
        assert self.request(2, "shutdown")["ok"]
        assert self.proc.wait(timeout=10) == 0


def wait_listening(path: str, proc: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + 30
    while not someone_listens(path):
        assert proc is None or proc.poll() is None, "the boot script ended before its daemon listened"
        assert time.monotonic() < deadline, "nothing listened on %s" % path
        time.sleep(0.05)


def boot(script: Path, key: str) -> subprocess.Popen[bytes]:
    """What the image's /init does: sh SCRIPT KEY, in the background."""
    return subprocess.Popen(["/bin/sh", str(script), key], stdin=subprocess.DEVNULL)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    state = tmp_path / "state"
    yield state
    # Whatever daemon a test left is stopped by its pid in the agent's facts, or by the script's.
    for pid_file in tmp_path.glob("*.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass


def test_the_script_starts_the_same_daemon_for_its_key_only(archive: str, state: Path) -> None:
    script = Path(str(state) + ".boot")
    first = Session(archive, state, "--boot-key", KEY)
    facts = first.hello()
    (state.parent / "first.pid").write_text(str(facts["pid"]))
    assert facts["boot"] is False
    assert script.is_file()
    first.shutdown()

    # Another key (another agent, or other arguments): nothing starts.
    other = boot(script, "f" * 32)
    assert other.wait(timeout=10) == 0
    assert not someone_listens(socket_path(str(state)))

    started = boot(script, KEY)
    (state.parent / "boot.pid").write_text(str(started.pid))
    wait_listening(socket_path(str(state)), started)
    # Its start lock is free once it listens (a bridge waiting on it then connects). The daemon
    # releases it just after its socket listens: a moment later on a loaded host, so allow 5 s.
    with open(str(state) + ".lock", "a") as lock:
        deadline = time.monotonic() + 5
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
    session = Session(archive, state, "--boot-key", KEY)
    facts = session.hello()
    # The script's shell became the daemon (exec), with the arguments of the daemon before it.
    assert facts["pid"] == started.pid
    assert facts["boot"] is True and facts["sessions"] == 0
    assert facts["workspace"] == str(state.parent / "ws") and facts["shell"] == "/bin/sh"
    assert session.request(3, "exec", {"command": "echo hi", "timeoutMs": 10_000})["result"]["output"] == "hi\n"

    # A second start while it runs (a bridge's daemon, or a second boot hook) leaves it alone.
    again = boot(script, KEY)
    assert again.wait(timeout=30) == 0
    assert started.poll() is None
    assert session.request(4, "exec", {"command": "echo still", "timeoutMs": 10_000})["result"]["output"] == "still\n"
    session.shutdown()
    assert started.wait(timeout=10) == 0


def test_a_daemon_without_a_key_leaves_no_script_behind(archive: str, state: Path) -> None:
    keyed = Session(archive, state, "--boot-key", KEY)
    (state.parent / "keyed.pid").write_text(str(keyed.hello()["pid"]))
    keyed.shutdown()
    plain = Session(archive, state)
    (state.parent / "plain.pid").write_text(str(plain.hello()["pid"]))
    assert not Path(str(state) + ".boot").exists()
    plain.shutdown()


def test_a_malformed_key_is_refused(archive: str, state: Path) -> None:
    session = Session(archive, state, "--boot-key", "'; reboot; '")
    event = json.loads(session.proc.stdout.readline())  # type: ignore[union-attr]
    assert event["event"] == "fatal"
    assert "32 lowercase hex digits" in event["data"]["message"]
    assert session.proc.wait(timeout=10) == 2


def test_a_daemon_leaves_its_door_for_the_host_while_it_listens(archive: str, state: Path) -> None:
    door = Path(str(state) + ".door")
    # One left by an earlier boot is gone before a new daemon listens, even one without a key.
    state.parent.mkdir(parents=True, exist_ok=True)
    door.write_text("%s 1234 %s\n" % (KEY, "0" * 32))
    plain = Session(archive, state)
    (state.parent / "plain.pid").write_text(str(plain.hello()["pid"]))
    assert not door.exists()
    plain.shutdown()

    keyed = Session(archive, state, "--boot-key", KEY)
    facts = keyed.hello()
    (state.parent / "keyed.pid").write_text(str(facts["pid"]))
    # Root only: the token lets a connection in as the host.
    assert door.stat().st_mode & 0o777 == 0o600
    assert door.read_text() == "%s %d %s\n" % (KEY, facts["attach"]["port"], facts["attach"]["token"])
    keyed.shutdown()
    # And it goes with the daemon.
    deadline = time.monotonic() + 10
    while door.exists():
        assert time.monotonic() < deadline, "the door file outlived its daemon"
        time.sleep(0.05)
