"""The agent's guest state directory and the sticky port of each service."""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import stat
import threading

from .fsutil import atomic_write_json
from .protocol import AgentError

PORTS_FILE = "ports.json"


# Logs kept across agent starts: service logs of the most recently written service names, and the
# newest setup logs (each already bounded while it is written).
LOG_NAMES_KEPT = 64
SETUP_LOGS_KEPT = 3
SERVICE_LOG = re.compile(r"^([a-z0-9][a-z0-9-]{0,31})\.log(\.1)?$")
SETUP_LOG = re.compile(r"^(setup-x[0-9a-f]{16})\.log$")


class StateDir:
    """The agent's guest directory.

    Cleared at start except the sticky port allocations and the logs: service logs go on in their
    rotated files (<name>.log, <name>.log.1) and the newest setup logs stay where the host was told
    they are.
    """

    KEEP = (PORTS_FILE,)

    def __init__(self, root: str):
        self.root = os.path.abspath(root)
        self.exec_dir = os.path.join(self.root, "exec")
        self.logs_dir = os.path.join(self.root, "logs")
        self.runs_dir = os.path.join(self.root, "runs")
        self.ports_file = os.path.join(self.root, PORTS_FILE)

    def reset(self) -> None:
        # Pids and command files of an earlier boot are never trusted: the processes are gone
        # (or, worse, the pids now name unrelated processes), so everything but ports and logs goes.
        os.makedirs(self.root, mode=0o700, exist_ok=True)
        kept = {"logs": (SERVICE_LOG, LOG_NAMES_KEPT), "runs": (SETUP_LOG, SETUP_LOGS_KEPT)}
        for entry in os.listdir(self.root):
            if entry in self.KEEP:
                continue
            path = os.path.join(self.root, entry)
            if entry in kept and _is_real_dir(path):
                _prune(path, *kept[entry])
            else:
                _remove(path)
        for d in (self.exec_dir, self.logs_dir, self.runs_dir):
            os.makedirs(d, mode=0o700, exist_ok=True)
        with open(os.path.join(self.root, "agent.pid"), "w") as f:
            f.write("%d\n" % os.getpid())


def _is_real_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _remove(path: str) -> None:
    if _is_real_dir(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _prune(directory: str, pattern: re.Pattern[str], keep: int) -> None:
    """Keeps regular files matching `pattern`, of the `keep` groups (its first group) written last."""
    newest: dict[str, float] = {}
    files: dict[str, list[str]] = {}
    for entry in os.listdir(directory):
        path = os.path.join(directory, entry)
        match = pattern.match(entry)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if match is None or not stat.S_ISREG(info.st_mode):
            _remove(path)
            continue
        group = match.group(1)
        files.setdefault(group, []).append(path)
        newest[group] = max(newest.get(group, 0.0), info.st_mtime)
    for group in sorted(newest, key=lambda g: newest[g], reverse=True)[keep:]:
        for path in files[group]:
            _remove(path)


class PortBook:
    """Sticky guest port per service name, persisted across restarts and reboots."""

    def __init__(self, path: str, low: int, high: int):
        self.path = path
        self.low = low
        self.high = high
        self._lock = threading.Lock()
        self._ports: dict[str, int] = {}
        try:
            with open(path, encoding="utf-8") as f:
                raw = json.load(f)
            ports = raw.get("ports", {}) if isinstance(raw, dict) else {}
            if isinstance(ports, dict):
                self._ports = {k: v for k, v in ports.items() if isinstance(k, str) and isinstance(v, int)}
        except (OSError, ValueError):
            self._ports = {}

    def get(self, name: str) -> int | None:
        with self._lock:
            return self._ports.get(name)

    def assign(self, name: str, reserved: set[int]) -> int:
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
        raise AgentError(
            "PORT_EXHAUSTED", "no free guest port left in %d-%d for service %s" % (self.low, self.high, name)
        )


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
