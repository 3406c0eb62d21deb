"""Processes: clocks, exit statuses, process-group signals and waits without sleep loops."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import time
from typing import Union

ExitInfo = dict[str, Union[int, str]]


def mono() -> float:
    return time.monotonic()


def now_iso() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".%03dZ" % int((t % 1) * 1000)


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return "SIG%d" % num


def exit_info(returncode: int) -> ExitInfo:
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


def wait_exit(pid: int, timeout_s: float) -> bool | None:
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


def wait_child(proc: subprocess.Popen[bytes], timeout_s: float | None) -> int:
    """proc.wait(timeout) without Popen's sleep-and-poll loop where a pidfd can be had."""
    if timeout_s is not None and proc.returncode is None:
        exited = wait_exit(proc.pid, timeout_s)
        if exited is None:
            return proc.wait(timeout=timeout_s)
        if not exited:
            raise subprocess.TimeoutExpired(proc.args, timeout_s)
    return proc.wait()
