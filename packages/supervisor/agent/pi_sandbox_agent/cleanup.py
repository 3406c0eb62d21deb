"""Stopping what a run left behind: cgroup v2 when we can, else an environment marker sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from .procs import mono
from .protocol import JsonDict

# Every process of a setup/resume run inherits this variable with the run's token, so a sweep of
# /proc/*/environ finds even detached, double-forked leftovers.
RUN_MARKER_ENV = "PI_SANDBOX_RUN"


class Cleanup:
    """Finds and stops every process a run left behind, including detached, double-forked ones."""

    def __init__(self, cgroup_root: str | None):
        self.cgroup_base: str | None = None
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

    def new_scope(self, token: str) -> str | None:
        if not self.cgroup_base:
            return None
        path = os.path.join(self.cgroup_base, "run-" + token)
        try:
            os.mkdir(path)
            return path
        except OSError:
            return None

    def wrap(self, scope: str | None, argv: list[str]) -> list[str]:
        """Prefixes argv so the process moves itself into the scope before running anything."""
        if not scope:
            return argv
        script = 'echo $$ > "$0/cgroup.procs" 2>/dev/null; exec "$@"'
        return ["/bin/sh", "-c", script, scope, *argv]

    def stop_all(self, token: str, scope: str | None) -> JsonDict:
        killed: set[int] = set()
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

    def _cgroup_pids(self, scope: str) -> list[int]:
        try:
            with open(os.path.join(scope, "cgroup.procs")) as f:
                return [int(x) for x in f.read().split()]
        except (OSError, ValueError):
            return []

    def _stop_cgroup(self, scope: str) -> set[int]:
        seen: set[int] = set()
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

    def _marked_pids(self, needle: bytes) -> list[int]:
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

    def _sweep_environ(self, token: str) -> set[int]:
        needle = ("%s=%s" % (RUN_MARKER_ENV, token)).encode()
        seen: set[int] = set()
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
        with open("/proc/filesystems") as f:
            if "cgroup2" not in f.read():
                return
        subprocess.run(
            ["mount", "-t", "cgroup2", "cgroup2", root],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        pass
