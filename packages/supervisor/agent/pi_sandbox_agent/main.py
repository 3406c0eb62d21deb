"""Entry point: flags, the protocol streams, the state dir, then hello and the request loop."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
from types import FrameType

from . import boot
from .agent import Agent
from .bridge import DEFAULT_STATE_DIR, attach_main, socket_path, take_protocol_streams
from .cleanup import Cleanup, maybe_mount_cgroup2
from .context import Context
from .daemon import serve_daemon
from .hostname import apply_etc_hostname
from .memory import give_memory_back
from .protocol import (
    AGENT_VERSION,
    PROTOCOL_VERSION,
    JsonDict,
    Limits,
    LineReader,
    Wire,
    await_hello,
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


def parse_boot_key(text: str) -> str:
    if not boot.KEY.fullmatch(text):
        raise argparse.ArgumentTypeError("a boot key is 32 lowercase hex digits")
    return text


def default_shell() -> str:
    for candidate in ("/bin/bash", "/bin/sh"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"


def parse_args(argv: list[str]) -> argparse.Namespace:
    env = os.environ.get
    parser = argparse.ArgumentParser(description="pi-sandbox guest agent (line-delimited JSON on stdin/stdout)")
    parser.add_argument("--state-dir", default=env("PI_SANDBOX_AGENT_STATE_DIR", DEFAULT_STATE_DIR))
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
        "--attach",
        action="store_true",
        help="bridge stdin/stdout to the agent daemon of --state-dir, starting it if none runs (see daemon.py)",
    )
    parser.add_argument("--daemon", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--boot-key",
        type=parse_boot_key,
        default=None,
        help="the daemon leaves a script for the image's /init to start it at boot under this key (see boot.py)",
    )
    # Started by that script (see boot.py): holds the start lock on fd 9 until it listens.
    parser.add_argument("--boot", action="store_true", help=argparse.SUPPRESS)
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


class Setup:
    """What every mode of the agent prepares before the first host session."""

    def __init__(self, opts: argparse.Namespace):
        self.opts = opts
        self.state = StateDir(opts.state_dir)
        # Raises OSError when the state dir cannot be prepared.
        self.state.reset()
        self.workspace = os.path.abspath(opts.workspace)
        # A fresh disk has no workspace yet; commands, services and hooks all run in it.
        try:
            os.makedirs(self.workspace, exist_ok=True)
        except OSError:
            pass
        low, high = opts.port_range
        self.ports = PortBook(self.state.ports_file, low, high)
        self.cleanup = Cleanup(opts.cgroup_root)
        self.facts: JsonDict = {
            "protocol": PROTOCOL_VERSION,
            "version": AGENT_VERSION,
            "pid": os.getpid(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "stateDir": self.state.root,
            "workspace": self.workspace,
            "shell": opts.shell,
            "cleanup": self.cleanup.method,
            "warmShell": opts.warm_shell and usable(opts.shell),
            # Host sessions served before this one (daemon.py counts them).
            "sessions": 0,
            # Whether the image's /init started this daemon at boot (boot.py).
            "boot": False,
        }

    def agent(self, wire: Wire, limits: Limits) -> Agent:
        ctx = Context(wire, limits, self.state, self.workspace, self.opts.shell)
        return Agent(ctx, self.cleanup, self.ports, self.opts.warm_shell, self.facts)


def state_dir_problem(opts: argparse.Namespace, err: OSError) -> JsonDict:
    return {"code": "AGENT_STATE_DIR", "message": "cannot prepare %s: %s" % (opts.state_dir, err)}


def run(argv: list[str]) -> int:
    opts = parse_args(argv)
    if opts.attach:
        # start.py sends bridges to bridge.py directly; this keeps `run` complete.
        return attach_main(argv)
    if opts.cgroup_root == "/sys/fs/cgroup":
        maybe_mount_cgroup2(opts.cgroup_root)
    if opts.daemon:
        return run_daemon(opts, argv)
    inp, out = take_protocol_streams()
    wire = Wire(out)
    try:
        setup = Setup(opts)
    except OSError as err:
        wire.event("fatal", state_dir_problem(opts, err))
        return 2
    wire.event("hello", setup.facts)
    reader = LineReader(inp)
    hello = await_hello(reader, wire)
    if hello is None:
        setup.cleanup.close()
        return 0
    hello_id, limits, ack = hello
    agent = setup.agent(wire, limits)
    wire.ok(hello_id, ack)

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        agent.serve(reader)
    except SystemExit:
        agent.shutdown()
    return 0


def run_daemon(opts: argparse.Namespace, argv: list[str]) -> int:
    """The daemon, started by the first bridge of a boot or, with --boot, by the image's /init."""
    path = socket_path(opts.state_dir)
    if opts.boot:
        with contextlib.suppress(OSError):
            os.setsid()  # as a bridge starts it: a session of its own
        if boot.someone_listens(path):
            return 0
    # The daemon starts once per guest boot: the boot's fix-ups go here.
    apply_etc_hostname()
    give_memory_back()
    try:
        setup = Setup(opts)
    except OSError as err:
        sys.stderr.write("%s\n" % state_dir_problem(opts, err)["message"])
        return 2
    setup.facts["boot"] = opts.boot
    # A door file is only ever the listening daemon's: an earlier one's goes before this listens.
    boot.remove_door(opts.state_dir)

    def listening(door: JsonDict | None) -> None:
        if opts.boot_key:
            boot.write_script(opts.state_dir, opts.boot_key, argv)
            if door is not None:
                boot.write_door(opts.state_dir, opts.boot_key, door)
        else:
            boot.remove_script(opts.state_dir)
        # Last: a host's exec waiting on the lock reads the door file next.
        if opts.boot:
            boot.release_start_lock()

    try:
        return serve_daemon(setup.facts, setup.agent, path, listening)
    finally:
        boot.remove_door(opts.state_dir)


def entry() -> None:
    sys.exit(run(sys.argv[1:]))
