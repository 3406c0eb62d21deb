"""The daemon's start sets the guest kernel up to give free memory back to the host."""

from __future__ import annotations

from pathlib import Path

from pi_sandbox_agent.memory import SETTINGS, give_memory_back


def test_each_setting_is_written(tmp_path: Path) -> None:
    order, huge = tmp_path / "page_reporting_order", tmp_path / "enabled"
    order.write_text("9\n")
    huge.write_text("[always] madvise never\n")
    assert give_memory_back(((str(order), "0"), (str(huge), "madvise"))) == [str(order), str(huge)]
    assert (order.read_text(), huge.read_text()) == ("0\n", "madvise\n")


def test_a_setting_the_kernel_lacks_leaves_the_others(tmp_path: Path) -> None:
    huge = tmp_path / "enabled"
    huge.write_text("[always] madvise never\n")
    absent = str(tmp_path / "absent" / "page_reporting_order")
    assert give_memory_back(((absent, "0"), (str(huge), "madvise"))) == [str(huge)]
    assert not (tmp_path / "absent").exists()
    assert huge.read_text() == "madvise\n"


def test_the_settings_are_the_kernels_files() -> None:
    assert dict(SETTINGS) == {
        "/sys/module/page_reporting/parameters/page_reporting_order": "0",
        "/sys/kernel/mm/transparent_hugepage/enabled": "madvise",
    }
