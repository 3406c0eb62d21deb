"""Entry point: flags, the protocol streams, the state dir, then hello and the request loop."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from types import FrameType
from typing import IO, Any

from .agent import Agent
from .cleanup import Cleanup, maybe_mount_cgroup2
from .context import Context
from .protocol import (
    AGENT_VERSION,
    PROTOCOL_VERSION,
    AgentError,
    JsonDict,
    Limits,
    LineReader,
    Wire,
    accept_hello,
    next_request,
    request_args,
)
from .state import PortBook, StateDir
from .warm_shell import usable


def parse_port_range(text: str) -> tuple[int, int]:
    try:
        low, high = (int(x) for x in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError("port range must look like 20000-29999") from None
    if not (1 <= low <= high <= 65535):
        raise argparse.ArgumentTypeError("port range must be within 1-65535")
    return low, high


def default_shell() -> str:
    for candidate in ("/bin/bash", "/bin/sh"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description="pi-sandbox guest agent (line-delimited JSON on stdin/stdout)")
    parser.add_argument("--state-dir", default=env("PI_SANDBOX_AGENT_STATE_DIR", "/var/lib/pi-sandbox-agent"))
    parser.add_argument("--workspace", default=env("PI_SANDBOX_AGENT_WORKSPACE", "/workspace"))
    parser.add_argument("--shell", default=env("PI_SANDBOX_AGENT_SHELL") or default_shell())
    parser.add_argument(
        "--cgroup-root",
        default=env("PI_SANDBOX_AGENT_CGROUP_ROOT", "/sys/fs/cgroup"),
        help='cgroup v2 mount used to catch setup leftovers, or "none"',
    )
    parser.add_argument(
        "--warm-shell",
        choices=("on", "off"),
        default=env("PI_SANDBOX_AGENT_WARM_SHELL") or "on",
        help="keep a login bash started ahead of the next exec (see warm_shell.WARM_BOOTSTRAP)",
    )
    parser.add_argument(
        "--port-range",
        type=parse_port_range,
        default=parse_port_range(env("PI_SANDBOX_AGENT_PORT_RANGE", "20000-29999")),
    )
    opts = parser.parse_args(argv)
    opts.warm_shell = opts.warm_shell == "on"
    if opts.cgroup_root == "none":
        opts.cgroup_root = None
    return opts


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


def await_hello(reader: LineReader, wire: Wire) -> tuple[Any, Limits] | None:
    """Reads until the host's hello arrives: (its request id, its limits); None at end of input
    or on shutdown. Anything else is refused with HELLO_REQUIRED."""
    while True:
        req = next_request(reader, wire)
        if req is None:
            return None
        op = req.get("op")
        if op == "shutdown":
            wire.ok(req["id"], {})
            return None
        try:
            if op != "hello":
                raise AgentError(
                    "HELLO_REQUIRED",
                    "%r before hello: the host must send its hello (protocol %d) first" % (op, PROTOCOL_VERSION),
                )
            return req["id"], accept_hello(request_args(req))
        except AgentError as err:
            wire.error(req["id"], err)


def run(argv: list[str]) -> int:
    opts = parse_args(argv)
    if opts.cgroup_root == "/sys/fs/cgroup":
        maybe_mount_cgroup2(opts.cgroup_root)
    inp, out = take_protocol_streams()
    wire = Wire(out)
    state = StateDir(opts.state_dir)
    try:
        state.reset()
    except OSError as err:
        wire.event("fatal", {"code": "AGENT_STATE_DIR", "message": "cannot prepare %s: %s" % (opts.state_dir, err)})
        return 2
    workspace = os.path.abspath(opts.workspace)
    # A fresh disk has no workspace yet; commands, services and hooks all run in it.
    try:
        os.makedirs(workspace, exist_ok=True)
    except OSError:
        pass
    low, high = opts.port_range
    ports = PortBook(state.ports_file, low, high)
    cleanup = Cleanup(opts.cgroup_root)
    facts: JsonDict = {
        "protocol": PROTOCOL_VERSION,
        "version": AGENT_VERSION,
        "pid": os.getpid(),
        "python": "%d.%d.%d" % sys.version_info[:3],
        "stateDir": state.root,
        "workspace": workspace,
        "shell": opts.shell,
        "cleanup": cleanup.method,
        "warmShell": opts.warm_shell and usable(opts.shell),
    }
    wire.event("hello", facts)
    reader = LineReader(inp)
    hello = await_hello(reader, wire)
    if hello is None:
        cleanup.close()
        return 0
    hello_id, limits = hello
    agent = Agent(Context(wire, limits, state, workspace, opts.shell), cleanup, ports, opts.warm_shell, facts)
    wire.ok(hello_id, {"protocol": PROTOCOL_VERSION})

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        agent.serve(reader)
    except SystemExit:
        agent.shutdown()
    return 0


def entry() -> None:
    sys.exit(run(sys.argv[1:]))
