"""Exec jobs: output caps from the host's limits, waits, handles and their expiry."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import wait_until

from pi_sandbox_agent.context import Context
from pi_sandbox_agent.execs import Execs
from pi_sandbox_agent.jobs import Job, Jobs
from pi_sandbox_agent.protocol import AgentError
from pi_sandbox_agent.warm_shell import WarmShells


def make_execs(ctx: Context) -> Execs:
    jobs = Jobs(ctx.limits.completed_exec_handles)
    return Execs(ctx, jobs, WarmShells(ctx, jobs, enabled=False))


def test_output_is_capped_at_the_limit_the_host_sent(make_ctx: Callable[..., Context]) -> None:
    execs = make_execs(make_ctx(output_max_bytes=2048))
    result = execs.exec({"command": "echo HEAD; head -c 50000 /dev/zero | tr '\\0' x; echo; echo TAIL"})
    assert result["exitCode"] == 0 and not result["running"]
    assert len(result["output"].encode()) <= 2048
    assert result["output"].startswith("HEAD\n") and result["output"].endswith("TAIL\n")
    assert result["truncatedBytes"] > 50_000 - 2048


def test_waits_are_bounded_by_the_host_limits(make_ctx: Callable[..., Context]) -> None:
    execs = make_execs(make_ctx(exec_wait_max_ms=500, exec_wait_default_ms=200))
    with pytest.raises(AgentError) as caught:
        execs.exec({"command": "true", "timeoutMs": 501})
    assert caught.value.code == "INVALID_ARGUMENT"
    t0 = time.monotonic()
    started = execs.exec({"command": "sleep 0.8; echo done"})  # the default wait: 200 ms
    assert started["running"] and time.monotonic() - t0 < 0.7
    finished = execs.status({"handle": started["handle"], "timeoutMs": 500})
    finished = finished if not finished["running"] else execs.status({"handle": started["handle"], "timeoutMs": 500})
    assert finished["exitCode"] == 0 and finished["output"] == "done\n"


def test_only_the_newest_completed_handles_are_kept(make_ctx: Callable[..., Context]) -> None:
    execs = make_execs(make_ctx(completed_exec_handles=2))
    handles = [execs.exec({"command": "echo %d" % i})["handle"] for i in range(3)]
    with pytest.raises(AgentError) as caught:
        execs.status({"handle": handles[0], "timeoutMs": 0})
    assert caught.value.code == "EXEC_HANDLE_EXPIRED"
    assert "only the 2 most recently completed" in caught.value.message
    assert execs.status({"handle": handles[2], "timeoutMs": 0})["exitCode"] == 0
    with pytest.raises(AgentError) as unknown:
        execs.status({"handle": "xnope", "timeoutMs": 0})
    assert unknown.value.code == "EXEC_HANDLE_NOT_FOUND"


def test_a_missing_cwd_and_a_bad_env_are_typed_errors(ctx: Context) -> None:
    execs = make_execs(ctx)
    with pytest.raises(AgentError) as cwd:
        execs.exec({"command": "pwd", "cwd": "nope"})
    assert cwd.value.code == "CWD_NOT_FOUND"
    with pytest.raises(AgentError) as env:
        execs.exec({"command": "true", "env": {"A": 1}})
    assert env.value.code == "INVALID_ARGUMENT"


def test_output_is_returned_once_and_the_file_freed_when_done(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    job = Job("xjob", "exec", str(out))
    out.write_bytes(b"first\n")
    assert job.collect(1024)["output"] == "first\n"
    with out.open("ab") as f:
        f.write(b"second\n")
    job.finish({"exitCode": 0})
    result = job.collect(1024)
    assert (result["output"], result["exitCode"], result["running"]) == ("second\n", 0, False)
    assert not out.exists()
    assert job.collect(1024)["output"] == ""


def test_unread_output_over_the_file_bound_is_dropped_and_counted(tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    job = Job("xjob", "exec", str(out))
    out.write_bytes(b"a" * 5000)
    job.bound_file(1000)
    with out.open("ab") as f:
        f.write(b"END\n")
    job.finish({"exitCode": 0})
    result = job.collect(64 * 1024)
    assert result["output"].startswith("[... pi-sandbox: 5000 bytes of output were dropped unread")
    assert result["output"].endswith("END\n")
    assert result["truncatedBytes"] == 5000


def test_kill_stops_the_whole_group(ctx: Context, tmp_path: Path) -> None:
    execs = make_execs(ctx)
    pid_file = tmp_path / "bg.pid"
    started = execs.exec({"command": "sleep 300 & echo $! > %s; sleep 300" % pid_file, "timeoutMs": 300})
    pid = int(wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="pid file"))
    killed = execs.kill({"handle": started["handle"]})
    assert killed["killed"] and not killed["running"] and killed["signal"] == "SIGTERM"
    wait_until(lambda: not os.path.exists("/proc/%d" % pid) or "Z" in open("/proc/%d/stat" % pid).read().split()[2])


def test_stderr_apart_when_asked_merged_otherwise(ctx: Context) -> None:
    execs = make_execs(ctx)
    command = "echo out; echo err >&2; sleep 3; echo out2; echo err2 >&2"
    merged = execs.exec({"command": command, "timeoutMs": 10000})
    assert merged["output"] == "out\nerr\nout2\nerr2\n" and "stderr" not in merged
    first = execs.exec({"command": command, "timeoutMs": 2000, "separateStderr": True})
    assert first["running"] and first["output"] == "out\n" and first["stderr"] == "err\n"
    rest = execs.status({"handle": first["handle"], "timeoutMs": 5000})
    assert rest["output"] == "out2\n" and rest["stderr"] == "err2\n" and rest["stderrTruncatedBytes"] == 0
    assert not [n for n in os.listdir(ctx.state.exec_dir) if n.startswith(first["handle"])]


def test_activity_counts_running_jobs_and_the_time_since_one_last_started_or_ended(
    make_ctx: Callable[..., Context],
) -> None:
    execs = make_execs(make_ctx(exec_wait_default_ms=100))
    assert execs.jobs.activity() == {"runningJobs": 0}
    started = execs.exec({"command": "sleep 0.6"})
    assert started["running"] and execs.jobs.activity()["runningJobs"] == 1
    wait_until(lambda: execs.jobs.activity()["runningJobs"] == 0, 5)
    time.sleep(0.3)
    idle = execs.jobs.activity()
    assert idle["runningJobs"] == 0 and 250 <= idle["jobsIdleMs"] < 5000
