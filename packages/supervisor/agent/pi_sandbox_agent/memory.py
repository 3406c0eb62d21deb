"""Guest memory settings that let an idle VM give its memory back to the host.

Every VM has a memory balloon with free page reporting: the guest kernel tells the host which of
its pages are free, and QEMU drops them from its resident memory. Two kernel defaults kept most of
that from happening, so the daemon changes them at its start, once per boot (a resumed guest keeps
them):

- The kernel reports only free blocks of at least `page_reporting_order` pages: 2 MiB on x86-64,
  which Linux 6.1 sets when the balloon registers, overriding the boot option of the same name.
  What a guest frees after running anything for a while is scattered among pages still in use, so
  little of it formed such blocks. Set to 0, every free page is reported. The kernel batches the
  reports and sends them two seconds after a free; a page the guest takes again costs the host one
  zero-filled page fault.
- Transparent huge pages "always" backs a process's heap with 2 MiB pages, and the kernel's
  khugepaged merges partly used ranges into more of them every few seconds: an idle Python
  process then holds whole 2 MiB pages of which it uses a little. "madvise" keeps huge pages for
  programs that ask for them (databases, JVMs) and spares the rest.
"""

from __future__ import annotations

#: The kernel's reporting threshold, as a page order (0: every free page is reported).
REPORTING_ORDER = "/sys/module/page_reporting/parameters/page_reporting_order"
#: When the kernel backs anonymous memory with transparent huge pages.
HUGE_PAGES = "/sys/kernel/mm/transparent_hugepage/enabled"

SETTINGS = ((REPORTING_ORDER, "0"), (HUGE_PAGES, "madvise"))


def give_memory_back(settings: tuple[tuple[str, str], ...] = SETTINGS) -> list[str]:
    """Applies `settings` (sysfs path, value), each on its own; returns the paths that took. A
    kernel without one (no balloon driver, no huge pages) or a refused write leaves it as it was."""
    applied = []
    for path, value in settings:
        try:
            with open(path, "w") as f:
                f.write(value + "\n")
        except OSError:
            continue
        applied.append(path)
    return applied
