"""The agent as a guest daemon that outlives its host channel.

Each host channel is a thin bridge exec (`--attach`, see bridge.py) relayed to this daemon's unix
socket next to the state dir; the first bridge of a guest boot starts the daemon. The daemon
(`--daemon`, never given by hand) serves one host session at a time: each connection gets the
hello event and must say hello with the same limits as the first; a new connection replaces the
old one; when a session ends without `shutdown`, the agent and its services keep running for the
next. Replies go to the session that asked; the agent's own events (services) go to whichever
session is attached, and are dropped while none is.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import signal
import socket
import threading
from collections.abc import Callable
from types import FrameType
from typing import Protocol

from .protocol import AgentError, JsonDict, Limits, LineReader, SwitchWire, Wire, await_hello


class Servable(Protocol):
    def serve(self, reader: LineReader, wire: Wire | None = None, outlive: bool = False) -> bool: ...

    def shutdown(self) -> None: ...


# ---------------------------------------------------------------------------------------------
# the daemon


def serve_daemon(
    facts: JsonDict,
    make_agent: Callable[[Wire, Limits], Servable],
    path: str,
    listening: Callable[[JsonDict | None], None] = lambda _door: None,
) -> int:
    """Listens on `path` (and on a loopback TCP port, see `TcpDoor`) and serves host sessions until
    one asks for shutdown (or SIGTERM); `listening` runs once the socket takes connections, with
    the TCP door's port and token (None without one)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o077)
    try:
        listener.bind(path)
    finally:
        os.umask(previous)
    listener.listen(8)
    door = TcpDoor.open()
    if door is not None:
        facts = dict(facts, attach={"port": door.port, "token": door.token})
    listening(facts.get("attach"))
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
            hello_id, limits, ack = hello
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
            wire.ok(hello_id, ack)
            if agent[0].serve(reader, wire, outlive=True):
                done.set()
                listener.shutdown(socket.SHUT_RDWR)
        finally:
            with lock:
                if current and current[0] is conn:
                    events.attach(None)
            with contextlib.suppress(OSError):
                conn.close()

    def take(conn: socket.socket) -> None:
        with lock:
            # The newest host wins: the one before is gone (or about to be).
            for old in current:
                with contextlib.suppress(OSError):
                    old.shutdown(socket.SHUT_RDWR)
            current[:] = [conn]
        threading.Thread(target=session, args=(conn,), name="session", daemon=True).start()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    if door is not None:
        door.serve(take)
    try:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                break
            take(conn)
    except SystemExit:
        if agent:
            agent[0].shutdown()
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
        listener.close()
        if door is not None:
            door.close()
    return 0


class TcpDoor:
    """A second way in for the host: a loopback TCP port that Gondolin's ingress reaches without an
    exec, so a host that comes back to a running agent (a warm start) attaches without starting a
    bridge (an exec, a shell and a Python start: about 0.4 s under TCG). The port and a random token
    go to the host in the hello; a connection counts as a session only once its first line is the
    token, so another guest process that finds the port can neither talk to the agent nor end the
    host's session (an unverified connection never replaces the current one)."""

    TOKEN_WAIT_S = 10.0
    MAX_TOKEN_LINE = 128

    def __init__(self, sock: socket.socket, token: str):
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.token = token

    @classmethod
    def open(cls) -> TcpDoor | None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.bind(("127.0.0.1", 0))
            sock.listen(8)
        except OSError:
            sock.close()
            return None  # no loopback: the exec bridge still works
        return cls(sock, os.urandom(16).hex())

    def serve(self, take: Callable[[socket.socket], None]) -> None:
        threading.Thread(target=self._accept, args=(take,), name="tcp-door", daemon=True).start()

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _accept(self, take: Callable[[socket.socket], None]) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._admit, args=(conn, take), name="tcp-admit", daemon=True).start()

    def _admit(self, conn: socket.socket, take: Callable[[socket.socket], None]) -> None:
        conn.settimeout(self.TOKEN_WAIT_S)
        line = b""
        try:
            while not line.endswith(b"\n") and len(line) <= self.MAX_TOKEN_LINE:
                chunk = conn.recv(self.MAX_TOKEN_LINE + 1 - len(line))
                if not chunk:
                    break
                line += chunk
        except OSError:
            pass
        if not (line.endswith(b"\n") and hmac.compare_digest(line[:-1], self.token.encode())):
            with contextlib.suppress(OSError):
                conn.close()
            return
        conn.settimeout(None)
        take(conn)
