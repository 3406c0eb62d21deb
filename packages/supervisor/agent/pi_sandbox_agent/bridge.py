"""The bridge (`--attach`): the host's exec channel relayed to the agent daemon's unix socket.

The host's channel is an exec session; it ends when the host process goes (a daemon restart, a
guest resumed from saved memory under a new host process), and a new host process cannot adopt
it. So the exec is only this thin bridge: it relays stdin/stdout to the daemon (see daemon.py),
starting the daemon first if none runs. Every host session starts one, so it imports only what
relaying needs: under software emulation the whole agent takes about 1.5 s to import, this module
a fraction of that (see start.py). It uses the interpreter's built-in modules only (`_socket`,
`_thread`, `fcntl`, `os`): `socket`, `threading` and `subprocess` pull in `enum`, `selectors` and
more, which cost about 0.3 s of every bridge's start in a TCG guest.
"""

from __future__ import annotations

import _socket
import _thread
import os
import sys
import time

# typing and contextlib cost about 0.25 s of a bridge's start under TCG: neither is imported.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO

DEFAULT_STATE_DIR = "/var/lib/pi-sandbox-agent"
# How the host starts the agent from its archive: `python3 -I -S -u -c LOADER ARCHIVE ARGS...`
# (the host's launch script in src/launch.ts holds the same line). Running the archive as a script
# instead would import runpy and importlib.util first, about 70 ms of every start in a TCG guest
# even with warm caches. -I keeps the working directory and PYTHON* variables out: the agent runs
# as root, and a guest user's json.py in the working directory must never be imported.
LOADER = "import sys; sys.path.insert(0, sys.argv.pop(1)); from pi_sandbox_agent.start import entry; entry()"
# How long a bridge waits for a daemon it started to listen (Python starts slowly under TCG).
DAEMON_START_TIMEOUT_S = 60.0
LOG_TAIL_BYTES = 2000
# The host's marker of the processes of one exec (`@pi-sandbox/vm` kills every process that carries
# it when the exec is cancelled). The daemon is meant to outlive the bridge's exec, so it drops it.
EXEC_TOKEN_ENV = "PI_SANDBOX_EXEC_TOKEN"


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


def state_dir_of(argv: list[str]) -> str:
    """The --state-dir the daemon will be given (the last one wins, as with argparse)."""
    found = os.environ.get("PI_SANDBOX_AGENT_STATE_DIR", DEFAULT_STATE_DIR)
    for i, arg in enumerate(argv):
        if arg == "--state-dir" and i + 1 < len(argv):
            found = argv[i + 1]
        elif arg.startswith("--state-dir="):
            found = arg.split("=", 1)[1]
    return found


def attach_main(argv: list[str]) -> int:
    """`--attach ARGS`: bridges to the daemon of ARGS' state dir, which it starts with ARGS."""
    return attach(state_dir_of(argv), [arg for arg in argv if arg != "--attach"])


def attach(state_dir: str, daemon_argv: list[str]) -> int:
    """Relays this process's stdin/stdout to the daemon of the state dir, starting it if needed."""
    path = socket_path(state_dir)
    inp, out = take_protocol_streams()
    conn = _connect(path)
    if conn is None:
        try:
            conn = _start_daemon(state_dir, path, daemon_argv)
        except (RuntimeError, OSError) as err:
            import json  # only on this failure path

            out.write(json.dumps({"event": "fatal", "data": {"code": "AGENT_DAEMON", "message": str(err)}}).encode())
            out.write(b"\n")
            out.flush()
            return 2
    _relay(inp, out, conn)
    return 0


def _connect(path: str) -> _socket.socket | None:
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError:
        sock.close()
        return None
    return sock


def _start_daemon(state_dir: str, path: str, daemon_argv: list[str]) -> _socket.socket:
    # Imported here: only the first bridge of a guest boot starts the daemon.
    import fcntl

    base = os.path.abspath(state_dir).rstrip("/")
    os.makedirs(os.path.dirname(base) or "/", exist_ok=True)
    # One starter at a time: two bridges must not both start a daemon.
    with open(base + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        conn = _connect(path)
        if conn is not None:
            return conn
        log_path = base + ".log"
        env = {key: value for key, value in os.environ.items() if key != EXEC_TOKEN_ENV}
        pid = _spawn_session([*self_command(), *daemon_argv, "--daemon"], env, log_path)
        deadline = time.monotonic() + DAEMON_START_TIMEOUT_S
        while time.monotonic() < deadline:
            conn = _connect(path)
            if conn is not None:
                return conn
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
                raise RuntimeError("the agent daemon exited at once (%s): %s" % (code, _tail(log_path)))
            time.sleep(0.05)
        waited = "the agent daemon did not listen within %d s" % DAEMON_START_TIMEOUT_S
        raise RuntimeError("%s: %s" % (waited, _tail(log_path)))


def _spawn_session(argv: list[str], env: dict[str, str], log_path: str) -> int:
    """Starts `argv` in a session of its own, stdin on /dev/null, its output in `log_path` and no
    other fd (as subprocess.Popen with start_new_session and close_fds would, without importing
    subprocess), so the daemon holds none of the exec's pipes."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    devnull = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child runs only until its exec
            try:
                os.setsid()
                os.dup2(devnull, 0)
                os.dup2(log, 1)
                os.dup2(log, 2)
                for fd in os.listdir("/proc/self/fd"):  # what close_fds does, without a loop to RLIMIT_NOFILE
                    if int(fd) > 2:
                        try:
                            os.close(int(fd))
                        except OSError:
                            pass  # the listing's own fd, closed by now
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        return pid
    finally:
        os.close(log)
        os.close(devnull)


def self_command() -> list[str]:
    """How to run this agent again, as this process was run: through LOADER from an archive (what
    the host's launch script does), the package with `-m`, or the zipapp as a script. Without site
    (-S) when this process runs without it: the agent needs only the standard library."""
    flags = ["-S", "-u"] if sys.flags.no_site else ["-u"]
    archive = _archive_of(__file__)
    if archive is not None and sys.argv[0] == "-c":
        return [sys.executable, "-I", *flags, "-c", LOADER, archive]
    main = sys.argv[0]
    if os.path.basename(main) == "__main__.py":
        return [sys.executable, *flags, "-m", "pi_sandbox_agent"]
    return [sys.executable, *flags, os.path.abspath(main)]


def _archive_of(module_file: str) -> str | None:
    """The zip archive a module was imported from (its file is `<archive>/<package>/<name>.py`)."""
    archive = os.path.dirname(os.path.dirname(module_file))
    return archive if os.path.isfile(archive) else None


def _tail(path: str) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - LOG_TAIL_BYTES))
            return f.read().decode("utf-8", "replace").strip() or "no output"
    except OSError:
        return "no log"


def _relay(inp: IO[bytes], out: IO[bytes], conn: _socket.socket) -> None:
    def host_to_agent() -> None:
        try:
            while True:
                data = inp.read1(65536)  # type: ignore[attr-defined]
                if not data:
                    break
                conn.sendall(data)
        except OSError:
            pass
        try:
            conn.shutdown(_socket.SHUT_WR)
        except OSError:
            pass

    # A thread the process does not wait for at exit (as a daemon thread would be).
    _thread.start_new_thread(host_to_agent, ())
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
