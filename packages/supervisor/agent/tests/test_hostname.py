"""The kernel's hostname comes from /etc/hostname when the guest's init left it unset."""

from __future__ import annotations

from pathlib import Path

import pytest

from pi_sandbox_agent.hostname import apply_etc_hostname


def run(tmp_path: Path, content: str, kernel: str) -> tuple[str | None, list[str]]:
    path = tmp_path / "hostname"
    path.write_text(content)
    calls: list[str] = []
    return apply_etc_hostname(str(path), lambda: kernel, calls.append), calls


def test_an_unset_kernel_name_takes_the_files_first_line(tmp_path: Path) -> None:
    assert run(tmp_path, "web-1\n", "(none)") == ("web-1", ["web-1"])
    assert run(tmp_path, "box.example\nignored\n", "") == ("box.example", ["box.example"])


def test_a_name_already_set_is_left_alone(tmp_path: Path) -> None:
    assert run(tmp_path, "web-1\n", "sandbox") == (None, [])


@pytest.mark.parametrize("content", ["", "\n", "-web\n", "we b\n", "a;reboot\n", "x" * 65 + "\n", "a..b\n", "é\n"])
def test_a_file_that_is_not_a_hostname_is_ignored(tmp_path: Path, content: str) -> None:
    assert run(tmp_path, content, "(none)") == (None, [])


def test_a_missing_file_or_a_refused_change_is_ignored(tmp_path: Path) -> None:
    assert apply_etc_hostname(str(tmp_path / "absent"), lambda: "(none)", lambda _: None) is None

    def refuse(_: str) -> None:
        raise PermissionError("not root")

    path = tmp_path / "hostname"
    path.write_text("web\n")
    assert apply_etc_hostname(str(path), lambda: "(none)", refuse) is None
