"""A new guest's own identity, carried by the host's hello.

A new instance starts as a copy: of the image, or of a template's guest (its machine-id, hostname
and ssh host keys, and, resumed from a template's memory, its running processes). The host's first
hello to a new guest carries a fresh machine-id and the instance's name; the agent writes them
before it serves anything, which spares the exec (a login shell, slow under software emulation)
that did it on the way to a warm clone's first preview byte. Whatever the agent does not apply, it
does not claim: the host then runs that exec instead.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import socket
from collections.abc import Callable

from .hostname import MAX_LENGTH, VALID

#: A machine-id: 32 lowercase hex digits (machine-id(5)).
MACHINE_ID = re.compile(r"[0-9a-f]{32}")


def apply_identity(
    value: object,
    etc: str = "/etc",
    sethostname: Callable[[str], None] = socket.sethostname,
) -> bool:
    """Writes the host's machine-id and hostname into `etc`, removes the ssh host keys (the next
    terminal's `ssh-keygen -A` makes new ones) and sets the kernel's hostname; True when every file
    was written. Anything but a well-formed identity is ignored (False), and so is a kernel that
    refuses the hostname (/etc/hostname names it at the next boot)."""
    if not isinstance(value, dict):
        return False
    machine_id = value.get("machineId")
    hostname = value.get("hostname")
    if not isinstance(machine_id, str) or not MACHINE_ID.fullmatch(machine_id):
        return False
    if not isinstance(hostname, str) or len(hostname) > MAX_LENGTH or not VALID.fullmatch(hostname):
        return False
    try:
        _write(os.path.join(etc, "machine-id"), machine_id + "\n")
        for key in glob.glob(os.path.join(etc, "ssh", "ssh_host_*")):
            with contextlib.suppress(FileNotFoundError):
                os.remove(key)
        _write(os.path.join(etc, "hostname"), hostname + "\n")
    except OSError:
        return False
    with contextlib.suppress(OSError):
        sethostname(hostname)
    return True


def _write(path: str, text: str) -> None:
    # In place, as the shell's `>` did: /etc/machine-id may be a link or a bind mount.
    with open(path, "w", encoding="ascii") as f:
        f.write(text)
