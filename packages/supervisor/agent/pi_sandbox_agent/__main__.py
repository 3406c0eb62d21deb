"""`python3 -m pi_sandbox_agent` (development); the zipapp has its own __main__ calling the same."""

from .start import entry

entry()
