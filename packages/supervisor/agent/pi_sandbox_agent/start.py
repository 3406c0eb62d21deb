"""The zipapp's entry. A bridge (`--attach`, once per host session) loads only bridge.py; every
other mode loads the whole agent (main.py)."""

from __future__ import annotations

import sys


def entry() -> None:
    argv = sys.argv[1:]
    if "--attach" in argv:
        from .bridge import attach_main

        sys.exit(attach_main(argv))
    from .main import entry as agent_entry

    agent_entry()
