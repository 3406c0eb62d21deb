"""The state directory at agent start: pids go, sticky ports and bounded logs stay."""

from __future__ import annotations

import os
from pathlib import Path

from pi_sandbox_agent.logs import RotatingLog, tail_log
from pi_sandbox_agent.state import LOG_NAMES_KEPT, SETUP_LOGS_KEPT, StateDir


def test_a_new_start_keeps_service_and_setup_logs_and_clears_the_rest(tmp_path: Path) -> None:
    state = StateDir(str(tmp_path / "state"))
    state.reset()
    log = RotatingLog(os.path.join(state.logs_dir, "web.log"), limit=64)
    for _ in range(6):
        log.write(b"first boot line\n")  # rotates once: web.log and web.log.1
    log.close()
    setup = os.path.join(state.runs_dir, "setup-x0123456789abcdef.log")
    Path(setup).write_text("setup said this\n")
    Path(state.runs_dir, "resume-x0123456789abcdef.log").write_text("resume\n")
    Path(state.exec_dir, "x1.out").write_text("old exec\n")
    Path(state.logs_dir, "stray").write_text("not a log\n")
    os.symlink("/etc/passwd", os.path.join(state.logs_dir, "evil.log"))

    state.reset()

    assert sorted(os.listdir(state.logs_dir)) == ["web.log", "web.log.1"]
    assert os.listdir(state.runs_dir) == ["setup-x0123456789abcdef.log"]
    assert os.listdir(state.exec_dir) == []
    again = RotatingLog(os.path.join(state.logs_dir, "web.log"), limit=64)
    again.write(b"second boot line\n")
    again.close()
    text, _, _ = tail_log(os.path.join(state.logs_dir, "web.log"), 100, 1 << 20)
    assert "first boot line" in text and text.endswith("second boot line\n")


def test_only_the_logs_written_last_are_kept(tmp_path: Path) -> None:
    state = StateDir(str(tmp_path / "state"))
    state.reset()
    for i in range(LOG_NAMES_KEPT + 2):
        path = os.path.join(state.logs_dir, "svc-%d.log" % i)
        Path(path).write_text("x\n")
        os.utime(path, (1000 + i, 1000 + i))
    for i in range(SETUP_LOGS_KEPT + 2):
        path = os.path.join(state.runs_dir, "setup-x%016x.log" % i)
        Path(path).write_text("x\n")
        os.utime(path, (1000 + i, 1000 + i))
    state.reset()
    logs = os.listdir(state.logs_dir)
    assert len(logs) == LOG_NAMES_KEPT and "svc-0.log" not in logs and "svc-1.log" not in logs
    runs = sorted(os.listdir(state.runs_dir))
    assert runs == ["setup-x%016x.log" % i for i in range(2, SETUP_LOGS_KEPT + 2)]
