#!/usr/bin/env python3
"""pi-sandbox guest agent.

Runs once per guest boot over one long-lived exec channel. It reads line-delimited JSON requests
on stdin and writes responses and events on stdout:

    request   {"id": 7, "op": "exec", "args": {...}}
    response  {"id": 7, "ok": true, "result": {...}}
              {"id": 7, "ok": false, "error": {"code": "...", "message": "...", "details": {...}}}
    event     {"event": "service", "data": {...}}

Every request runs on its own thread, so a slow wait never holds up kills, file transfers or other
commands. The agent supervises services (restart 1 s after any exit, readiness probes), runs exec
commands with output kept in files, runs setup/resume hooks, and moves files in checksummed chunks.

Python >= 3.9, standard library only. Kept in one file on purpose: the host installs it into the
guest with a single write, so a guest never runs a mix of two versions.
"""

from __future__ import annotations

import argparse
import base64
import collections
import hashlib
import http.client
import json
import os
import queue
import random
import secrets
import select
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import traceback

PROTOCOL_VERSION = 1
AGENT_VERSION = "0.1.0"

OUTPUT_CAP_BYTES = 64 * 1024
DEFAULT_WAIT_MS = 10_000
MAX_WAIT_MS = 60_000
MAX_COMPLETED_HANDLES = 128
EXPIRED_IDS_REMEMBERED = 4096
CHUNK_BYTES = 256 * 1024
MAX_READ_BYTES = 64 * 1024 * 1024
MAX_WRITE_BYTES = 256 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
TRANSFER_IDLE_S = 120.0
RESTART_DELAY_S = 1.0
SERVICE_STOP_GRACE_S = 5.0
KILL_GRACE_S = 2.0
LOG_ROTATE_BYTES = 1024 * 1024
DEFAULT_LOG_LINES = 100
MAX_LOG_LINES = 500
ADHOC_READY_TIMEOUT_MS = 60_000
SETUP_DEADLINE_MS = 20 * 60 * 1000
RESUME_WAIT_MS = 10_000
MAX_IN_FLIGHT = 512
PROBE_INTERVAL_S = 0.1
MAX_OUTPUT_FILE_BYTES = 16 * 1024 * 1024
OUTPUT_CHECK_S = 2.0
RUN_MARKER_ENV = "PI_SANDBOX_RUN"
PORTS_FILE = "ports.json"
HEALTH_KINDS = ("tcp", "http", "process")


class AgentError(Exception):
    """An error reported to the host with a stable code."""

    def __init__(self, code: str, message: str, details: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or {}


# ---------------------------------------------------------------------------------------------
# small helpers


def mono() -> float:
    return time.monotonic()


def now_iso() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % int((t % 1) * 1000)


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_json(path: str, value) -> None:
    tmp = "%s.%s.tmp" % (path, secrets.token_hex(4))
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path))


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return "SIG%d" % num


def exit_info(returncode: int) -> dict:
    """Popen returncode -> {exitCode, signal?} with the shell convention 128+n for signals."""
    if returncode < 0:
        return {"exitCode": 128 - returncode, "signal": signal_name(-returncode)}
    return {"exitCode": returncode}


def kill_group(pgid: int, sig: int) -> bool:
    """Signals a whole process group; False when the group no longer exists."""
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return False


def group_alive(pgid: int) -> bool:
    """Whether the group has a member that is not a zombie.

    killpg(pgid, 0) alone also counts zombies, and orphans reparented to an init that reaps
    slowly would then make every stop wait out its whole grace period.
    """
    if not kill_group(pgid, 0):
        return False
    try:
        entries = os.listdir("/proc")
    except OSError:
        return True
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry, "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
            return True
    return False


def stop_group(pgid: int, grace_s: float) -> None:
    """SIGTERM the group, wait up to grace_s for it to go, then SIGKILL whatever is left."""
    if not kill_group(pgid, signal.SIGTERM):
        return
    deadline = mono() + grace_s
    while mono() < deadline:
        if not group_alive(pgid):
            return
        time.sleep(0.05)
    kill_group(pgid, signal.SIGKILL)


def wait_exit(pid: int, timeout_s: float):
    """Waits until process `pid` (our unreaped child) exits or `timeout_s` passes.

    True when it exited, False on timeout, None where the kernel or Python has no pidfds (then the
    caller must wait some other way). A pidfd turns readable the moment the process exits, so a
    short command is seen to end at once — no sleep loop and no hand-off between threads.
    """
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        fd = opener(pid)
    except OSError:
        return None
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(max(0, int(timeout_s * 1000 + 0.999))))
    finally:
        os.close(fd)


def wait_child(proc: subprocess.Popen, timeout_s):
    """proc.wait(timeout) without Popen's sleep-and-poll loop where a pidfd can be had."""
    if timeout_s is not None and proc.returncode is None:
        exited = wait_exit(proc.pid, timeout_s)
        if exited is None:
            return proc.wait(timeout=timeout_s)
        if not exited:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
    return proc.wait()


def utf8_cut_end(data: bytes) -> bytes:
    """Drops a trailing partial UTF-8 sequence so a cut never splits a character."""
    i = len(data)
    back = 0
    while i > 0 and back < 4 and (data[i - 1] & 0xC0) == 0x80:
        i -= 1
        back += 1
    if i > 0 and data[i - 1] >= 0xC0:
        lead = data[i - 1]
        need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        if back + 1 < need:
            return data[: i - 1]
    return data


def utf8_cut_start(data: bytes) -> bytes:
    """Drops leading continuation bytes left by a cut in the middle of a character."""
    i = 0
    while i < len(data) and i < 4 and (data[i] & 0xC0) == 0x80:
        i += 1
    return data[i:]


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


_FALLOC_PUNCH_HOLE_KEEP_SIZE = 0x02 | 0x01
_fallocate = None


def punch_hole(path: str, offset: int, length: int) -> bool:
    """Frees the disk blocks of [offset, offset+length) of a file, keeping its size and every
    offset in it (Linux fallocate PUNCH_HOLE). False where unsupported (no ctypes, old kernel, fs)."""
    global _fallocate
    try:
        if _fallocate is None:
            import ctypes
            import ctypes.util

            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
            _fallocate = libc.fallocate
        fd = os.open(path, os.O_WRONLY)
        try:
            return _fallocate(fd, _FALLOC_PUNCH_HOLE_KEEP_SIZE, offset, length) == 0
        finally:
            os.close(fd)
    except (ImportError, OSError, AttributeError):
        return False


def omitted_marker(count: int, what: str) -> str:
    return "\n[... pi-sandbox: %d bytes of %s omitted ...]\n" % (count, what)


def read_span_capped(path: str, start: int, end: int, cap: int, what: str, tail_only: bool = False) -> tuple:
    """Reads bytes [start, end) of a file as text of at most about `cap` UTF-8 bytes.

    A larger span keeps its head and tail with an explicit marker between them (or, with
    `tail_only`, only its tail after a leading marker). Returns (text, omitted_byte_count).
    """
    total = max(0, end - start)
    if total == 0:
        return "", 0
    with open(path, "rb") as f:
        if total <= cap:
            f.seek(start)
            return decode(f.read(total)), 0
        room = cap - 96
        if tail_only:
            f.seek(end - room)
            tail = utf8_cut_start(f.read(room))
            omitted = total - len(tail)
            return omitted_marker(omitted, what).lstrip("\n") + decode(tail), omitted
        head_len = room // 4
        tail_len = room - head_len
        f.seek(start)
        head = utf8_cut_end(f.read(head_len))
        f.seek(end - tail_len)
        tail = utf8_cut_start(f.read(tail_len))
    omitted = total - len(head) - len(tail)
    return decode(head) + omitted_marker(omitted, what) + decode(tail), omitted


def check_int(args: dict, key: str, default, lo: int, hi: int):
    value = args.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < lo or value > hi:
        raise AgentError("INVALID_ARGUMENT", "%s must be an integer from %d to %d" % (key, lo, hi), {"key": key})
    return value


def check_str(args: dict, key: str, required: bool = True, allow_empty: bool = False):
    value = args.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or (not allow_empty and value == ""):
        raise AgentError("INVALID_ARGUMENT", "%s must be a non-empty string" % key, {"key": key})
    return value


def check_env(value, key: str = "env") -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise AgentError("INVALID_ARGUMENT", "%s must map names to strings" % key, {"key": key})
    return value


def check_abs_path(args: dict, key: str = "path") -> str:
    path = check_str(args, key)
    if not path.startswith("/") or "\0" in path:
        raise AgentError("INVALID_ARGUMENT", "%s must be an absolute guest path, got %r" % (key, path), {"key": key})
    return path


def os_error(err: OSError, path: str, action: str) -> AgentError:
    details = {"path": path, "errno": err.errno}
    if isinstance(err, FileNotFoundError):
        return AgentError("FILE_NOT_FOUND", "cannot %s %s: no such file" % (action, path), details)
    if isinstance(err, IsADirectoryError):
        return AgentError("FILE_IS_DIRECTORY", "cannot %s %s: it is a directory" % (action, path), details)
    if isinstance(err, PermissionError):
        return AgentError("FILE_ACCESS_DENIED", "cannot %s %s: permission denied" % (action, path), details)
    return AgentError("FILE_IO", "cannot %s %s: %s" % (action, path, err.strerror or err), details)


# ---------------------------------------------------------------------------------------------
# wire


class Wire:
    """Serialises writes of whole JSON lines to the host."""

    def __init__(self, out):
        self._out = out
        self._lock = threading.Lock()
        self.broken = False

    def send(self, message: dict) -> None:
        data = (json.dumps(message, separators=(",", ":"), ensure_ascii=False) + "\n").encode("utf-8", "replace")
        with self._lock:
            if self.broken:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except OSError:
                self.broken = True

    def event(self, name: str, data: dict) -> None:
        self.send({"event": name, "data": data})


class WorkerPool:
    """Runs each submitted item on its own thread, reusing idle threads instead of starting one
    per request (a thread start costs milliseconds in an emulated guest). Threads beyond
    `keep_idle` idle ones end after their item, so a burst does not leave hundreds behind."""

    def __init__(self, fn, keep_idle: int = 8):
        self._fn = fn
        self._keep_idle = keep_idle
        self._queue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0

    def submit(self, item) -> None:
        with self._lock:
            spawn = self._idle == 0
            if not spawn:
                self._idle -= 1  # that idle thread is now spoken for
        self._queue.put(item)
        if spawn:
            threading.Thread(target=self._work, name="worker", daemon=True).start()

    def _work(self) -> None:
        # Every queued item has its own consumer: an idle thread reserved by submit, or a new one.
        while True:
            self._fn(self._queue.get())
            with self._lock:
                if self._idle >= self._keep_idle:
                    return
                self._idle += 1


# ---------------------------------------------------------------------------------------------
# rotating logs


class RotatingLog:
    """Append-only log bounded to two files of `limit` bytes each (<name>.log and <name>.log.1)."""

    def __init__(self, path: str, limit: int = LOG_ROTATE_BYTES):
        self.path = path
        self.limit = limit
        self._lock = threading.Lock()
        self._file = open(path, "ab")
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            if self._file is None:
                return
            if len(data) > self.limit:
                data = data[-self.limit :]
            if self._size + len(data) > self.limit and self._size > 0:
                self._rotate()
            self._file.write(data)
            self._file.flush()
            self._size += len(data)

    def note(self, text: str) -> None:
        self.write(("[pi-sandbox %s] %s\n" % (now_iso(), text)).encode("utf-8", "replace"))

    def _rotate(self) -> None:
        self._file.close()
        os.replace(self.path, self.path + ".1")
        self._file = open(self.path, "ab")
        self._size = 0

    def close(self) -> None:
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None


def tail_log(path: str, lines: int) -> tuple:
    """Last `lines` lines across <path>.1 and <path>, capped at OUTPUT_CAP_BYTES. (text, omitted, count)."""
    data = b""
    for p in (path + ".1", path):
        try:
            with open(p, "rb") as f:
                data += f.read()
        except FileNotFoundError:
            pass
    parts = data.split(b"\n")
    if parts and parts[-1] == b"":
        parts.pop()
    picked = parts[-lines:] if lines > 0 else []
    text = b"\n".join(picked) + (b"\n" if picked else b"")
    omitted = 0
    if len(text) > OUTPUT_CAP_BYTES:
        keep = OUTPUT_CAP_BYTES - 96
        omitted = len(text) - keep
        text = utf8_cut_start(text[-keep:])
        return omitted_marker(omitted, "log").lstrip("\n") + decode(text), omitted, len(picked)
    return decode(text), 0, len(picked)


# ---------------------------------------------------------------------------------------------
# state directory and sticky ports


class StateDir:
    """The agent's guest directory. Cleared at start except the sticky port allocations."""

    KEEP = (PORTS_FILE,)

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.exec_dir = os.path.join(self.root, "exec")
        self.logs_dir = os.path.join(self.root, "logs")
        self.runs_dir = os.path.join(self.root, "runs")
        self.ports_file = os.path.join(self.root, PORTS_FILE)

    def reset(self) -> None:
        # Pids and command files of an earlier boot are never trusted: the processes are gone
        # (or, worse, the pids now name unrelated processes), so everything but ports goes.
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        for entry in os.listdir(self.root):
            if entry in self.KEEP:
                continue
            path = os.path.join(self.root, entry)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        for d in (self.exec_dir, self.logs_dir, self.runs_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        with open(os.path.join(self.root, "agent.pid"), "w") as f:
            f.write("%d\n" % os.getpid())


class PortBook:
    """Sticky guest port per service name, persisted across restarts and reboots."""

    def __init__(self, path: str, low: int, high: int):
        self.path = path
        self.low = low
        self.high = high
        self._lock = threading.Lock()
        self._ports = {}
        try:
            with open(path, "r", encoding="utf-8") as f:
                raw = json.load(f)
            ports = raw.get("ports", {}) if isinstance(raw, dict) else {}
            self._ports = {k: v for k, v in ports.items() if isinstance(k, str) and isinstance(v, int)}
        except (OSError, ValueError):
            self._ports = {}

    def get(self, name: str):
        with self._lock:
            return self._ports.get(name)

    def assign(self, name: str, reserved: set) -> int:
        with self._lock:
            port = self._ports.get(name)
            if port is not None:
                return port
            taken = set(self._ports.values()) | reserved
            span = self.high - self.low + 1
            start = random.randrange(span)
            for i in range(span):
                candidate = self.low + (start + i) % span
                if candidate in taken or not port_is_free(candidate):
                    continue
                self._ports[name] = candidate
                atomic_write_json(self.path, {"version": 1, "ports": self._ports})
                return candidate
        raise AgentError("PORT_EXHAUSTED", "no free guest port left in %d-%d for service %s" % (self.low, self.high, name))


def port_is_free(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, port))
        except OSError:
            return False
        finally:
            s.close()
    return True


# ---------------------------------------------------------------------------------------------
# process cleanup: cgroup v2 when we can, else an environment marker sweep


class Cleanup:
    """Finds and stops every process a run left behind, including detached, double-forked ones."""

    def __init__(self, cgroup_root: str | None):
        self.cgroup_base = None
        if cgroup_root:
            base = os.path.join(cgroup_root, "pi-sandbox-agent")
            try:
                if os.path.exists(os.path.join(cgroup_root, "cgroup.procs")):
                    os.makedirs(base, exist_ok=True)
                    probe = os.path.join(base, "probe-%d" % os.getpid())
                    os.mkdir(probe)
                    os.rmdir(probe)
                    self.cgroup_base = base
            except OSError:
                self.cgroup_base = None

    @property
    def method(self) -> str:
        return "cgroup+environ" if self.cgroup_base else "environ"

    def new_scope(self, token: str):
        if not self.cgroup_base:
            return None
        path = os.path.join(self.cgroup_base, "run-" + token)
        try:
            os.mkdir(path)
            return path
        except OSError:
            return None

    def wrap(self, scope: str | None, argv: list) -> list:
        """Prefixes argv so the process moves itself into the scope before running anything."""
        if not scope:
            return argv
        script = 'echo $$ > "$0/cgroup.procs" 2>/dev/null; exec "$@"'
        return ["/bin/sh", "-c", script, scope] + argv

    def stop_all(self, token: str, scope: str | None) -> dict:
        killed = set()
        if scope:
            killed |= self._stop_cgroup(scope)
        killed |= self._sweep_environ(token)
        if scope:
            try:
                os.rmdir(scope)
            except OSError:
                pass
        return {"method": "cgroup+environ" if scope else "environ", "stopped": len(killed)}

    def close(self) -> None:
        if self.cgroup_base:
            try:
                os.rmdir(self.cgroup_base)
            except OSError:
                pass  # another agent's scopes still live there

    def _cgroup_pids(self, scope: str) -> list:
        try:
            with open(os.path.join(scope, "cgroup.procs"), "r") as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return []

    def _stop_cgroup(self, scope: str) -> set:
        seen = set()
        pids = self._cgroup_pids(scope)
        for pid in pids:
            seen.add(pid)
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        deadline = mono() + 1.0
        while pids and mono() < deadline:
            time.sleep(0.05)
            pids = self._cgroup_pids(scope)
        deadline = mono() + 5.0
        while pids and mono() < deadline:
            seen.update(pids)
            try:
                with open(os.path.join(scope, "cgroup.kill"), "w") as f:
                    f.write("1")
            except OSError:
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
            time.sleep(0.05)
            pids = self._cgroup_pids(scope)
        return seen

    def _marked_pids(self, needle: bytes) -> list:
        found = []
        me = os.getpid()
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == me:
                continue
            try:
                with open("/proc/%s/environ" % entry, "rb") as f:
                    env = f.read()
            except OSError:
                continue
            if needle in env.split(b"\0"):
                found.append(int(entry))
        return found

    def _sweep_environ(self, token: str) -> set:
        needle = ("%s=%s" % (RUN_MARKER_ENV, token)).encode()
        seen = set()
        # First a polite SIGTERM, then SIGKILL rounds until a sweep comes back empty: a process
        # may fork between our listing and our signal, and its child inherits the marker.
        for round_no in range(40):
            pids = self._marked_pids(needle)
            if not pids:
                break
            seen.update(pids)
            sig = signal.SIGTERM if round_no == 0 else signal.SIGKILL
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
            time.sleep(0.5 if round_no == 0 else 0.05)
        return seen


def maybe_mount_cgroup2(root: str) -> None:
    """Mounts cgroup2 on an empty /sys/fs/cgroup (guests whose init did not) when we are root."""
    try:
        if os.geteuid() != 0 or not os.path.isdir(root) or os.listdir(root):
            return
        with open("/proc/filesystems", "r") as f:
            if "cgroup2" not in f.read():
                return
        subprocess.run(["mount", "-t", "cgroup2", "cgroup2", root], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        pass


# ---------------------------------------------------------------------------------------------
# jobs: exec commands and setup/resume runs, addressed by opaque handles


class Job:
    """A command (or sequence of commands) whose output goes to a file the host reads in slices."""

    def __init__(self, handle: str, kind: str, out_path: str, keep_file: bool = False):
        self.handle = handle
        self.kind = kind
        self.out_path = out_path
        self.keep_file = keep_file
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.started = mono()
        self.started_at = now_iso()
        self.completed = None
        self.exit = None
        self.read_offset = 0
        self.freed = False
        self.pid = None
        self.proc = None
        self.cancelled = False
        self.dropped = 0
        self.extra = {}

    def finish(self, info: dict) -> None:
        with self.lock:
            self.exit = info
            self.completed = mono()
        self.done.set()

    def kill(self) -> None:
        with self.lock:
            self.cancelled = True
            proc = self.proc
        if proc is not None:
            # Also reaches members of the group left behind after the leader exited.
            stop_group(proc.pid, KILL_GRACE_S)

    def collect(self, tail_only: bool = False) -> dict:
        """New output since the last call (capped), plus the status. Frees files of a finished job."""
        with self.lock:
            # Check `done` before reading: once the command has exited, what we read is all of it.
            finished = self.done.is_set()
            output, omitted = "", 0
            if not self.freed:
                try:
                    size = os.path.getsize(self.out_path)
                    output, omitted = read_span_capped(
                        self.out_path, self.read_offset, size, OUTPUT_CAP_BYTES, "output", tail_only
                    )
                    self.read_offset = size
                except OSError:
                    pass
                if self.dropped:
                    output = (
                        "[... pi-sandbox: %d bytes of output were dropped unread (the output file is capped at %d MiB) ...]\n"
                        % (self.dropped, MAX_OUTPUT_FILE_BYTES // (1024 * 1024))
                    ) + output
                    omitted += self.dropped
                    self.dropped = 0
                if finished:
                    self.freed = True
                    if not self.keep_file:
                        try:
                            os.unlink(self.out_path)
                        except OSError:
                            pass
            return self.status(output, omitted)

    def bound_file(self, limit: int) -> None:
        """Keeps the unread output of a running job under `limit` bytes on disk by dropping it.

        Preferably by punching a hole over the unread span: the file keeps its size, the job's
        O_APPEND writes keep landing after it, and the count of dropped bytes is exact. Where holes
        are unsupported, the file is truncated instead (the job's next write lands at the new end),
        and bytes written between measuring and truncating go uncounted.
        """
        with self.lock:
            if self.freed:
                return
            try:
                size = os.path.getsize(self.out_path)
                if size - self.read_offset <= limit:
                    return
                if punch_hole(self.out_path, self.read_offset, size - self.read_offset):
                    self.dropped += size - self.read_offset
                    self.read_offset = size
                    return
                os.truncate(self.out_path, 0)
            except OSError:
                return
            self.dropped += size - self.read_offset
            self.read_offset = 0

    def status(self, output: str | None = None, omitted: int = 0) -> dict:
        result = {
            "handle": self.handle,
            "kind": self.kind,
            "running": not self.done.is_set(),
            "startedAt": self.started_at,
        }
        if self.pid is not None:
            result["guestPid"] = self.pid
        if self.exit is not None:
            result.update(self.exit)
            result["durationMs"] = int(((self.completed or mono()) - self.started) * 1000)
        if output is not None:
            result["output"] = output
            result["truncatedBytes"] = omitted
        result.update(self.extra)
        return result


class Jobs:
    """Handle registry. Keeps at most MAX_COMPLETED_HANDLES finished jobs, oldest expire first."""

    def __init__(self, state: StateDir):
        self.state = state
        self._lock = threading.Lock()
        self._jobs = collections.OrderedDict()
        self._expired = collections.OrderedDict()

    def new_handle(self) -> str:
        return "x" + secrets.token_hex(8)

    def add(self, job: Job) -> None:
        with self._lock:
            self._jobs[job.handle] = job
            self._expire_locked()

    def completed(self) -> None:
        with self._lock:
            self._expire_locked()

    def _expire_locked(self) -> None:
        done = [j for j in self._jobs.values() if j.done.is_set()]
        if len(done) <= MAX_COMPLETED_HANDLES:
            return
        done.sort(key=lambda j: j.completed or 0)
        for job in done[: len(done) - MAX_COMPLETED_HANDLES]:
            del self._jobs[job.handle]
            if not job.keep_file:
                try:
                    os.unlink(job.out_path)
                except OSError:
                    pass
            self._expired[job.handle] = True
            while len(self._expired) > EXPIRED_IDS_REMEMBERED:
                self._expired.popitem(last=False)

    def get(self, handle) -> Job:
        if not isinstance(handle, str) or not handle:
            raise AgentError("INVALID_ARGUMENT", "handle must be a non-empty string", {"key": "handle"})
        with self._lock:
            job = self._jobs.get(handle)
            if job is not None:
                return job
            if handle in self._expired:
                raise AgentError(
                    "EXEC_HANDLE_EXPIRED",
                    "command handle %s expired: only the %d most recently completed commands are kept"
                    % (handle, MAX_COMPLETED_HANDLES),
                    {"handle": handle},
                )
        raise AgentError(
            "EXEC_HANDLE_NOT_FOUND",
            "no command with handle %s in this session (handles do not survive a restart of the instance)" % handle,
            {"handle": handle},
        )

    def running(self) -> list:
        with self._lock:
            return [j for j in self._jobs.values() if not j.done.is_set()]

    def watch_output(self, stop: threading.Event) -> None:
        """Bounds output files of running jobs (a forgotten `yes` must not fill the guest disk)."""
        while not stop.wait(OUTPUT_CHECK_S):
            for job in self.running():
                job.bound_file(MAX_OUTPUT_FILE_BYTES)


# The script a warm shell runs: everything before the first `read` happens ahead of time (exec of
# bash, dynamic linking, shell start-up); then it blocks until the agent writes
# "<bytes>\n<command>\0" on its stdin. Only then does it read the login files, in bash's own order
# (/etc/profile, then the first of ~/.bash_profile, ~/.bash_login, ~/.profile), and run the command
# with stdin on /dev/null (opened read-write, like the DEVNULL of a cold start). The login files
# are read after the command is known, exactly as `bash -lc` would, so edits to them always count.
# `read -N` under LC_ALL=C takes exactly that many bytes with buffered reads; `read -d ""` (bash
# before 4.1) reads a byte per system call. A short read means the agent died mid-write: exit
# without running anything. BASH_EXECUTION_STRING holds the command, as it does in `bash -c`; the
# eval stays on line 1 so $LINENO counts from 1.
WARM_BOOTSTRAP = (
    "read -r __pi_sandbox_n || exit 0; "
    "if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 401)); "
    'then LC_ALL=C IFS= read -r -N "$__pi_sandbox_n" BASH_EXECUTION_STRING || exit 0; '
    'else IFS= read -r -d "" BASH_EXECUTION_STRING || exit 0; fi; '
    "unset -v __pi_sandbox_n; exec 0<>/dev/null; SECONDS=0; "
    "if [ -e /etc/profile ]; then . /etc/profile; fi; "
    "if [ -e ~/.bash_profile ]; then . ~/.bash_profile; elif [ -e ~/.bash_login ]; then . ~/.bash_login; "
    "elif [ -e ~/.profile ]; then . ~/.profile; fi; "
    'eval "$BASH_EXECUTION_STRING"'
)


class WarmShell:
    """A login bash started ahead of an exec, blocked until it is given its command."""

    def __init__(self, handle: str, out_path: str, proc: subprocess.Popen, cwd: str, host: str):
        self.handle = handle
        self.out_path = out_path
        self.proc = proc
        self.cwd = cwd
        self.host = host

    def in_dir(self, path: str) -> bool:
        """Whether the shell's working directory still is the directory at `path`."""
        try:
            here = os.stat("/proc/%d/cwd" % self.proc.pid)
            there = os.stat(path)
        except OSError:
            return False
        return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)

    def send(self, data: bytes) -> bool:
        """Hands over the command; False when the shell is gone (someone killed it while idle)."""
        try:
            self.proc.stdin.write(b"%d\n" % len(data) + data + b"\0")
            self.proc.stdin.close()
            return True
        except OSError:
            return False

    def discard(self) -> None:
        if self.proc.poll() is None:  # unreaped, so its pid (and group id) cannot be reused yet
            kill_group(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        self.proc.wait()
        try:
            os.unlink(self.out_path)
        except OSError:
            pass


class WarmShells:
    """Keeps one warm login shell ready for the next exec, in the cwd the last exec used.

    Only for bash (the bootstrap needs `read -N`) and only for execs without extra `env`: those
    variables must be in place before the login files run, so such an exec starts a shell of its
    own. A shell is replaced after each use, in the background once the exec has its answer.
    """

    def __init__(self, agent: "Agent", enabled: bool):
        self.agent = agent
        self.enabled = enabled and os.path.basename(agent.shell) == "bash"
        self._cond = threading.Condition()
        self._ready = None
        self._want = None
        self._spawning = None  # cwd of a shell being started right now
        self._retired = []
        self._stopped = False
        if self.enabled:
            threading.Thread(target=self._run, name="warm-shell", daemon=True).start()

    def take(self, cwd: str):
        """The ready shell if it suits an exec in `cwd`, else None (the caller starts one itself)."""
        if not self.enabled:
            return None
        with self._cond:
            # One being started for this cwd is worth waiting for: Popen returns as soon as bash
            # runs, which is sooner than a shell of our own would.
            deadline = mono() + 1.0
            while self._ready is None and self._spawning == cwd and mono() < deadline:
                self._cond.wait(deadline - mono())
            shell, self._ready = self._ready, None
            self._want = None  # the next one starts when the exec is answered (refill)
            if shell is None:
                return None
            # A directory deleted and made again (a checkout, `rm -rf x && mkdir x`) or mounted over
            # since is another directory; a hostname change would leave $HOSTNAME stale; a dead
            # shell cannot take a command.
            if (
                shell.cwd != cwd
                or not shell.in_dir(cwd)
                or shell.host != socket.gethostname()
                or shell.proc.poll() is not None
            ):
                self._retire_locked(shell)
                return None
            return shell

    def retire(self, shell: WarmShell) -> None:
        with self._cond:
            self._retire_locked(shell)

    def refill(self, cwd: str) -> None:
        """Asks for a ready shell in `cwd` (no-op when one is ready there already)."""
        if not self.enabled:
            return
        with self._cond:
            self._want = cwd
            self._cond.notify_all()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            if self._ready is not None:
                self._retired.append(self._ready)
                self._ready = None
            retired, self._retired = self._retired, []
            self._cond.notify_all()
        for shell in retired:
            shell.discard()

    def _retire_locked(self, shell: WarmShell) -> None:
        self._retired.append(shell)
        self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped and not self._retired and not self._spawn_due_locked():
                    self._cond.wait()
                retired, self._retired = self._retired, []
                want = None if self._stopped or not self._spawn_due_locked() else self._want
                self._want = None
                if want is not None and self._ready is not None:
                    retired.append(self._ready)  # ready, but in another directory
                    self._ready = None
                stopped = self._stopped
                self._spawning = want
            for shell in retired:
                shell.discard()
            if stopped:
                return
            if want is None:
                continue
            shell = self._spawn(want)
            with self._cond:
                self._spawning = None
                keep = shell is not None and not self._stopped and self._ready is None
                if keep:
                    self._ready = shell
                self._cond.notify_all()
            if shell is not None and not keep:
                shell.discard()

    def _spawn_due_locked(self) -> bool:
        return self._want is not None and (self._ready is None or self._ready.cwd != self._want)

    def _spawn(self, cwd: str):
        handle = self.agent.jobs.new_handle()
        out_path = os.path.join(self.agent.state.exec_dir, handle + ".out")
        try:
            with open(out_path, "ab") as out:
                proc = subprocess.Popen(
                    [self.agent.shell, "--noprofile", "-l", "-c", WARM_BOOTSTRAP],
                    cwd=cwd, env=self.agent.base_env, stdin=subprocess.PIPE, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                )
        except OSError:
            # The exec that follows starts its own shell and reports whatever went wrong.
            try:
                os.unlink(out_path)
            except OSError:
                pass
            return None
        return WarmShell(handle, out_path, proc, cwd, socket.gethostname())


# ---------------------------------------------------------------------------------------------
# services


class Service:
    """One supervised service: a process in its own session, restarted 1 s after any exit."""

    def __init__(self, agent: "Agent", spec: dict, port: int, log: RotatingLog):
        self.agent = agent
        self.spec = spec
        self.name = spec["name"]
        self.port = port
        self.log = log
        self.cond = threading.Condition()
        self.state = "running"
        self.proc = None
        self.pid = None
        self.restarts = 0
        self.last_exit = None
        self.readiness = "pending"
        self.readiness_error = None
        self.ready_at = None
        self.started_at = None
        self.spawns = 0
        self.stop_requested = False
        self.thread = None

    # -- lifecycle

    def start(self) -> None:
        self.thread = threading.Thread(target=self._loop, name="svc-" + self.name, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        try:
            while True:
                self._run_once()
                with self.cond:
                    if self.stop_requested:
                        break
                    self.state = "restarting"
                    self.cond.notify_all()
                    deadline = mono() + RESTART_DELAY_S
                    while not self.stop_requested and mono() < deadline:
                        self.cond.wait(deadline - mono())
                    if self.stop_requested:
                        break
                    self.restarts += 1
        except Exception:  # never let one service's bug take the agent down
            self.log.note("supervisor error: %s" % traceback.format_exc().strip())
        finally:
            with self.cond:
                self.state = "stopped"
                self.proc = None
                self.pid = None
                self.cond.notify_all()

    def _env(self) -> dict:
        env = dict(os.environ)
        env.pop(RUN_MARKER_ENV, None)
        env.update(self.spec.get("env") or {})
        env["PORT"] = str(self.port)
        if self.spec.get("publicUrl"):
            env["PUBLIC_URL"] = self.spec["publicUrl"]
        else:
            env.pop("PUBLIC_URL", None)
        return env

    def _run_once(self) -> None:
        cwd = self.agent.resolve_cwd(self.spec.get("cwd"))
        argv = self.agent.login_shell(self.spec["command"])
        with self.cond:
            if self.stop_requested:
                return
            self.spawns += 1
            generation = self.spawns
            self.readiness = "pending"
            self.readiness_error = None
            self.ready_at = None
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=self._env(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as err:
                proc = None
                reason = "cwd %s does not exist" % cwd if not os.path.isdir(cwd) else str(err)
                self.last_exit = {"exitCode": 127, "at": now_iso(), "error": reason}
                self.readiness_error = "could not start: %s" % reason
            if proc is not None:
                self.proc = proc
                self.pid = proc.pid
                self.state = "running"
                self.started_at = now_iso()
            self.cond.notify_all()
        if proc is None:
            self.log.note("could not start: %s; retrying in %.0f s" % (self.last_exit["error"], RESTART_DELAY_S))
            self.agent.wire.event("service", {"service": self.name, "type": "exit", "exitCode": 127})
            return
        self.log.note(
            "started pid %d on port %d%s: %s"
            % (proc.pid, self.port, " (restart %d)" % self.restarts if self.restarts else "", self.spec["command"])
        )
        self.agent.wire.event("service", {"service": self.name, "type": "start", "pid": proc.pid, "port": self.port})
        pump = threading.Thread(target=self._pump, args=(proc,), name="log-" + self.name, daemon=True)
        pump.start()
        threading.Thread(target=self._probe, args=(generation, proc), name="probe-" + self.name, daemon=True).start()
        rc = proc.wait()
        # The shell is gone; anything it left in its group would hold the port across the restart.
        if group_alive(proc.pid):
            stop_group(proc.pid, 1.0)
        info = exit_info(rc)
        info["at"] = now_iso()
        with self.cond:
            self.last_exit = info
            self.pid = None
            self.proc = None
            if self.readiness == "pending":
                self.readiness_error = "process exited with code %d before it was ready" % info["exitCode"]
            self.cond.notify_all()
            stopping = self.stop_requested
        pump.join(timeout=1.0)
        how = "signal %s" % info["signal"] if "signal" in info else "code %d" % info["exitCode"]
        if stopping:
            self.log.note("stopped (%s)" % how)
        else:
            self.log.note("exited with %s; restarting in %.0f s" % (how, RESTART_DELAY_S))
        self.agent.wire.event("service", {"service": self.name, "type": "exit", **info})

    def _pump(self, proc: subprocess.Popen) -> None:
        fd = proc.stdout.fileno()
        try:
            while True:
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self.log.write(chunk)
        except OSError:
            pass
        finally:
            try:
                proc.stdout.close()
            except OSError:
                pass

    # -- readiness

    def _probe(self, generation: int, proc: subprocess.Popen) -> None:
        health = self.spec.get("health") or {"kind": "tcp"}
        kind = health.get("kind", "tcp")
        timeout_s = self.spec.get("timeoutMs", 30_000) / 1000.0
        deadline = mono() + timeout_s
        last_error = "not probed yet"
        while True:
            with self.cond:
                if self.spawns != generation or self.stop_requested or proc.poll() is not None:
                    return
            if kind == "process":
                ok, last_error = True, None
            elif kind == "http":
                ok, last_error = probe_http(self.port, health.get("path") or "/")
            else:
                ok, last_error = probe_tcp(self.port)
            with self.cond:
                if self.spawns != generation or self.stop_requested:
                    return
                if ok:
                    self.readiness = "ready"
                    self.readiness_error = None
                    self.ready_at = now_iso()
                    self.cond.notify_all()
                    break
                self.readiness_error = last_error
                if mono() >= deadline:
                    self.readiness = "failed"
                    self.cond.notify_all()
                    break
            time.sleep(PROBE_INTERVAL_S)
        if self.readiness == "ready":
            self.log.note("ready (%s)" % describe_health(health, self.port))
            self.agent.wire.event("service", {"service": self.name, "type": "ready"})
        else:
            self.log.note("not ready within %d ms: %s" % (self.spec.get("timeoutMs", 30_000), last_error))
            self.agent.wire.event("service", {"service": self.name, "type": "not-ready", "error": last_error})

    def wait_ready(self, deadline: float) -> bool:
        with self.cond:
            while self.readiness != "ready" and not self.stop_requested:
                remaining = deadline - mono()
                if remaining <= 0:
                    # The caller's deadline can pass a moment before the probe's own: report the
                    # same verdict either way. A later successful probe still flips it to ready.
                    if self.readiness == "pending":
                        self.readiness = "failed"
                    return False
                self.cond.wait(min(remaining, 0.5))
            return self.readiness == "ready"

    def not_ready_failure(self, timeout_ms: int) -> dict:
        with self.cond:
            detail = self.readiness_error or "no answer"
            if self.restarts:
                detail += "; restarted %d times" % self.restarts
            if self.last_exit is not None and "exitCode" in self.last_exit:
                detail += "; last exit code %d" % self.last_exit["exitCode"]
        health = self.spec.get("health") or {"kind": "tcp"}
        return {
            "service": self.name,
            "code": "SERVICE_NOT_READY",
            "message": "service %s was not ready within %d ms (%s: %s); it stays supervised; read its log with "
            "logs for service %s (guest file %s)"
            % (self.name, timeout_ms, describe_health(health, self.port), detail, self.name, self.log.path),
            "logPath": self.log.path,
        }

    # -- stop

    def stop(self) -> None:
        with self.cond:
            self.stop_requested = True
            proc = self.proc
            if proc is not None:
                self.state = "stopping"
            self.cond.notify_all()
        if proc is not None:
            stop_group(proc.pid, SERVICE_STOP_GRACE_S)
        if self.thread is not None:
            self.thread.join(timeout=SERVICE_STOP_GRACE_S + 3.0)
        with self.cond:
            self.state = "stopped"
            self.cond.notify_all()

    @property
    def live(self) -> bool:
        return not self.stop_requested

    def status(self) -> dict:
        with self.cond:
            return {
                "name": self.name,
                "state": self.state,
                "pid": self.pid,
                "port": self.port,
                "restarts": self.restarts,
                "lastExit": self.last_exit,
                "readiness": {"state": self.readiness, "error": self.readiness_error, "readyAt": self.ready_at},
                "startedAt": self.started_at,
                "command": self.spec["command"],
                "cwd": self.agent.resolve_cwd(self.spec.get("cwd")),
                "health": self.spec.get("health") or {"kind": "tcp"},
                "adhoc": bool(self.spec.get("adhoc")),
                "logPath": self.log.path,
            }


def describe_health(health: dict, port: int) -> str:
    kind = health.get("kind", "tcp")
    if kind == "http":
        return "HTTP GET %s on port %d" % (health.get("path") or "/", port)
    if kind == "process":
        return "process running"
    return "TCP connect to port %d" % port


def probe_tcp(port: int) -> tuple:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True, None
    except OSError as err:
        return False, "TCP port %d: %s" % (port, err.strerror or err)


def probe_http(port: int, path: str) -> tuple:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2.0)
    try:
        conn.request("GET", path, headers={"Host": "127.0.0.1:%d" % port, "User-Agent": "pi-sandbox-agent"})
        resp = conn.getresponse()
        resp.read(65536)
        if 200 <= resp.status < 400:
            return True, None
        return False, "HTTP GET %s answered %d" % (path, resp.status)
    except (OSError, http.client.HTTPException) as err:
        return False, "HTTP GET %s on port %d: %s" % (path, port, getattr(err, "strerror", None) or err)
    finally:
        conn.close()


SERVICE_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789-")


def check_service_spec(raw) -> dict:
    if not isinstance(raw, dict):
        raise AgentError("INVALID_ARGUMENT", "each service spec must be an object")
    name = raw.get("name")
    if not isinstance(name, str) or not name or len(name) > 32 or not set(name) <= SERVICE_NAME_CHARS or name[0] == "-":
        raise AgentError("INVALID_ARGUMENT", "service name %r is not valid" % (name,), {"key": "name"})
    spec = {"name": name, "command": check_str(raw, "command")}
    cwd = raw.get("cwd")
    if cwd is not None and not isinstance(cwd, str):
        raise AgentError("INVALID_ARGUMENT", "services.%s.cwd must be a string" % name)
    spec["cwd"] = cwd
    spec["port"] = check_int(raw, "port", None, 1, 65535)
    spec["env"] = check_env(raw.get("env"), "services.%s.env" % name)
    health = raw.get("health") or {"kind": "tcp"}
    if not isinstance(health, dict) or health.get("kind") not in HEALTH_KINDS:
        raise AgentError("INVALID_ARGUMENT", "services.%s.health.kind must be tcp, http or process" % name)
    if health["kind"] == "http":
        path = health.get("path") or "/"
        if not isinstance(path, str) or not path.startswith("/"):
            raise AgentError("INVALID_ARGUMENT", "services.%s.health.path must start with /" % name)
        health = {"kind": "http", "path": path}
    else:
        health = {"kind": health["kind"]}
    spec["health"] = health
    spec["timeoutMs"] = check_int(raw, "timeoutMs", 30_000, 1, 3_600_000)
    public_url = raw.get("publicUrl")
    if public_url is not None and not isinstance(public_url, str):
        raise AgentError("INVALID_ARGUMENT", "services.%s.publicUrl must be a string" % name)
    spec["publicUrl"] = public_url
    spec["adhoc"] = bool(raw.get("adhoc"))
    return spec


class Services:
    """The service table.

    `_op` serialises whole mutations (ensure/restart/stop/start), including the bounded wait for a
    stopped process, so two of them can never both launch the same name. `_lock` guards only the
    table itself, so status never waits behind a slow stop. Readiness waits hold neither.
    """

    def __init__(self, agent: "Agent"):
        self.agent = agent
        self._op = threading.Lock()
        self._lock = threading.Lock()
        self._items = collections.OrderedDict()
        self._logs = {}

    def _log_for(self, name: str) -> RotatingLog:
        log = self._logs.get(name)
        if log is None:
            log = RotatingLog(self.log_path(name))
            self._logs[name] = log
        return log

    def log_path(self, name: str) -> str:
        return os.path.join(self.agent.state.logs_dir, name + ".log")

    def _get(self, name):
        with self._lock:
            return self._items.get(name)

    def _launch(self, spec: dict, specs: list, keep_port=None) -> tuple:
        with self._lock:
            reserved = {s["port"] for s in specs if s.get("port")}
            reserved |= {svc.port for svc in self._items.values() if svc.name != spec["name"]}
        port = spec["port"] or keep_port or self.agent.ports.assign(spec["name"], reserved)
        svc = Service(self.agent, spec, port, self._log_for(spec["name"]))
        with self._lock:
            self._items[spec["name"]] = svc
        svc.start()
        return svc, mono() + spec["timeoutMs"] / 1000.0, spec["timeoutMs"]

    def _wait_all(self, started: list) -> list:
        failures = []
        for svc, deadline, timeout_ms in started:
            if not svc.wait_ready(deadline) and not svc.stop_requested:
                failures.append(svc.not_ready_failure(timeout_ms))
        return failures

    def ensure(self, raw_specs: list, wait: bool = True) -> dict:
        specs = [check_service_spec(s) for s in raw_specs]
        started, kept = [], []
        with self._op:
            for spec in specs:
                current = self._get(spec["name"])
                if current is not None and current.live:
                    kept.append(spec["name"])
                    continue
                started.append(self._launch(spec, specs))
        failures = self._wait_all(started) if wait else []
        return {
            "started": [s.name for s, _, _ in started],
            "kept": kept,
            "failures": failures,
            "services": self.status(None)["services"],
        }

    def restart(self, raw: list) -> dict:
        started = []
        with self._op:
            specs = []
            for item in raw:
                if isinstance(item, dict) and set(item.keys()) <= {"name"}:
                    current = self._get(item.get("name"))
                    if current is None:
                        raise AgentError(
                            "SERVICE_NOT_FOUND",
                            "no service named %s is known to the agent" % item.get("name"),
                            {"service": item.get("name")},
                        )
                    specs.append(dict(current.spec))
                else:
                    specs.append(check_service_spec(item))
            for spec in specs:
                current = self._get(spec["name"])
                keep = None
                if current is not None:
                    current.stop()
                    keep = current.port
                started.append(self._launch(spec, specs, keep_port=keep))
        failures = self._wait_all(started)
        return {
            "restarted": [s.name for s, _, _ in started],
            "failures": failures,
            "services": self.status(None)["services"],
        }

    def start_adhoc(self, raw: dict) -> dict:
        spec = check_service_spec(dict(raw, adhoc=True))
        spec["timeoutMs"] = min(spec["timeoutMs"], ADHOC_READY_TIMEOUT_MS)
        with self._op:
            current = self._get(spec["name"])
            if current is not None:
                if not current.spec.get("adhoc"):
                    raise AgentError(
                        "SERVICE_DECLARED",
                        "service %s is declared in the sandbox.yaml; use restart instead" % spec["name"],
                        {"service": spec["name"]},
                    )
                current.stop()
            started = self._launch(spec, [spec], keep_port=current.port if current and not spec["port"] else None)
        failures = self._wait_all([started])
        return {"service": started[0].status(), "failures": failures}

    def stop(self, names) -> dict:
        with self._op:
            with self._lock:
                if names is None:
                    targets = list(self._items.values())
                    unknown = []
                else:
                    targets = [self._items[n] for n in names if n in self._items]
                    unknown = [n for n in names if n not in self._items]
            threads = [threading.Thread(target=svc.stop, daemon=True) for svc in targets]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=SERVICE_STOP_GRACE_S + 5.0)
        return {"stopped": [s.name for s in targets], "unknown": unknown, "services": self.status(None)["services"]}

    def status(self, names) -> dict:
        with self._lock:
            items = list(self._items.values())
        if names is not None:
            wanted = set(names)
            items = [s for s in items if s.name in wanted]
        return {"services": [s.status() for s in items]}

    def known(self, name: str) -> bool:
        return self._get(name) is not None or os.path.exists(self.log_path(name))

    def shutdown(self) -> None:
        self.stop(None)
        for log in self._logs.values():
            log.close()


# ---------------------------------------------------------------------------------------------
# file transfers


class Transfer:
    def __init__(self, token: str, kind: str):
        self.token = token
        self.kind = kind
        self.touched = mono()
        self.lock = threading.Lock()


class Transfers:
    """Chunked, checksummed reads and writes that never touch Gondolin's own file channel."""

    def __init__(self):
        self._lock = threading.Lock()
        self._items = {}

    def _put(self, t: Transfer) -> None:
        with self._lock:
            self._reap_locked()
            self._items[t.token] = t

    def _reap_locked(self) -> None:
        now = mono()
        for token, t in list(self._items.items()):
            if now - t.touched > TRANSFER_IDLE_S:
                del self._items[token]
                if t.kind == "write":
                    discard_partial(t)

    def _take(self, token, kind: str) -> Transfer:
        with self._lock:
            t = self._items.get(token) if isinstance(token, str) else None
        if t is None or t.kind != kind:
            raise AgentError("TRANSFER_NOT_FOUND", "no open %s transfer %r (it may have been idle too long)" % (kind, token))
        t.touched = mono()
        return t

    def _drop(self, token: str) -> None:
        with self._lock:
            self._items.pop(token, None)

    # reads

    def read_open(self, args: dict) -> dict:
        path = check_abs_path(args)
        max_bytes = check_int(args, "maxBytes", OUTPUT_CAP_BYTES, 0, MAX_READ_BYTES)
        exact = bool(args.get("exact"))
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if exact and size > max_bytes:
                    raise AgentError(
                        "FILE_TOO_LARGE", "%s is %d bytes, more than the %d allowed" % (path, size, max_bytes),
                        {"path": path, "size": size, "maxBytes": max_bytes},
                    )
                data = f.read(max_bytes)
                more = f.read(1) != b""
        except OSError as err:
            raise os_error(err, path, "read")
        if exact and more:
            raise AgentError("FILE_TOO_LARGE", "%s grew past %d bytes while being read" % (path, max_bytes), {"path": path})
        size = max(size, len(data) + (1 if more else 0))
        digest = hashlib.sha256(data).hexdigest()
        result = {"size": size, "length": len(data), "sha256": digest, "truncated": more or size > len(data)}
        if len(data) <= CHUNK_BYTES:
            result["data"] = base64.b64encode(data).decode("ascii")
            return result
        t = Transfer(secrets.token_hex(8), "read")
        t.data = data
        self._put(t)
        result["token"] = t.token
        result["chunkBytes"] = CHUNK_BYTES
        return result

    def read_chunk(self, args: dict) -> dict:
        t = self._take(args.get("token"), "read")
        offset = check_int(args, "offset", 0, 0, len(t.data))
        piece = t.data[offset : offset + CHUNK_BYTES]
        return {"data": base64.b64encode(piece).decode("ascii"), "offset": offset, "eof": offset + len(piece) >= len(t.data)}

    def read_close(self, args: dict) -> dict:
        self._drop(args.get("token"))
        return {}

    # writes

    def write_open(self, args: dict) -> dict:
        path = check_abs_path(args)
        size = check_int(args, "size", None, 0, MAX_WRITE_BYTES)
        if size is None:
            raise AgentError("INVALID_ARGUMENT", "size is required")
        digest = check_str(args, "sha256")
        mode = check_int(args, "mode", None, 0, 0o7777)
        target = os.path.realpath(path) if os.path.islink(path) else path
        parent = os.path.dirname(target) or "/"
        if not os.path.isdir(parent):
            if args.get("createParents"):
                try:
                    os.makedirs(parent, exist_ok=True)
                except OSError as err:
                    raise os_error(err, parent, "create directory")
            else:
                raise AgentError(
                    "FILE_PARENT_MISSING", "cannot write %s: directory %s does not exist; create it first" % (path, parent),
                    {"path": path, "parent": parent},
                )
        if os.path.isdir(target):
            raise AgentError("FILE_IS_DIRECTORY", "cannot write %s: it is a directory" % path, {"path": path})
        t = Transfer(secrets.token_hex(8), "write")
        t.path = path
        t.target = target
        t.size = size
        t.sha256 = digest.lower()
        t.mode = mode
        t.written = 0
        t.hasher = hashlib.sha256()
        t.tmp = os.path.join(parent, ".%s.pi-sandbox-%s.part" % (os.path.basename(target), t.token))
        try:
            t.file = open(t.tmp, "wb")
        except OSError as err:
            raise os_error(err, path, "write")
        inline = args.get("data")
        if inline is not None:
            try:
                self._append(t, inline, 0)
                return self._commit(t)
            except BaseException:
                discard_partial(t)
                raise
        self._put(t)
        return {"token": t.token, "chunkBytes": CHUNK_BYTES}

    def _append(self, t: Transfer, data_b64, offset) -> None:
        if offset != t.written:
            raise AgentError("INVALID_ARGUMENT", "chunk offset %s does not follow %d bytes written" % (offset, t.written))
        if not isinstance(data_b64, str):
            raise AgentError("INVALID_ARGUMENT", "data must be base64 text")
        try:
            data = base64.b64decode(data_b64.encode("ascii"), validate=True)
        except (ValueError, UnicodeEncodeError):
            raise AgentError("INVALID_ARGUMENT", "data is not valid base64")
        if t.written + len(data) > t.size:
            raise AgentError("INVALID_ARGUMENT", "more data than the declared %d bytes" % t.size)
        try:
            t.file.write(data)
        except OSError as err:
            raise os_error(err, t.path, "write")
        t.hasher.update(data)
        t.written += len(data)

    def write_chunk(self, args: dict) -> dict:
        t = self._take(args.get("token"), "write")
        with t.lock:
            try:
                self._append(t, args.get("data"), args.get("offset"))
            except AgentError:
                self._drop(t.token)
                discard_partial(t)
                raise
            return {"written": t.written}

    def write_commit(self, args: dict) -> dict:
        t = self._take(args.get("token"), "write")
        self._drop(t.token)
        with t.lock:
            try:
                return self._commit(t)
            except BaseException:
                discard_partial(t)
                raise

    def write_abort(self, args: dict) -> dict:
        token = args.get("token")
        with self._lock:
            t = self._items.pop(token, None) if isinstance(token, str) else None
        if t is not None:
            discard_partial(t)
        return {}

    def _commit(self, t: Transfer) -> dict:
        if t.written != t.size:
            raise AgentError("FILE_CHECKSUM_MISMATCH", "received %d of %d bytes for %s" % (t.written, t.size, t.path), {"path": t.path})
        actual = t.hasher.hexdigest()
        if actual != t.sha256:
            raise AgentError(
                "FILE_CHECKSUM_MISMATCH", "sha256 of the received data for %s does not match; nothing was written" % t.path,
                {"path": t.path, "expected": t.sha256, "actual": actual},
            )
        try:
            t.file.flush()
            os.fsync(t.file.fileno())
            t.file.close()
            try:
                old = os.stat(t.target)
            except FileNotFoundError:
                old = None
            mode = t.mode if t.mode is not None else (old.st_mode & 0o7777 if old else 0o644)
            os.chmod(t.tmp, mode)
            if old is not None:
                try:
                    os.chown(t.tmp, old.st_uid, old.st_gid)
                except OSError:
                    pass
            os.replace(t.tmp, t.target)
            fsync_dir(os.path.dirname(t.target) or "/")
        except OSError as err:
            raise os_error(err, t.path, "write")
        return {"path": t.path, "size": t.size, "sha256": actual}


def discard_partial(t: Transfer) -> None:
    try:
        t.file.close()
    except (OSError, AttributeError):
        pass
    try:
        os.unlink(t.tmp)
    except (OSError, AttributeError):
        pass


# ---------------------------------------------------------------------------------------------
# the agent


class Agent:
    def __init__(self, opts, wire: Wire):
        self.wire = wire
        self.workspace = os.path.abspath(opts.workspace)
        self.shell = opts.shell
        self.state = StateDir(opts.state_dir)
        self.state.reset()
        # A fresh disk has no workspace yet; commands, services and hooks all run in it.
        try:
            os.makedirs(self.workspace, exist_ok=True)
        except OSError:
            pass
        low, high = opts.port_range
        self.ports = PortBook(self.state.ports_file, low, high)
        self.jobs = Jobs(self.state)
        # What commands, services and runs start from: the agent's environment without a run marker.
        self.base_env = {k: v for k, v in os.environ.items() if k != RUN_MARKER_ENV}
        self.warm = WarmShells(self, opts.warm_shell)
        self._workers = WorkerPool(self._handle)
        self.services = Services(self)
        self.transfers = Transfers()
        self.cleanup = Cleanup(opts.cgroup_root)
        self._in_flight = threading.BoundedSemaphore(MAX_IN_FLIGHT)
        self._run_lock = threading.Lock()
        self._shutdown = threading.Event()
        threading.Thread(target=self.jobs.watch_output, args=(self._shutdown,), name="output-bound", daemon=True).start()
        self.handlers = {
            "ping": self.op_ping,
            "exec": self.op_exec,
            "exec-status": self.op_exec_status,
            "exec-kill": self.op_exec_kill,
            "file-read-open": self.transfers.read_open,
            "file-read-chunk": self.transfers.read_chunk,
            "file-read-close": self.transfers.read_close,
            "file-write-open": self.transfers.write_open,
            "file-write-chunk": self.transfers.write_chunk,
            "file-write-commit": self.transfers.write_commit,
            "file-write-abort": self.transfers.write_abort,
            "service-ensure": self.op_service_ensure,
            "service-restart": self.op_service_restart,
            "service-stop": self.op_service_stop,
            "service-status": self.op_service_status,
            "service-start": self.op_service_start,
            "logs": self.op_logs,
            "run-setup": self.op_run_setup,
            "run-resume": self.op_run_resume,
            "run-cancel": self.op_run_cancel,
        }

    # -- helpers shared by services and jobs

    def login_shell(self, command: str) -> list:
        return [self.shell, "-lc", command]

    def resolve_cwd(self, cwd) -> str:
        if not cwd:
            return self.workspace
        return os.path.normpath(os.path.join(self.workspace, cwd))

    def hello(self) -> dict:
        return {
            "protocol": PROTOCOL_VERSION,
            "version": AGENT_VERSION,
            "pid": os.getpid(),
            "python": "%d.%d.%d" % sys.version_info[:3],
            "stateDir": self.state.root,
            "workspace": self.workspace,
            "shell": self.shell,
            "cleanup": self.cleanup.method,
            "warmShell": self.warm.enabled,
        }

    # -- dispatch

    def serve(self, inp) -> None:
        self.wire.event("hello", self.hello())
        self.warm.refill(self.workspace)
        while not self._shutdown.is_set():
            line = inp.readline(MAX_LINE_BYTES + 1)
            if not line:
                break
            if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
                # Skip the rest of an oversized line; its request id is unknown.
                while line and not line.endswith(b"\n"):
                    line = inp.readline(MAX_LINE_BYTES)
                self.wire.event("protocol-error", {"message": "request line longer than %d bytes dropped" % MAX_LINE_BYTES})
                continue
            line = line.strip()
            if not line:
                continue
            try:
                req = json.loads(line.decode("utf-8"))
            except (ValueError, UnicodeDecodeError):
                self.wire.event("protocol-error", {"message": "request is not JSON"})
                continue
            if not isinstance(req, dict) or "id" not in req:
                self.wire.event("protocol-error", {"message": "request has no id"})
                continue
            if req.get("op") == "shutdown":
                self.wire.send({"id": req["id"], "ok": True, "result": {}})
                break
            if not self._in_flight.acquire(blocking=False):
                self._reply_error(req["id"], AgentError("AGENT_BUSY", "more than %d requests in flight" % MAX_IN_FLIGHT))
                continue
            self._workers.submit(req)
        self.shutdown()

    def _reply_error(self, req_id, err: AgentError) -> None:
        self.wire.send({"id": req_id, "ok": False, "error": {"code": err.code, "message": err.message, "details": err.details}})

    def _handle(self, req: dict) -> None:
        req_id = req["id"]
        try:
            handler = self.handlers.get(req.get("op"))
            if handler is None:
                raise AgentError("UNKNOWN_OP", "unknown operation %r" % (req.get("op"),))
            args = req.get("args") or {}
            if not isinstance(args, dict):
                raise AgentError("INVALID_ARGUMENT", "args must be an object")
            result = handler(args)
            self.wire.send({"id": req_id, "ok": True, "result": result})
        except AgentError as err:
            self._reply_error(req_id, err)
        except Exception as err:  # a bug in one request must not kill the channel
            sys.stderr.write(traceback.format_exc())
            sys.stderr.flush()
            self._reply_error(req_id, AgentError("AGENT_INTERNAL", "agent error: %s" % err))
        finally:
            self._in_flight.release()

    def shutdown(self) -> None:
        if self._shutdown.is_set():
            return
        self._shutdown.set()
        self.warm.stop()
        for job in self.jobs.running():
            threading.Thread(target=job.kill, daemon=True).start()
        self.services.shutdown()
        for job in self.jobs.running():
            job.kill()
        self.cleanup.close()

    # -- ops

    def op_ping(self, args: dict) -> dict:
        return self.hello()

    def _spawn_job(self, job: Job, argv: list, cwd: str, env: dict) -> None:
        with open(job.out_path, "ab") as out:
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        job.proc = proc
        job.pid = proc.pid

    def _check_cwd(self, cwd) -> str:
        if cwd is not None and not isinstance(cwd, str):
            raise AgentError("INVALID_ARGUMENT", "cwd must be a string")
        path = self.resolve_cwd(cwd)
        if not os.path.isdir(path):
            raise AgentError("CWD_NOT_FOUND", "working directory %s does not exist in the guest" % path, {"cwd": path})
        return path

    def op_exec(self, args: dict) -> dict:
        command = check_str(args, "command")
        cwd = self._check_cwd(args.get("cwd"))
        timeout_ms = check_int(args, "timeoutMs", DEFAULT_WAIT_MS, 0, MAX_WAIT_MS)
        extra_env = check_env(args.get("env"))
        job = None if extra_env else self._exec_warm(command, cwd)
        if job is None:
            env = dict(self.base_env)
            env.update(extra_env)
            handle = self.jobs.new_handle()
            job = Job(handle, "exec", os.path.join(self.state.exec_dir, handle + ".out"))
            try:
                self._spawn_job(job, self.login_shell(command), cwd, env)
            except OSError as err:
                raise AgentError("EXEC_FAILED", "could not start the command: %s" % err)
        self.jobs.add(job)
        try:
            self._await(job, timeout_ms / 1000.0)
            return job.collect()
        finally:
            self.warm.refill(cwd)

    def _exec_warm(self, command: str, cwd: str):
        """Gives the command to the warm shell; None when there is none to use."""
        shell = self.warm.take(cwd)
        if shell is None:
            return None
        try:
            data = os.fsencode(command)
        except UnicodeError:
            data = None  # the cold path reports it the way it always did
        if data is None or b"\0" in data or not shell.send(data):
            self.warm.retire(shell)
            return None
        job = Job(shell.handle, "exec", shell.out_path)
        job.proc = shell.proc
        job.pid = shell.proc.pid
        return job

    def _await(self, job: Job, timeout_s: float) -> None:
        """Waits up to timeout_s for an exec; whatever still runs then is reaped by a thread."""
        exited = wait_exit(job.proc.pid, timeout_s)
        if exited:
            self._reap(job)
            return
        threading.Thread(target=self._reap, args=(job,), name="reap-" + job.handle, daemon=True).start()
        if exited is None:
            job.done.wait(timeout_s)

    def _reap(self, job: Job) -> None:
        rc = job.proc.wait()
        job.finish(exit_info(rc))
        self.jobs.completed()

    def op_exec_status(self, args: dict) -> dict:
        job = self.jobs.get(args.get("handle"))
        timeout_ms = check_int(args, "timeoutMs", DEFAULT_WAIT_MS, 0, MAX_WAIT_MS)
        job.done.wait(timeout_ms / 1000.0)
        return job.collect(tail_only=job.kind == "setup")

    def op_exec_kill(self, args: dict) -> dict:
        job = self.jobs.get(args.get("handle"))
        was_running = not job.done.is_set()
        job.kill()
        job.done.wait(KILL_GRACE_S + 5.0)
        result = job.status()
        result["killed"] = was_running
        return result

    # services

    def _specs(self, args: dict) -> list:
        specs = args.get("services")
        if not isinstance(specs, list):
            raise AgentError("INVALID_ARGUMENT", "services must be a list of service specs")
        return specs

    def _names(self, args: dict):
        names = args.get("names")
        if names is None:
            return None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise AgentError("INVALID_ARGUMENT", "names must be a list of service names")
        return names

    def op_service_ensure(self, args: dict) -> dict:
        return self.services.ensure(self._specs(args), wait=args.get("wait", True) is not False)

    def op_service_restart(self, args: dict) -> dict:
        return self.services.restart(self._specs(args))

    def op_service_stop(self, args: dict) -> dict:
        return self.services.stop(self._names(args))

    def op_service_status(self, args: dict) -> dict:
        return self.services.status(self._names(args))

    def op_service_start(self, args: dict) -> dict:
        spec = args.get("service")
        if not isinstance(spec, dict):
            raise AgentError("INVALID_ARGUMENT", "service must be a service spec")
        return self.services.start_adhoc(spec)

    def op_logs(self, args: dict) -> dict:
        name = check_str(args, "service")
        lines = check_int(args, "lines", DEFAULT_LOG_LINES, 1, MAX_LOG_LINES)
        if not self.services.known(name):
            raise AgentError("SERVICE_NOT_FOUND", "no service named %s has run in this guest" % name, {"service": name})
        path = self.services.log_path(name)
        text, omitted, count = tail_log(path, lines)
        return {"service": name, "text": text, "lines": count, "truncatedBytes": omitted, "logPath": path}

    # setup / resume

    def _run_steps(self, args: dict, kind: str, hook_default: str) -> tuple:
        commands = args.get("commands") or []
        if not isinstance(commands, list) or not all(isinstance(c, str) and c for c in commands):
            raise AgentError("INVALID_ARGUMENT", "commands must be a list of non-empty strings")
        hook = args.get("hook", hook_default)
        if hook is not None and not isinstance(hook, str):
            raise AgentError("INVALID_ARGUMENT", "hook must be a path")
        cwd = self._check_cwd(None)
        steps = [{"label": c, "argv": self.login_shell(c)} for c in commands]
        notes = []
        if hook:
            hook_path = os.path.join(self.workspace, hook)
            if os.path.isfile(hook_path):
                if os.access(hook_path, os.X_OK):
                    steps.append({"label": hook, "argv": self.login_shell("exec " + shlex.quote(hook_path))})
                else:
                    notes.append("%s exists but is not executable; skipped (chmod +x it to run it)" % hook)
        return steps, notes, cwd

    def _start_run(self, kind: str, steps: list, notes: list, cwd: str, deadline_ms, cleanup: bool) -> Job:
        handle = self.jobs.new_handle()
        out = os.path.join(self.state.runs_dir, "%s-%s.log" % (kind, handle))
        job = Job(handle, kind, out, keep_file=kind == "setup")
        token = secrets.token_hex(12)
        scope = self.cleanup.new_scope(token) if cleanup else None
        env = dict(os.environ)
        env[RUN_MARKER_ENV] = token
        job.extra["steps"] = []
        job.extra["logPath"] = out
        open(out, "ab").close()

        def note(text: str) -> None:
            # Step processes append to the same file through their own descriptors.
            with open(out, "ab") as f:
                f.write(("[pi-sandbox %s] %s\n" % (now_iso(), text)).encode("utf-8", "replace"))

        def runner() -> None:
            deadline = None if deadline_ms is None else mono() + deadline_ms / 1000.0
            final = {"exitCode": 0}
            timed_out = False
            try:
                for text in notes:
                    note(text)
                for i, step in enumerate(steps):
                    if deadline is not None and deadline - mono() <= 0:
                        timed_out = True
                        break
                    note("%s step %d/%d: %s" % (kind, i + 1, len(steps), step["label"]))
                    started = mono()
                    record = {"command": step["label"]}
                    try:
                        with job.lock:
                            if job.cancelled:
                                final = {"exitCode": 143, "signal": "SIGTERM"}
                                break
                            self._spawn_job(job, self.cleanup.wrap(scope, step["argv"]), cwd, env)
                    except OSError as err:
                        record.update({"exitCode": 127, "error": str(err)})
                        job.extra["steps"].append(record)
                        final = {"exitCode": 127}
                        break
                    try:
                        timeout = None if deadline is None else max(0.0, deadline - mono())
                        rc = wait_child(job.proc, timeout)
                    except subprocess.TimeoutExpired:
                        timed_out = True
                        stop_group(job.proc.pid, KILL_GRACE_S)
                        rc = job.proc.wait()
                    info = exit_info(rc)
                    record.update(info)
                    record["durationMs"] = int((mono() - started) * 1000)
                    job.extra["steps"].append(record)
                    final = info
                    if timed_out or rc != 0:
                        break
                if timed_out:
                    note("%s deadline of %d ms passed; stopped" % (kind, deadline_ms))
                    final = {"exitCode": 124}
            finally:
                if cleanup:
                    result = self.cleanup.stop_all(token, scope)
                    job.extra["cleanup"] = result
                    note("stopped %d leftover process(es) (%s)" % (result["stopped"], result["method"]))
                job.extra["timedOut"] = timed_out
                job.extra["ok"] = final.get("exitCode") == 0 and not timed_out
                job.finish(final)
                self.jobs.completed()

        self.jobs.add(job)
        threading.Thread(target=runner, name="run-" + kind, daemon=True).start()
        return job

    def op_run_setup(self, args: dict) -> dict:
        deadline_ms = check_int(args, "deadlineMs", SETUP_DEADLINE_MS, 1, SETUP_DEADLINE_MS)
        steps, notes, cwd = self._run_steps(args, "setup", ".agents/setup")
        if not self._run_lock.acquire(blocking=False):
            raise AgentError("RUN_IN_PROGRESS", "a setup run is already in progress; wait for it or cancel it")
        try:
            job = self._start_run("setup", steps, notes, cwd, deadline_ms, cleanup=True)
            job.done.wait()
        finally:
            self._run_lock.release()
        return job.collect(tail_only=True)

    def op_run_resume(self, args: dict) -> dict:
        wait_ms = check_int(args, "waitMs", RESUME_WAIT_MS, 0, MAX_WAIT_MS)
        steps, notes, cwd = self._run_steps(args, "resume", ".agents/resume")
        job = self._start_run("resume", steps, notes, cwd, None, cleanup=False)
        job.done.wait(wait_ms / 1000.0)
        return job.collect()

    def op_run_cancel(self, args: dict) -> dict:
        kind = args.get("kind")
        if kind not in ("setup", "resume"):
            raise AgentError("INVALID_ARGUMENT", "kind must be setup or resume")
        jobs = [j for j in self.jobs.running() if j.kind == kind]
        for job in jobs:
            job.kill()
        return {"cancelled": [j.handle for j in jobs]}


def parse_port_range(text: str) -> tuple:
    try:
        low, high = (int(x) for x in text.split("-", 1))
    except ValueError:
        raise argparse.ArgumentTypeError("port range must look like 20000-29999")
    if not (1 <= low <= high <= 65535):
        raise argparse.ArgumentTypeError("port range must be within 1-65535")
    return low, high


def default_shell() -> str:
    for candidate in ("/bin/bash", "/bin/sh"):
        if os.access(candidate, os.X_OK):
            return candidate
    return "/bin/sh"


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(description="pi-sandbox guest agent (line-delimited JSON on stdin/stdout)")
    parser.add_argument("--state-dir", default=os.environ.get("PI_SANDBOX_AGENT_STATE_DIR", "/var/lib/pi-sandbox-agent"))
    parser.add_argument("--workspace", default=os.environ.get("PI_SANDBOX_AGENT_WORKSPACE", "/workspace"))
    parser.add_argument("--shell", default=os.environ.get("PI_SANDBOX_AGENT_SHELL") or default_shell())
    parser.add_argument("--cgroup-root", default=os.environ.get("PI_SANDBOX_AGENT_CGROUP_ROOT", "/sys/fs/cgroup"),
                        help='cgroup v2 mount used to catch setup leftovers, or "none"')
    parser.add_argument("--warm-shell", choices=("on", "off"), default=os.environ.get("PI_SANDBOX_AGENT_WARM_SHELL") or "on",
                        help="keep a login bash started ahead of the next exec (see WARM_BOOTSTRAP)")
    parser.add_argument("--port-range", type=parse_port_range,
                        default=parse_port_range(os.environ.get("PI_SANDBOX_AGENT_PORT_RANGE", "20000-29999")))
    opts = parser.parse_args(argv)
    opts.warm_shell = opts.warm_shell == "on"
    if opts.cgroup_root == "none":
        opts.cgroup_root = None
    elif opts.cgroup_root == "/sys/fs/cgroup":
        maybe_mount_cgroup2(opts.cgroup_root)

    # Keep the protocol streams to ourselves: children must never inherit the channel, and a stray
    # print must not corrupt it, so fd 0 becomes /dev/null and fd 1 points at stderr.
    inp = os.fdopen(os.dup(0), "rb")
    out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull, "r")
    sys.stdout = sys.stderr

    wire = Wire(out)
    try:
        agent = Agent(opts, wire)
    except OSError as err:
        wire.event("fatal", {"code": "AGENT_STATE_DIR", "message": "cannot prepare %s: %s" % (opts.state_dir, err)})
        return 2

    def on_term(_signum, _frame):
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, on_term)
    try:
        agent.serve(inp)
    except SystemExit:
        agent.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
