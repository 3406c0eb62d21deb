"""The kernel's hostname, from /etc/hostname, when the guest's init left it unset.

Gondolin's guest init does not read /etc/hostname: after every cold boot the kernel's name was
"(none)", so `hostname`, shell prompts and logs showed that instead of the name the image (or, for a
copy of a template, the controller) wrote there. The agent's first start of a boot applies it.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Callable

#: What the kernel reports before anyone set a name.
UNSET = ("", "(none)")
#: A hostname the agent applies: dot-separated labels of letters, digits and inner hyphens.
VALID = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
#: Longest name the kernel takes.
MAX_LENGTH = 64


def apply_etc_hostname(
    path: str = "/etc/hostname",
    current: Callable[[], str] = socket.gethostname,
    setter: Callable[[str], None] = socket.sethostname,
) -> str | None:
    """Sets the kernel's hostname from the first line of `path` when it is unset; returns the name
    set, or None (already named, no usable file, not permitted)."""
    try:
        if current() not in UNSET:
            return None
        with open(path, encoding="ascii", errors="replace") as f:
            name = f.readline(MAX_LENGTH + 2).strip()
        if len(name) > MAX_LENGTH or not VALID.fullmatch(name):
            return None
        setter(name)
    except OSError:
        return None
    return name
