"""Directory trees for copies: what a path is, a bounded recursive listing, and mkdir.

Symbolic links are reported as such and never followed. A listing stops at the host's
`maxEntries` or at LIST_REPLY_BUDGET bytes of entries (so the reply stays well under the host's
line bound) and then says `truncated`. Names that are not UTF-8 are left out and counted.
"""

from __future__ import annotations

import json
import os
import stat

from .fsutil import os_error
from .protocol import AgentError, JsonDict, check_abs_path, check_int, need_int

LIST_REPLY_BUDGET = 4 * 1024 * 1024
LIST_MAX_ENTRIES = 100_000


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISLNK(mode):
        return "symlink"
    return "other"


def _entry(st: os.stat_result) -> JsonDict:
    return {
        "type": _kind(st.st_mode),
        "size": st.st_size if stat.S_ISREG(st.st_mode) else 0,
        "mode": st.st_mode & 0o7777,
    }


def file_stat(args: JsonDict) -> JsonDict:
    path = check_abs_path(args)
    try:
        st = os.lstat(path)
    except OSError as err:
        raise os_error(err, path, "stat") from None
    result = _entry(st)
    if stat.S_ISLNK(st.st_mode):
        # What a link leads to decides whether a copy goes into it (a link to a directory).
        try:
            result["target"] = _kind(os.stat(path).st_mode)
        except OSError:
            result["target"] = "missing"
    return result


def file_list(args: JsonDict) -> JsonDict:
    """Every entry under a directory, parents before children, names sorted; paths relative."""
    root = check_abs_path(args)
    max_entries = need_int(args, "maxEntries", 10_000, 1, LIST_MAX_ENTRIES)
    try:
        if not stat.S_ISDIR(os.stat(root).st_mode):
            raise AgentError("FILE_NOT_DIRECTORY", "%s is not a directory" % root, {"path": root})
    except OSError as err:
        raise os_error(err, root, "list") from None
    entries: list[JsonDict] = []
    budget = LIST_REPLY_BUDGET
    pending = [""]
    unnamed = 0
    while pending:
        rel = pending.pop()
        here = os.path.join(root, rel) if rel else root
        try:
            with os.scandir(here) as it:
                names = sorted(e.name for e in it)
        except OSError as err:
            raise os_error(err, here, "list") from None
        subdirs: list[str] = []
        for name in names:
            try:
                name.encode("utf-8")
            except UnicodeEncodeError:
                unnamed += 1  # not UTF-8: the host could not name it
                continue
            path = rel + "/" + name if rel else name
            try:
                st = os.lstat(os.path.join(root, path))
            except OSError:
                continue  # gone since the listing
            entry = _entry(st)
            entry["path"] = path
            budget -= len(json.dumps(entry))
            if len(entries) >= max_entries or budget < 0:
                return {"entries": entries, "truncated": True, "skippedNames": unnamed}
            entries.append(entry)
            if entry["type"] == "directory":
                subdirs.append(path)
        pending.extend(reversed(subdirs))
    return {"entries": entries, "truncated": False, "skippedNames": unnamed}


def file_mkdir(args: JsonDict) -> JsonDict:
    """Creates a directory and its missing parents (those with the default mode); an existing
    directory is fine and keeps its mode. A new one gets exactly `mode`, whatever the umask."""
    path = check_abs_path(args)
    mode = check_int(args, "mode", 0o755, 0, 0o7777)
    assert mode is not None
    try:
        existed = os.path.isdir(path)
        os.makedirs(path, mode=mode, exist_ok=True)
        if not existed:
            os.chmod(path, mode)
    except FileExistsError:
        raise AgentError("FILE_NOT_DIRECTORY", "%s exists and is not a directory" % path, {"path": path}) from None
    except OSError as err:
        raise os_error(err, path, "create directory") from None
    return {"path": path}
