"""The bridge's start-up stays light: every host session starts one, and under software emulation
importing the whole agent takes seconds (and socket, threading and subprocess about 0.3 s)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pi_sandbox_agent.bridge import DEFAULT_STATE_DIR, state_dir_of

AGENT_DIR = Path(__file__).resolve().parents[1]

# Runs the zipapp's entry as a bridge whose daemon cannot start (its state dir's parent is a file),
# and lists the agent modules it loaded by then.
PROBE = """
import atexit, sys
HEAVY = ("socket", "threading", "subprocess", "selectors")
atexit.register(lambda: print(sorted(m for m in sys.modules if m.startswith("pi_sandbox_agent")), file=sys.stderr))
atexit.register(lambda: print(sorted(m for m in HEAVY if m in sys.modules), file=sys.stderr))
sys.argv = ["agent", "--attach", "--state-dir", sys.argv[1]]
from pi_sandbox_agent.start import entry
entry()
"""


def test_a_bridge_loads_only_the_bridge(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = subprocess.run(
        [sys.executable, "-S", "-c", PROBE, str(blocker / "state")],
        cwd=AGENT_DIR,
        env=dict(os.environ, PYTHONPATH=str(AGENT_DIR)),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        timeout=30,
    )
    # It could not start a daemon, said so on the channel, and imported nothing of the agent proper,
    # nor the standard library's socket, threading and subprocess (atexit runs last-in first-out).
    assert result.returncode == 2
    assert b'"code": "AGENT_DAEMON"' in result.stdout
    heavy, loaded = result.stderr.decode().strip().splitlines()[-2:]
    assert loaded == "['pi_sandbox_agent', 'pi_sandbox_agent.bridge', 'pi_sandbox_agent.start']"
    assert heavy == "[]"


@pytest.mark.parametrize(
    ("argv", "env", "expected"),
    [
        (["--attach"], {}, DEFAULT_STATE_DIR),
        (["--attach"], {"PI_SANDBOX_AGENT_STATE_DIR": "/env"}, "/env"),
        (["--state-dir", "/a", "--attach", "--state-dir=/b"], {"PI_SANDBOX_AGENT_STATE_DIR": "/env"}, "/b"),
        (["--workspace", "/w", "--state-dir", "/a"], {}, "/a"),
    ],
)
def test_the_state_dir_is_read_as_the_daemon_will(
    argv: list[str], env: dict[str, str], expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PI_SANDBOX_AGENT_STATE_DIR", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert state_dir_of(argv) == expected
