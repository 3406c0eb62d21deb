"""The exec operations: run a command in a login shell, follow it by handle, kill its group."""

from __future__ import annotations

import os
import threading

from .context import Context
from .jobs import KILL_GRACE_S, Job, Jobs
from .procs import exit_info, wait_exit
from .protocol import AgentError, JsonDict, check_env, check_str, need_int
from .warm_shell import WarmShells


class Execs:
    """exec, exec-status and exec-kill over the shared job registry."""

    def __init__(self, ctx: Context, jobs: Jobs, warm: WarmShells):
        self.ctx = ctx
        self.jobs = jobs
        self.warm = warm

    def _wait_ms(self, args: JsonDict) -> int:
        limits = self.ctx.limits
        return need_int(args, "timeoutMs", limits.exec_wait_default_ms, 0, limits.exec_wait_max_ms)

    def exec(self, args: JsonDict) -> JsonDict:
        command = check_str(args, "command")
        cwd = self.ctx.check_cwd(args.get("cwd"))
        timeout_ms = self._wait_ms(args)
        extra_env = check_env(args.get("env"))
        separate = args.get("separateStderr") is True
        job = None if extra_env else self._exec_warm(command, cwd, separate)
        if job is None:
            env = dict(self.ctx.base_env)
            env.update(extra_env)
            handle = self.jobs.new_handle()
            base = os.path.join(self.ctx.state.exec_dir, handle)
            job = Job(handle, "exec", base + ".out", err_path=base + ".err" if separate else None)
            try:
                job.spawn(self.ctx.login_shell(command), cwd, env)
            except OSError as err:
                raise AgentError("EXEC_FAILED", "could not start the command: %s" % err) from None
        self.jobs.add(job)
        try:
            self._await(job, timeout_ms / 1000.0)
            return job.collect(self.ctx.limits.output_max_bytes)
        finally:
            self.warm.refill(cwd)

    def _exec_warm(self, command: str, cwd: str, separate: bool) -> Job | None:
        """Gives the command to the warm shell; None when there is none to use."""
        shell = self.warm.take(cwd)
        if shell is None:
            return None
        try:
            data: bytes | None = os.fsencode(command)
        except UnicodeError:
            data = None  # the cold path reports it the way it always did
        if data is None or b"\0" in data or not shell.send(data, separate):
            self.warm.retire(shell)
            return None
        if not separate:
            # Its stderr now goes to the output file; the shell's own, unused, goes.
            try:
                os.unlink(shell.err_path)
            except OSError:
                pass
        job = Job(shell.handle, "exec", shell.out_path, err_path=shell.err_path if separate else None)
        job.proc = shell.proc
        job.pid = shell.proc.pid
        return job

    def _await(self, job: Job, timeout_s: float) -> None:
        """Waits up to timeout_s for an exec; whatever still runs then is reaped by a thread."""
        assert job.proc is not None
        exited = wait_exit(job.proc.pid, timeout_s)
        if exited:
            self._reap(job)
            return
        threading.Thread(target=self._reap, args=(job,), name="reap-" + job.handle, daemon=True).start()
        if exited is None:
            job.done.wait(timeout_s)

    def _reap(self, job: Job) -> None:
        assert job.proc is not None
        rc = job.proc.wait()
        job.finish(exit_info(rc))
        self.jobs.completed()

    def status(self, args: JsonDict) -> JsonDict:
        job = self.jobs.get(args.get("handle"))
        timeout_ms = self._wait_ms(args)
        job.done.wait(timeout_ms / 1000.0)
        return job.collect(self.ctx.limits.output_max_bytes, tail_only=job.kind == "setup")

    def kill(self, args: JsonDict) -> JsonDict:
        job = self.jobs.get(args.get("handle"))
        was_running = not job.done.is_set()
        job.kill()
        job.done.wait(KILL_GRACE_S + 5.0)
        result = job.status()
        result["killed"] = was_running
        return result
