"""Capped text: UTF-8-safe cuts and explicit markers where output was left out."""

from __future__ import annotations

# Room kept for a marker inside a cap.
MARKER_ROOM = 96


def utf8_cut_end(data: bytes) -> bytes:
    """Drops a trailing partial UTF-8 sequence so a cut never splits a character."""
    i = len(data)
    back = 0
    while i > 0 and back < 4 and (data[i - 1] & 0xC0) == 0x80:
        i -= 1
        back += 1
    if i > 0 and data[i - 1] >= 0xC0:
        lead = data[i - 1]
        need = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
        if back + 1 < need:
            return data[: i - 1]
    return data


def utf8_cut_start(data: bytes) -> bytes:
    """Drops leading continuation bytes left by a cut in the middle of a character."""
    i = 0
    while i < len(data) and i < 4 and (data[i] & 0xC0) == 0x80:
        i += 1
    return data[i:]


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def omitted_marker(count: int, what: str) -> str:
    return "\n[... pi-sandbox: %d bytes of %s omitted ...]\n" % (count, what)


def read_span_capped(path: str, start: int, end: int, cap: int, what: str, tail_only: bool = False) -> tuple[str, int]:
    """Reads bytes [start, end) of a file as text of at most about `cap` UTF-8 bytes.

    A larger span keeps its head and tail with an explicit marker between them (or, with
    `tail_only`, only its tail after a leading marker). Returns (text, omitted_byte_count).
    """
    total = max(0, end - start)
    if total == 0:
        return "", 0
    with open(path, "rb") as f:
        if total <= cap:
            f.seek(start)
            return decode(f.read(total)), 0
        room = cap - MARKER_ROOM
        if tail_only:
            f.seek(end - room)
            tail = utf8_cut_start(f.read(room))
            omitted = total - len(tail)
            return omitted_marker(omitted, what).lstrip("\n") + decode(tail), omitted
        head_len = room // 4
        tail_len = room - head_len
        f.seek(start)
        head = utf8_cut_end(f.read(head_len))
        f.seek(end - tail_len)
        tail = utf8_cut_start(f.read(tail_len))
    omitted = total - len(head) - len(tail)
    return decode(head) + omitted_marker(omitted, what) + decode(tail), omitted


def cap_tail(data: bytes, cap: int, what: str) -> tuple[str, int]:
    """The end of `data` as text of at most about `cap` bytes, after a marker when cut."""
    if len(data) <= cap:
        return decode(data), 0
    keep = cap - MARKER_ROOM
    omitted = len(data) - keep
    return omitted_marker(omitted, what).lstrip("\n") + decode(utf8_cut_start(data[-keep:])), omitted
