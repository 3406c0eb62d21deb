"""The warm shell: one login bash started ahead of the next exec, blocked until given a command."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
from typing import IO

from .context import Context
from .jobs import Jobs
from .procs import kill_group, mono

# The script a warm shell runs: everything before the first `read` happens ahead of time (exec of
# bash, dynamic linking, shell start-up); then it blocks until the agent writes
# "<bytes> <apart>\n<command>\0" on its stdin. Its stderr is a file of its own; unless <apart> is
# 1 (the exec keeps stderr apart) it first joins stderr to stdout, as a cold start's Popen does.
# Only then does it read the login files, in bash's own order
# (/etc/profile, then the first of ~/.bash_profile, ~/.bash_login, ~/.profile), and run the command
# with stdin on /dev/null (opened read-write, like the DEVNULL of a cold start). The login files
# are read after the command is known, exactly as `bash -lc` would, so edits to them always count.
# `read -N` under LC_ALL=C takes exactly that many bytes with buffered reads; `read -d ""` (bash
# before 4.1) reads a byte per system call. A short read means the agent died mid-write: exit
# without running anything. BASH_EXECUTION_STRING holds the command, as it does in `bash -c`; the
# eval stays on line 1 so $LINENO counts from 1.
WARM_BOOTSTRAP = (
    "read -r __pi_sandbox_n __pi_sandbox_s || exit 0; "
    "if ((BASH_VERSINFO[0] * 100 + BASH_VERSINFO[1] >= 401)); "
    'then LC_ALL=C IFS= read -r -N "$__pi_sandbox_n" BASH_EXECUTION_STRING || exit 0; '
    'else IFS= read -r -d "" BASH_EXECUTION_STRING || exit 0; fi; '
    '[ "$__pi_sandbox_s" = 1 ] || exec 2>&1; '
    "unset -v __pi_sandbox_n __pi_sandbox_s; exec 0<>/dev/null; SECONDS=0; "
    "if [ -e /etc/profile ]; then . /etc/profile; fi; "
    "if [ -e ~/.bash_profile ]; then . ~/.bash_profile; elif [ -e ~/.bash_login ]; then . ~/.bash_login; "
    "elif [ -e ~/.profile ]; then . ~/.profile; fi; "
    'eval "$BASH_EXECUTION_STRING"'
)


# How long stop() waits for the thread (a spawn or a discard takes milliseconds).
STOP_WAIT_S = 5.0


class WarmShell:
    """A login bash started ahead of an exec, blocked until it is given its command."""

    def __init__(self, handle: str, out_path: str, proc: subprocess.Popen[bytes], cwd: str, host: str):
        self.handle = handle
        self.out_path = out_path
        self.err_path = err_path_of(out_path)
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

    def _stdin(self) -> IO[bytes]:
        assert self.proc.stdin is not None  # started with stdin=PIPE
        return self.proc.stdin

    def send(self, data: bytes, apart: bool = False) -> bool:
        """Hands over the command (with stderr kept `apart` in its own file, else joined to the
        output); False when the shell is gone (someone killed it while idle)."""
        try:
            self._stdin().write(b"%d %d\n" % (len(data), 1 if apart else 0) + data + b"\0")
            self._stdin().close()
            return True
        except OSError:
            return False

    def discard(self) -> None:
        if self.proc.poll() is None:  # unreaped, so its pid (and group id) cannot be reused yet
            kill_group(self.proc.pid, signal.SIGKILL)
        try:
            self._stdin().close()
        except OSError:
            pass
        self.proc.wait()
        for path in (self.out_path, self.err_path):
            try:
                os.unlink(path)
            except OSError:
                pass


class WarmShells:
    """Keeps one warm login shell ready for the next exec, in the cwd the last exec used.

    Only for bash (the bootstrap needs `read -N`) and only for execs without extra `env`: those
    variables must be in place before the login files run, so such an exec starts a shell of its
    own. A shell is replaced after each use, in the background once the exec has its answer.
    """

    def __init__(self, ctx: Context, jobs: Jobs, enabled: bool):
        self.ctx = ctx
        self.jobs = jobs
        self.enabled = enabled and usable(ctx.shell)
        self._cond = threading.Condition()
        self._ready: WarmShell | None = None
        self._want: str | None = None
        self._spawning: str | None = None  # cwd of a shell being started right now
        self._retired: list[WarmShell] = []
        self._stopped = False
        self._thread: threading.Thread | None = None
        if self.enabled:
            self._thread = threading.Thread(target=self._run, name="warm-shell", daemon=True)
            self._thread.start()

    def take(self, cwd: str) -> WarmShell | None:
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
        """Ends every warm shell and removes its files before returning. The thread may be starting
        or discarding one right now, and the agent exits soon after this returns (taking a daemon
        thread with it), so it is waited for; whatever it leaves is discarded here."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(STOP_WAIT_S)
        with self._cond:
            left = self._retired + ([self._ready] if self._ready is not None else [])
            self._retired, self._ready = [], None
        for shell in left:
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
            fresh = self._spawn(want)
            with self._cond:
                self._spawning = None
                keep = fresh is not None and not self._stopped and self._ready is None
                if keep:
                    self._ready = fresh
                self._cond.notify_all()
            if fresh is not None and not keep:
                fresh.discard()

    def _spawn_due_locked(self) -> bool:
        return self._want is not None and (self._ready is None or self._ready.cwd != self._want)

    def _spawn(self, cwd: str) -> WarmShell | None:
        handle = self.jobs.new_handle()
        out_path = os.path.join(self.ctx.state.exec_dir, handle + ".out")
        try:
            with open(out_path, "ab") as out, open(err_path_of(out_path), "ab") as err:
                proc = subprocess.Popen(
                    [self.ctx.shell, "--noprofile", "-l", "-c", WARM_BOOTSTRAP],
                    cwd=cwd,
                    env=self.ctx.base_env,
                    stdin=subprocess.PIPE,
                    stdout=out,
                    stderr=err,
                    start_new_session=True,
                )
        except OSError:
            # The exec that follows starts its own shell and reports whatever went wrong.
            for path in (out_path, err_path_of(out_path)):
                try:
                    os.unlink(path)
                except OSError:
                    pass
            return None
        return WarmShell(handle, out_path, proc, cwd, socket.gethostname())


def err_path_of(out_path: str) -> str:
    """The stderr file next to an output file (`<handle>.out` -> `<handle>.err`)."""
    return out_path[: -len(".out")] + ".err" if out_path.endswith(".out") else out_path + ".err"


def usable(shell: str) -> bool:
    """Whether `shell` can run the bootstrap (it needs bash)."""
    return os.path.basename(shell) == "bash"
