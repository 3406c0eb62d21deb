"""pi-sandbox guest agent.

Runs once per guest boot over one long-lived exec channel. It reads line-delimited JSON requests
on stdin and writes responses and events on stdout (see `protocol`). It supervises services
(restart after any exit, readiness probes), runs exec commands with output kept in files, runs
setup/resume hooks, and moves files in checksummed chunks.

Standard library only. The host ships the package as one zipapp, written into the guest in a
single step, so a guest never runs a mix of two versions.
"""
