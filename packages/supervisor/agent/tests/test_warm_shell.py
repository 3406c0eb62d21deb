"""The warm shell's life cycle: stopping the agent leaves no shell and no file behind."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import RecordingWire, make_limits, wait_until

from pi_sandbox_agent.context import Context
from pi_sandbox_agent.jobs import Jobs
from pi_sandbox_agent.state import StateDir
from pi_sandbox_agent.warm_shell import WarmShells

BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="the warm shell needs bash")


def bash_ctx(tmp_path: Path) -> Context:
    state = StateDir(str(tmp_path / "state"))
    state.reset()
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    assert BASH is not None
    return Context(RecordingWire(), make_limits(), state, str(workspace), BASH)


def test_stop_ends_a_ready_warm_shell_and_removes_its_files(tmp_path: Path) -> None:
    ctx = bash_ctx(tmp_path)
    warm = WarmShells(ctx, Jobs(ctx.limits.completed_exec_handles), enabled=True)
    warm.refill(ctx.workspace)
    shell = wait_until(lambda: warm._ready, what="a ready warm shell")
    warm.stop()
    assert shell.proc.poll() is not None
    assert os.listdir(ctx.state.exec_dir) == []


def test_stop_while_a_warm_shell_is_being_started_leaves_nothing_behind(tmp_path: Path) -> None:
    # The stop lands at moments spread over the thread's start of a shell: the agent exits right
    # after stop() returns, so whatever the thread held must be gone by then.
    for attempt in range(40):
        ctx = bash_ctx(tmp_path / str(attempt))
        warm = WarmShells(ctx, Jobs(ctx.limits.completed_exec_handles), enabled=True)
        warm.refill(ctx.workspace)
        time.sleep(attempt * 0.0002)
        warm.stop()
        assert os.listdir(ctx.state.exec_dir) == [], "stopped %.1f ms after the refill" % (attempt * 0.2)
