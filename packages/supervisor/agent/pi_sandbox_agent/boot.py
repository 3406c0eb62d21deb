"""Starting the agent daemon while the guest boots, before the host asks for it.

Without this, a cold boot serialises two Python starts after the guest is ready: the host's first
exec runs the bridge, which then starts the daemon (about 2 s under software emulation). With it,
the image's /init starts the daemon next to its own work, and the host's bridge finds it listening.

The daemon writes `<state dir>.boot` (a /bin/sh script) once it listens, when the host gave it a
`--boot-key`: the key hashes everything that decides which agent runs (the archive's sha256, the
interpreter, the agent path and these arguments). The host puts the key of the agent it wants on
the guest kernel's command line (`pi_sandbox.agent=KEY`); the image's /init runs the script with
that key, and the script starts the daemon only when the key is its own. So a host with another
agent, or one that runs it with other arguments, never meets a daemon it did not ask for: the
script does nothing and the host's bridge starts the daemon as before.

The script takes the same lock as a bridge that starts a daemon (`<state dir>.lock`) on fd 9 before
it runs Python; the daemon releases it once it listens. A bridge that comes meanwhile waits for
that, then connects; a daemon started at boot that finds one listening already leaves.

Once it listens, a daemon with a key also leaves its TCP door (see daemon.py) in `<state dir>.door`,
readable by root only: `KEY PORT TOKEN`. The host's first exec of a boot waits on the start lock,
reads that file when the daemon of its key listens, and attaches through the door: no bridge, so
no second Python start in a guest that is still busy booting. A file left by an earlier boot is
never taken for this one: a daemon removes it before it listens and when it ends, and the host's
exec reads it only while a daemon listens on the socket.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex

from .bridge import self_command
from .protocol import JsonDict

#: The fd on which the boot script hands its start lock to the daemon (see the script below).
LOCK_FD = 9
#: A key as the host makes it: 32 lowercase hex digits.
KEY = re.compile(r"[0-9a-f]{32}")
#: The daemon's own flags, which the script adds itself.
DAEMON_FLAGS = ("--daemon", "--boot")


def script_path(state_dir: str) -> str:
    return os.path.abspath(state_dir).rstrip("/") + ".boot"


def write_script(state_dir: str, key: str, argv: list[str]) -> None:
    """Writes (atomically) how the next boot starts this daemon: its command line, under `key`."""
    base = os.path.abspath(state_dir).rstrip("/")
    command = [*self_command(), *(arg for arg in argv if arg not in DAEMON_FLAGS), *DAEMON_FLAGS]
    lines = [
        "# The pi-sandbox guest agent's daemon as its last start ran it. The image's /init runs this",
        "# at boot with the key from the kernel command line: nothing starts unless it is this key.",
        '[ "$1" = %s ] || exit 0' % shlex.quote(key),
        "exec %d>>%s || exit 0" % (LOCK_FD, shlex.quote(base + ".lock")),
        "flock %d || exit 0" % LOCK_FD,
        "exec %s </dev/null >%s 2>&1" % (" ".join(shlex.quote(arg) for arg in command), shlex.quote(base + ".log")),
        "",
    ]
    path = script_path(state_dir)
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines))
    os.replace(tmp, path)


def door_path(state_dir: str) -> str:
    return os.path.abspath(state_dir).rstrip("/") + ".door"


def write_door(state_dir: str, key: str, door: JsonDict) -> None:
    """Leaves this daemon's door for the host (atomically, mode 0600: the token lets a connection
    in as the host). Only a speed-up: on failure (a full disk) the host uses its exec bridge."""
    path = door_path(state_dir)
    tmp = path + ".tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write("%s %d %s\n" % (key, int(door["port"]), door["token"]))
        os.replace(tmp, path)
    except OSError:
        remove_door(state_dir)  # and its temp file


def remove_door(state_dir: str) -> None:
    for path in (door_path(state_dir), door_path(state_dir) + ".tmp"):
        with contextlib.suppress(OSError):
            os.unlink(path)


def remove_script(state_dir: str) -> None:
    """A daemon without a key (an older host) leaves no script for a later boot to trust."""
    try:
        os.unlink(script_path(state_dir))
    except FileNotFoundError:
        pass


def someone_listens(path: str) -> bool:
    """True when a socket of this kernel listens on `path` (a daemon runs already: the one started
    at boot then leaves). Read from /proc/net/unix rather than by connecting, which the daemon would
    take for a new host session and end the current one; a socket file left by the last boot is not
    listed there."""
    try:
        with open("/proc/net/unix") as f:
            next(f, None)  # the header
            for line in f:
                fields = line.rstrip("\n").split(None, 7)
                # Num RefCount Protocol Flags Type St Inode Path; __SO_ACCEPTCON is 0x10000.
                if len(fields) == 8 and fields[7] == path and int(fields[3], 16) & 0x10000:
                    return True
    except (OSError, ValueError):
        pass
    return False


def release_start_lock() -> None:
    """Lets a waiting bridge in: this daemon listens now. Its children never inherit the lock."""
    import fcntl

    try:
        fcntl.flock(LOCK_FD, fcntl.LOCK_UN)
        os.close(LOCK_FD)
    except OSError:
        pass  # started by hand without the script's fd: nothing to release
