"""The agent as a guest daemon that outlives its host channel.

The host's channel is an exec session; it ends when the host process goes (a daemon restart, a
guest resumed from saved memory under a new host process), and a new host process cannot adopt
it. So with `--attach` the exec is only a thin bridge: it relays stdin/stdout to the agent
daemon's unix socket next to the state dir, starting the daemon first if none runs. The daemon
(`--daemon`, never given by hand) serves one host session at a time: each connection gets the
hello event and must say hello with the same limits as the first; a new connection replaces the
old one; when a session ends without `shutdown`, the agent and its services keep running for the
next. Replies go to the session that asked; the agent's own events (services) go to whichever
session is attached, and are dropped while none is.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import IO, Protocol

from .protocol import PROTOCOL_VERSION, AgentError, JsonDict, Limits, LineReader, SwitchWire, Wire, await_hello

# How long a bridge waits for a daemon it started to listen (Python starts slowly under TCG).
DAEMON_START_TIMEOUT_S = 60.0
LOG_TAIL_BYTES = 2000
# The host's marker of the processes of one exec (`@pi-sandbox/vm` kills every process that carries
# it when the exec is cancelled). The daemon is meant to outlive the bridge's exec, so it drops it.
EXEC_TOKEN_ENV = "PI_SANDBOX_EXEC_TOKEN"


class Servable(Protocol):
    def serve(self, reader: LineReader, wire: Wire | None = None, outlive: bool = False) -> bool: ...

    def shutdown(self) -> None: ...


def socket_path(state_dir: str) -> str:
    """The daemon's socket, next to (not in) the state dir, which the daemon clears at its start."""
    return os.path.abspath(state_dir).rstrip("/") + ".sock"


def take_protocol_streams() -> tuple[IO[bytes], IO[bytes]]:
    """Keeps the protocol streams to ourselves: children must never inherit the channel, and a
    stray print must not corrupt it, so fd 0 becomes /dev/null and fd 1 points at stderr."""
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)
    sys.stdout = sys.stderr
    return inp, out


# ---------------------------------------------------------------------------------------------
# the daemon


def serve_daemon(facts: JsonDict, make_agent: Callable[[Wire, Limits], Servable], path: str) -> int:
    """Listens on `path` and serves host sessions until one asks for shutdown (or SIGTERM)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o077)
    try:
        listener.bind(path)
    finally:
        os.umask(previous)
    listener.listen(8)
    events = SwitchWire()
    lock = threading.Lock()
    agent: list[Servable] = []
    first_limits: list[Limits] = []
    current: list[socket.socket] = []
    served = [0]
    done = threading.Event()

    def session(conn: socket.socket) -> None:
        out = conn.makefile("wb")
        wire = Wire(out)
        try:
            with lock:
                wire.event("hello", dict(facts, sessions=served[0]))
            reader = LineReader(conn.makefile("rb"))
            hello = await_hello(reader, wire)
            if hello is None:
                return
            hello_id, limits = hello
            with lock:
                if not agent:
                    first_limits.append(limits)
                    agent.append(make_agent(events, limits))
                elif limits != first_limits[0]:
                    wire.error(
                        hello_id,
                        AgentError(
                            "PROTOCOL_MISMATCH",
                            "this agent serves a host with other limits; stop and start the instance for a new agent",
                        ),
                    )
                    return
                events.attach(wire)
                served[0] += 1
            wire.ok(hello_id, {"protocol": PROTOCOL_VERSION})
            if agent[0].serve(reader, wire, outlive=True):
                done.set()
                listener.shutdown(socket.SHUT_RDWR)
        finally:
            with lock:
                if current and current[0] is conn:
                    events.attach(None)
            with contextlib.suppress(OSError):
                conn.close()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                break
            with lock:
                # The newest host wins: the one before is gone (or about to be).
                for old in current:
                    with contextlib.suppress(OSError):
                        old.shutdown(socket.SHUT_RDWR)
                current[:] = [conn]
            threading.Thread(target=session, args=(conn,), name="session", daemon=True).start()
    except SystemExit:
        if agent:
            agent[0].shutdown()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        listener.close()
    return 0


# ---------------------------------------------------------------------------------------------
# the bridge


def attach(state_dir: str, daemon_argv: list[str]) -> int:
    """Relays this process's stdin/stdout to the daemon of the state dir, starting it if needed."""
    path = socket_path(state_dir)
    inp, out = take_protocol_streams()
    conn = _connect(path)
    if conn is None:
        try:
            conn = _start_daemon(state_dir, path, daemon_argv)
        except RuntimeError as err:
            Wire(out).event("fatal", {"code": "AGENT_DAEMON", "message": str(err)})
            return 2
    _relay(inp, out, conn)
    return 0


def _connect(path: str) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _start_daemon(state_dir: str, path: str, daemon_argv: list[str]) -> socket.socket:
    base = os.path.abspath(state_dir).rstrip("/")
    os.makedirs(os.path.dirname(base) or "/", exist_ok=True)
    # One starter at a time: two bridges must not both start a daemon.
    with open(base + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(path)
        if conn is not None:
            return conn
        log_path = base + ".log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*_self_command(), *daemon_argv, "--daemon"],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env={key: value for key, value in os.environ.items() if key != EXEC_TOKEN_ENV},
                start_new_session=True,
                close_fds=True,
            )
        deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
        while time.monotonic() < deadline:
            conn = _connect(path)
            if conn is not None:
                return conn
            if proc.poll() is not None:
                raise RuntimeError("the agent daemon exited at once (%s): %s" % (proc.returncode, _tail(log_path)))
            time.sleep(0.05)
        waited = "the agent daemon did not listen within %d s" % DAEMON_START_TIMEOUT_S
        raise RuntimeError("%s: %s" % (waited, _tail(log_path)))


def _self_command() -> list[str]:
    """How to run this agent again: the zipapp, or the package when run with `-m`."""
    main = sys.argv[0]
    if os.path.basename(main) == "__main__.py":
        return [sys.executable, "-u", "-m", "pi_sandbox_agent"]
    return [sys.executable, "-u", os.path.abspath(main)]


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace").strip() or "no output"
    except OSError:
        return "no log"


def _relay(inp: IO[bytes], out: IO[bytes], conn: socket.socket) -> None:
    def host_to_agent() -> None:
        try:
            while True:
                data = inp.read1(65536)  # type: ignore[attr-defined]
                if not data:
                    break
                conn.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_WR)

    threading.Thread(target=host_to_agent, name="to-agent", daemon=True).start()
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                break
            out.write(data)
            out.flush()
    except OSError:
        pass
    finally:
        conn.close()
