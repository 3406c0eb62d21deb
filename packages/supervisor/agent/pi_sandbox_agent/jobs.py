"""Jobs: exec commands and setup/resume runs, addressed by opaque handles.

A job's output goes to a file the host reads in capped slices; the registry keeps the newest
completed jobs and remembers which handles expired.
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
from typing import Any

from .fsutil import punch_hole
from .output import read_span_capped
from .procs import ExitInfo, mono, now_iso, stop_group
from .protocol import AgentError, JsonDict

KILL_GRACE_S = 2.0
EXPIRED_IDS_REMEMBERED = 4096
# Unread output kept on disk per running job, checked every OUTPUT_CHECK_S.
MAX_OUTPUT_FILE_BYTES = 16 * 1024 * 1024
OUTPUT_CHECK_S = 2.0


class Stream:
    """A second output file (stderr kept apart): read in capped slices, bounded like the first."""

    def __init__(self, path: str):
        self.path = path
        self.read_offset = 0
        self.dropped = 0

    def collect(self, cap: int, tail_only: bool) -> tuple[str, int]:
        text, omitted = "", 0
        try:
            size = os.path.getsize(self.path)
            text, omitted = read_span_capped(self.path, self.read_offset, size, cap, "stderr", tail_only)
            self.read_offset = size
        except OSError:
            pass
        if self.dropped:
            text = "[... pi-sandbox: %d bytes of stderr were dropped unread ...]\n" % self.dropped + text
            omitted += self.dropped
            self.dropped = 0
        return text, omitted

    def bound(self, limit: int) -> None:
        try:
            size = os.path.getsize(self.path)
            if size - self.read_offset <= limit:
                return
            if punch_hole(self.path, self.read_offset, size - self.read_offset):
                self.dropped += size - self.read_offset
                self.read_offset = size
                return
            os.truncate(self.path, 0)
        except OSError:
            return
        self.dropped += size - self.read_offset
        self.read_offset = 0


class Job:
    """A command (or sequence of commands) whose output goes to a file the host reads in slices."""

    def __init__(self, handle: str, kind: str, out_path: str, keep_file: bool = False, err_path: str | None = None):
        self.handle = handle
        self.kind = kind
        self.out_path = out_path
        # With err_path, stderr goes to its own file and every collect returns it as `stderr`.
        self.err = Stream(err_path) if err_path is not None else None
        self.keep_file = keep_file
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.started = mono()
        self.started_at = now_iso()
        self.completed: float | None = None
        self.exit: ExitInfo | None = None
        self.read_offset = 0
        self.freed = False
        self.pid: int | None = None
        self.proc: subprocess.Popen[bytes] | None = None
        self.cancelled = False
        self.dropped = 0
        self.extra: JsonDict = {}
        self.extra_out: tuple[str, int] = ("", 0)

    def spawn(self, argv: list[str], cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """Starts argv in its own session with stdout (and stderr, unless it has a file of its own)
        appended to the output file."""
        with open(self.out_path, "ab") as out, open(self.err.path if self.err else os.devnull, "ab") as err:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err if self.err else subprocess.STDOUT,
                start_new_session=True,
            )
        self.proc = proc
        self.pid = proc.pid
        return proc

    def finish(self, info: ExitInfo) -> None:
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

    def collect(self, cap: int, tail_only: bool = False) -> JsonDict:
        """New output since the last call (capped), plus the status. Frees files of a finished job."""
        with self.lock:
            # Check `done` before reading: once the command has exited, what we read is all of it.
            finished = self.done.is_set()
            output, omitted = "", 0
            if not self.freed:
                try:
                    size = os.path.getsize(self.out_path)
                    output, omitted = read_span_capped(self.out_path, self.read_offset, size, cap, "output", tail_only)
                    self.read_offset = size
                except OSError:
                    pass
                if self.dropped:
                    output = (
                        "[... pi-sandbox: %d bytes of output were dropped unread "
                        "(the output file is capped at %d MiB) ...]\n"
                        % (self.dropped, MAX_OUTPUT_FILE_BYTES // (1024 * 1024))
                    ) + output
                    omitted += self.dropped
                    self.dropped = 0
                if self.err is not None:
                    self.extra_out = self.err.collect(cap, tail_only)
                if finished:
                    self.freed = True
                    if not self.keep_file:
                        self.unlink_files()
            result = self.status(output, omitted)
            if self.err is not None:
                result["stderr"], result["stderrTruncatedBytes"] = self.extra_out
            return result

    def unlink_files(self) -> None:
        for path in (self.out_path, self.err.path if self.err else None):
            if path is None:
                continue
            try:
                os.unlink(path)
            except OSError:
                pass

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
            if self.err is not None:
                self.err.bound(limit)
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

    def status(self, output: str | None = None, omitted: int = 0) -> JsonDict:
        result: JsonDict = {
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
    """Handle registry. Keeps at most `keep_completed` finished jobs, oldest expire first."""

    def __init__(self, keep_completed: int):
        self.keep_completed = keep_completed
        self._lock = threading.Lock()
        self._jobs: collections.OrderedDict[str, Job] = collections.OrderedDict()
        self._expired: collections.OrderedDict[str, bool] = collections.OrderedDict()
        # Set by add(): wakes the output watcher, which sleeps while no job runs.
        self._added = threading.Event()

    def new_handle(self) -> str:
        return "x" + os.urandom(8).hex()

    def add(self, job: Job) -> None:
        with self._lock:
            self._jobs[job.handle] = job
            self._expire_locked()
        self._added.set()

    def completed(self) -> None:
        with self._lock:
            self._expire_locked()

    def _expire_locked(self) -> None:
        done = [j for j in self._jobs.values() if j.done.is_set()]
        if len(done) <= self.keep_completed:
            return
        done.sort(key=lambda j: j.completed or 0)
        for job in done[: len(done) - self.keep_completed]:
            del self._jobs[job.handle]
            if not job.keep_file:
                job.unlink_files()
            self._expired[job.handle] = True
            while len(self._expired) > EXPIRED_IDS_REMEMBERED:
                self._expired.popitem(last=False)

    def get(self, handle: Any) -> Job:
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
                    % (handle, self.keep_completed),
                    {"handle": handle},
                )
        raise AgentError(
            "EXEC_HANDLE_NOT_FOUND",
            "no command with handle %s in this session (handles do not survive a restart of the instance)" % handle,
            {"handle": handle},
        )

    def running(self) -> list[Job]:
        with self._lock:
            return [j for j in self._jobs.values() if not j.done.is_set()]

    def activity(self) -> JsonDict:
        """For a host that suspends an idle guest: how many jobs run now, and the ms since a job
        last started or ended (absent before the first job)."""
        with self._lock:
            jobs = list(self._jobs.values())
        running = sum(1 for j in jobs if not j.done.is_set())
        last = max((j.completed or j.started for j in jobs), default=None)
        result: JsonDict = {"runningJobs": running}
        if last is not None:
            result["jobsIdleMs"] = max(0, int((mono() - last) * 1000))
        return result

    def watch_output(self, stop: threading.Event, limit: int = MAX_OUTPUT_FILE_BYTES) -> None:
        """Bounds output files of running jobs (a forgotten `yes` must not fill the guest disk).
        With none running it sleeps until one is added: a guest with nothing to do is not woken
        every OUTPUT_CHECK_S (on a host that bills idle guests by their CPU, each wakeup counts)."""
        while not stop.wait(OUTPUT_CHECK_S):
            running = self.running()
            for job in running:
                job.bound_file(limit)
            if not running:
                self._added.wait()
                self._added.clear()
