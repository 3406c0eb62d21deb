"""run-follow: a setup run's log read from its start while it runs, and to its end afterwards."""

from __future__ import annotations

import threading

import pytest
from conftest import wait_until

from pi_sandbox_agent.cleanup import Cleanup
from pi_sandbox_agent.context import Context
from pi_sandbox_agent.jobs import Jobs
from pi_sandbox_agent.protocol import AgentError, JsonDict
from pi_sandbox_agent.runs import Runs


def test_a_follower_reads_the_running_setup_step_by_step_then_its_end(ctx: Context, no_env_marker: None) -> None:
    runs = Runs(ctx, Jobs(ctx.limits.completed_exec_handles), Cleanup(None))
    assert runs.follow({"kind": "setup"}) == {
        "kind": "setup",
        "running": False,
        "text": "",
        "cursor": "0:0",
        "more": False,
    }
    gate = ctx.state.root + "/gate"
    result: JsonDict = {}
    thread = threading.Thread(
        target=lambda: result.update(
            runs.setup({"commands": ["echo one", "while [ ! -e %s ]; do sleep 0.05; done; echo two" % gate]})
        ),
        daemon=True,
    )
    thread.start()

    def one() -> JsonDict | None:
        read = runs.follow({"kind": "setup"})
        return read if "\none\n" in read["text"] else None  # the output line, not the step's label

    try:
        first = wait_until(one, what="one")
        assert first["running"] is True
        assert "setup step 1/2: echo one" in first["text"] and "\ntwo\n" not in first["text"]
    finally:
        open(gate, "w").close()
        thread.join(10)
    assert result["ok"] is True
    rest = runs.follow({"kind": "setup", "cursor": first["cursor"]})
    assert rest["running"] is False
    # The second read goes on where the first ended: nothing twice, everything in order.
    assert "two\n" in rest["text"] and "one" not in rest["text"]
    whole = first["text"] + rest["text"]
    assert whole.index("step 1/2") < whole.index("\none\n") < whole.index("step 2/2") < whole.index("\ntwo\n")


def test_only_setup_and_string_cursors_are_followed(ctx: Context) -> None:
    runs = Runs(ctx, Jobs(ctx.limits.completed_exec_handles), Cleanup(None))
    with pytest.raises(AgentError):
        runs.follow({"kind": "resume"})
    with pytest.raises(AgentError):
        runs.follow({"kind": "setup", "cursor": 7})
