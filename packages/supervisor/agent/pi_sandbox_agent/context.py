"""What every part of the agent shares: the wire, the host's limits, the state dir, the shell."""

from __future__ import annotations

import os
from typing import Any

from .cleanup import RUN_MARKER_ENV
from .protocol import AgentError, Limits, Wire
from .state import StateDir


class Context:
    """The agent's settings for one session, fixed once the host said hello."""

    def __init__(self, wire: Wire, limits: Limits, state: StateDir, workspace: str, shell: str):
        self.wire = wire
        self.limits = limits
        self.state = state
        self.workspace = os.path.abspath(workspace)
        self.shell = shell
        # What commands and warm shells start from: the agent's environment without a run marker.
        self.base_env: dict[str, str] = {k: v for k, v in os.environ.items() if k != RUN_MARKER_ENV}

    def login_shell(self, command: str) -> list[str]:
        return [self.shell, "-lc", command]

    def resolve_cwd(self, cwd: str | None) -> str:
        if not cwd:
            return self.workspace
        return os.path.normpath(os.path.join(self.workspace, cwd))

    def check_cwd(self, cwd: Any) -> str:
        if cwd is not None and not isinstance(cwd, str):
            raise AgentError("INVALID_ARGUMENT", "cwd must be a string")
        path = self.resolve_cwd(cwd)
        if not os.path.isdir(path):
            raise AgentError("CWD_NOT_FOUND", "working directory %s does not exist in the guest" % path, {"cwd": path})
        return path
