"""Output caps: head and tail kept with a marker, UTF-8 never split, log tails."""

from __future__ import annotations

from pathlib import Path

from pi_sandbox_agent.logs import RotatingLog, tail_log
from pi_sandbox_agent.output import cap_tail, read_span_capped, utf8_cut_end, utf8_cut_start


def test_utf8_cuts_never_split_a_character() -> None:
    data = "aé€😀".encode()  # 1, 2, 3 and 4 bytes
    for end in range(len(data) + 1):
        assert utf8_cut_end(data[:end]).decode() in ("", "a", "aé", "aé€", "aé€😀")
    for start in range(len(data)):
        utf8_cut_start(data[start:]).decode()  # never raises


def test_a_span_within_the_cap_is_returned_whole(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"0123456789")
    assert read_span_capped(str(path), 2, 8, 1024, "output") == ("234567", 0)
    assert read_span_capped(str(path), 8, 8, 1024, "output") == ("", 0)


def test_a_larger_span_keeps_head_and_tail_and_counts_what_it_left_out(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(b"H" * 1000 + b"x" * 100_000 + b"T" * 1000)
    text, omitted = read_span_capped(str(path), 0, 102_000, 4096, "output")
    assert len(text.encode()) <= 4096
    assert text.startswith("H" * 1000) and text.endswith("T" * 1000)
    assert "[... pi-sandbox: %d bytes of output omitted ...]" % omitted in text
    kept = len(text.encode()) - len("\n[... pi-sandbox: %d bytes of output omitted ...]\n" % omitted)
    assert kept + omitted == 102_000


def test_tail_only_keeps_the_end_after_a_leading_marker(tmp_path: Path) -> None:
    path = tmp_path / "out"
    path.write_bytes(("é" * 50_000).encode())
    text, omitted = read_span_capped(str(path), 0, 100_000, 2048, "output", tail_only=True)
    assert text.startswith("[... pi-sandbox: %d bytes of output omitted ...]\n" % omitted)
    assert text.endswith("é") and "\ufffd" not in text
    assert len(text.encode()) <= 2048


def test_cap_tail_marks_the_cut() -> None:
    assert cap_tail(b"short", 1024, "log") == ("short", 0)
    text, omitted = cap_tail(b"a" * 5000, 1024, "log")
    assert omitted == 5000 - (1024 - 96)
    assert text.startswith("[... pi-sandbox: %d bytes of log omitted ...]\n" % omitted)


def test_logs_rotate_to_two_files_and_the_tail_spans_both(tmp_path: Path) -> None:
    path = tmp_path / "web.log"
    log = RotatingLog(str(path), limit=100)
    for i in range(30):
        log.write(b"line %02d\n" % i)
    log.close()
    assert path.stat().st_size <= 100 and (tmp_path / "web.log.1").stat().st_size <= 100
    text, omitted, count = tail_log(str(path), 15, 64 * 1024)
    assert (text, omitted, count) == ("".join("line %02d\n" % i for i in range(15, 30)), 0, 15)


def test_a_log_tail_is_capped_in_bytes_as_well_as_lines(tmp_path: Path) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(b"".join(b"%04d %s\n" % (i, b"z" * 200) for i in range(100)))
    text, omitted, count = tail_log(str(path), 100, 2048)
    assert count == 100
    assert omitted > 0 and len(text.encode()) <= 2048
    assert text.endswith("0099 " + "z" * 200 + "\n")
