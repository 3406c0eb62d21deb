"""Following a service log: cursors across appends, rotations and truncation."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pi_sandbox_agent.log_follow import SKIPPED, log_since, log_tail_with_cursor
from pi_sandbox_agent.protocol import AgentError


def append(path: Path, text: str) -> None:
    with open(path, "ab") as f:
        f.write(text.encode())


def test_tail_then_only_what_came_after(tmp_path: Path) -> None:
    log = tmp_path / "web.log"
    append(log, "a\nb\nc\n")
    first = log_tail_with_cursor(str(log), 2, 65536)
    assert first["text"] == "b\nc\n" and first["lines"] == 2
    assert log_since(str(log), first["cursor"], 65536)["text"] == ""
    append(log, "d\n")
    second = log_since(str(log), first["cursor"], 65536)
    assert second["text"] == "d\n" and not second["more"]
    assert log_since(str(log), second["cursor"], 65536)["text"] == ""


def test_a_rotation_continues_in_the_old_file_then_the_new(tmp_path: Path) -> None:
    log = tmp_path / "web.log"
    append(log, "one\n")
    cursor = log_tail_with_cursor(str(log), 10, 65536)["cursor"]
    append(log, "two\n")
    os.replace(log, str(log) + ".1")
    append(log, "three\n")
    after = log_since(str(log), cursor, 65536)
    assert after["text"] == "two\nthree\n"
    assert log_since(str(log), after["cursor"], 65536)["text"] == ""


def test_two_rotations_are_marked_as_skipped(tmp_path: Path) -> None:
    log = tmp_path / "web.log"
    append(log, "one\n")
    cursor = log_tail_with_cursor(str(log), 10, 65536)["cursor"]
    # Held open, the first file's inode cannot be reused by the third.
    with open(log, "rb"):
        for text in ("two\n", "three\n"):
            os.replace(log, str(log) + ".1")
            append(log, text)
        assert log_since(str(log), cursor, 65536)["text"] == SKIPPED + "three\n"


def test_a_large_backlog_comes_in_capped_pieces(tmp_path: Path) -> None:
    log = tmp_path / "web.log"
    cursor = log_tail_with_cursor(str(log), 10, 100)["cursor"]
    assert cursor == "0:0"
    append(log, "é" * 150)
    got = ""
    more = True
    while more:
        piece = log_since(str(log), cursor, 100)
        assert len(piece["text"].encode()) <= 100
        got += piece["text"]
        cursor, more = piece["cursor"], piece["more"]
    assert got == "é" * 150


def test_a_bad_cursor_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AgentError):
        log_since(str(tmp_path / "x.log"), "../etc:1", 100)
