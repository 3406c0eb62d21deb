"""Setup and resume runs: commands, then the workspace's hook, one after another.

Setup runs under one deadline and ends by stopping every process it left behind; resume answers
after a short wait and goes on in the background behind a handle.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
from typing import Any

from .cleanup import RUN_MARKER_ENV, Cleanup
from .context import Context
from .jobs import KILL_GRACE_S, Job, Jobs
from .log_follow import log_since
from .procs import ExitInfo, exit_info, mono, now_iso, stop_group, wait_child
from .protocol import AgentError, JsonDict, need_int

Step = dict[str, Any]


class Runs:
    """run-setup, run-resume, run-cancel and run-follow. At most one setup runs at a time."""

    def __init__(self, ctx: Context, jobs: Jobs, cleanup: Cleanup):
        self.ctx = ctx
        self.jobs = jobs
        self.cleanup = cleanup
        self._setup_lock = threading.Lock()
        # The log of the latest setup run (kept after it ends, so a follower can read its end).
        self._setup_log: str | None = None

    def setup(self, args: JsonDict) -> JsonDict:
        limit = self.ctx.limits.setup_deadline_ms
        deadline_ms = need_int(args, "deadlineMs", limit, 1, limit)
        steps, notes, cwd = self._steps(args, ".agents/setup")
        if not self._setup_lock.acquire(blocking=False):
            raise AgentError("RUN_IN_PROGRESS", "a setup run is already in progress; wait for it or cancel it")
        self._setup_log = None
        try:
            job = self._start("setup", steps, notes, cwd, deadline_ms, cleanup=True)
            self._setup_log = job.extra["logPath"]
            job.done.wait()
        finally:
            self._setup_lock.release()
        return job.collect(self.ctx.limits.output_max_bytes, tail_only=True)

    def resume(self, args: JsonDict) -> JsonDict:
        limits = self.ctx.limits
        wait_ms = need_int(args, "waitMs", limits.resume_wait_ms, 0, limits.exec_wait_max_ms)
        steps, notes, cwd = self._steps(args, ".agents/resume")
        job = self._start("resume", steps, notes, cwd, None, cleanup=False)
        job.done.wait(wait_ms / 1000.0)
        return job.collect(limits.output_max_bytes)

    def follow(self, args: JsonDict) -> JsonDict:
        """run-follow: what the setup run wrote after `cursor` ("0:0", the default, is its start),
        with `running` telling whether it still runs. Nothing while no setup has started."""
        if args.get("kind") != "setup":
            raise AgentError("INVALID_ARGUMENT", "kind must be setup")
        cursor = args.get("cursor", "0:0")
        if not isinstance(cursor, str):
            raise AgentError("INVALID_ARGUMENT", "cursor must be a string", {"key": "cursor"})
        running = self._setup_lock.locked()
        path = self._setup_log
        if path is None:
            return {"kind": "setup", "running": running, "text": "", "cursor": cursor, "more": False}
        result = log_since(path, cursor, self.ctx.limits.output_max_bytes)
        del result["truncatedBytes"]
        return {"kind": "setup", "running": running, **result}

    def cancel(self, args: JsonDict) -> JsonDict:
        kind = args.get("kind")
        if kind not in ("setup", "resume"):
            raise AgentError("INVALID_ARGUMENT", "kind must be setup or resume")
        jobs = [j for j in self.jobs.running() if j.kind == kind]
        for job in jobs:
            job.kill()
        return {"cancelled": [j.handle for j in jobs]}

    def _steps(self, args: JsonDict, hook_default: str) -> tuple[list[Step], list[str], str]:
        commands = args.get("commands") or []
        if not isinstance(commands, list) or not all(isinstance(c, str) and c for c in commands):
            raise AgentError("INVALID_ARGUMENT", "commands must be a list of non-empty strings")
        hook = args.get("hook", hook_default)
        if hook is not None and not isinstance(hook, str):
            raise AgentError("INVALID_ARGUMENT", "hook must be a path")
        cwd = self.ctx.check_cwd(None)
        steps: list[Step] = [{"label": c, "argv": self.ctx.login_shell(c)} for c in commands]
        notes = []
        if hook:
            hook_path = os.path.join(self.ctx.workspace, hook)
            if os.path.isfile(hook_path):
                if os.access(hook_path, os.X_OK):
                    steps.append({"label": hook, "argv": self.ctx.login_shell("exec " + shlex.quote(hook_path))})
                else:
                    notes.append("%s exists but is not executable; skipped (chmod +x it to run it)" % hook)
        return steps, notes, cwd

    def _start(
        self, kind: str, steps: list[Step], notes: list[str], cwd: str, deadline_ms: int | None, cleanup: bool
    ) -> Job:
        handle = self.jobs.new_handle()
        out = os.path.join(self.ctx.state.runs_dir, "%s-%s.log" % (kind, handle))
        job = Job(handle, kind, out, keep_file=kind == "setup")
        token = os.urandom(12).hex()
        scope = self.cleanup.new_scope(token) if cleanup else None
        env = dict(os.environ)
        env[RUN_MARKER_ENV] = token
        records: list[JsonDict] = []
        job.extra["steps"] = records
        job.extra["logPath"] = out
        open(out, "ab").close()

        def note(text: str) -> None:
            # Step processes append to the same file through their own descriptors.
            with open(out, "ab") as f:
                f.write(("[pi-sandbox %s] %s\n" % (now_iso(), text)).encode("utf-8", "replace"))

        def runner() -> None:
            deadline = None if deadline_ms is None else mono() + deadline_ms / 1000.0
            final: ExitInfo = {"exitCode": 0}
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
                    record: JsonDict = {"command": step["label"]}
                    try:
                        with job.lock:
                            if job.cancelled:
                                final = {"exitCode": 143, "signal": "SIGTERM"}
                                break
                            proc = job.spawn(self.cleanup.wrap(scope, step["argv"]), cwd, env)
                    except OSError as err:
                        record.update({"exitCode": 127, "error": str(err)})
                        records.append(record)
                        final = {"exitCode": 127}
                        break
                    try:
                        timeout = None if deadline is None else max(0.0, deadline - mono())
                        rc = wait_child(proc, timeout)
                    except subprocess.TimeoutExpired:
                        timed_out = True
                        stop_group(proc.pid, KILL_GRACE_S)
                        rc = proc.wait()
                    info = exit_info(rc)
                    record.update(info)
                    record["durationMs"] = int((mono() - started) * 1000)
                    records.append(record)
                    final = info
                    if timed_out or rc != 0:
                        break
                if timed_out:
                    note("%s deadline of %d ms passed; stopped" % (kind, deadline_ms or 0))
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
