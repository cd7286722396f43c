"""Atomic file writes: write to a temporary file in the target directory, flush it to disk, then rename.

A crash leaves either the old file or the new one, never half of one. The one home of every write
the tool makes (reports, predictions, checkpoints, exported models, released-layout arrays).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _file_mode() -> int:
    """The mode an ordinary new file gets here (0666 less the umask); mkstemp's own is 0600."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; if the block succeeds, flush it and rename it onto `path`."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:  # the bytes reach the disk before the name does
            os.fsync(fh.fileno())
        os.chmod(tmp_path, _file_mode())
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))
