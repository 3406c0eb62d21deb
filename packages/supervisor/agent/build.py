#!/usr/bin/env python3
"""Builds the guest agent into one zipapp: dist/agent/sandbox_agent.pyz (standard library only).

Does nothing when the archive already holds the current sources: it records their sha256 in its
BUILD entry. Safe to run concurrently (each build writes a temp file and renames it into place),
which matters because tests may run before or beside `npm run build`.

    python3 agent/build.py [--out PATH] [--force]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipapp
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGE = "pi_sandbox_agent"
DEFAULT_OUT = HERE.parent / "dist" / "agent" / "sandbox_agent.pyz"
# Bumped when the archive's layout changes, so older archives count as stale.
LAYOUT = "2"
# Compiles each module to a hash-checked .pyc beside its source in the archive, which zipimport
# takes instead of compiling the source. zipimport cannot write a cache, so without these every
# agent start compiled the whole agent in the guest: about 2.5 s under software emulation (TCG).
# A guest Python of another minor version rejects the .pyc (its magic differs) and compiles the
# source, as before. A fixed hash seed makes the bytes the same on every build.
COMPILE = """import pathlib, py_compile, sys
for path in sorted(pathlib.Path(sys.argv[1]).rglob("*.py")):
    py_compile.compile(str(path), cfile=str(path) + "c", dfile=path.relative_to(sys.argv[1]).as_posix(),
                       doraise=True, invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
"""


def sources() -> list[Path]:
    return sorted(p for p in (HERE / PACKAGE).rglob("*.py") if "__pycache__" not in p.parts)


def source_sha256(files: list[Path]) -> str:
    digest = hashlib.sha256(("layout %s\n" % LAYOUT).encode())
    for path in files:
        digest.update(path.relative_to(HERE).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def built_sha256(archive: Path) -> str | None:
    try:
        with zipfile.ZipFile(archive) as z:
            words = z.read("BUILD").decode().split()
    except (OSError, KeyError, zipfile.BadZipFile, UnicodeDecodeError):
        return None
    return words[1] if len(words) == 2 and words[0] == "source-sha256" else None


def build(out: Path, force: bool = False) -> bool:
    """Writes the archive unless it is up to date; True when it wrote one."""
    files = sources()
    if not files:
        raise SystemExit("no agent sources under %s" % (HERE / PACKAGE))
    digest = source_sha256(files)
    if not force and built_sha256(out) == digest:
        # Marks the archive as checked: the host client runs this builder only when a source is
        # newer than the archive (see src/agent-script.ts).
        os.utime(out)
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pisb-agent-") as stage:
        for path in files:
            target = Path(stage) / path.relative_to(HERE)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
        (Path(stage) / "BUILD").write_text("source-sha256 %s\n" % digest)
        env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
        subprocess.run([sys.executable, "-S", "-c", COMPILE, stage], env=env, check=True)
        tmp = out.with_name("%s.%d.tmp" % (out.name, os.getpid()))
        try:
            # Stored, not deflated: a guest Python without zlib can still import it.
            zipapp.create_archive(
                stage, tmp, interpreter="/usr/bin/env python3", main="%s.start:entry" % PACKAGE, compressed=False
            )
            os.replace(tmp, out)
        finally:
            tmp.unlink(missing_ok=True)
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="build the guest agent zipapp")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--force", action="store_true", help="rebuild even when up to date")
    opts = parser.parse_args(argv)
    if build(opts.out, opts.force):
        print("built %s" % opts.out, file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
