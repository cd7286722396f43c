"""Output paths checked before any work is done, so a bad one fails in a second, not after the audit.

An output file must not be a directory, must not be one of the command's inputs (the model, its
sidecar, the data, a report or config it reads), and its folder must exist or be creatable and be
writable; an existing file is replaced only where the command allows it (`force`). An output
folder gets the same checks for every file the command will write into it. Streams (`-`,
/dev/stdout, a character device, a FIFO) need no checks: they are written as they are
(macs_audit.atomic.destination).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable
from pathlib import Path

from macs_audit.atomic import Destination, destination, output_error
from macs_audit.errors import UsageError

PathLike = str | os.PathLike


def check_file(
    path: PathLike, *, inputs: Iterable[PathLike | None] = (), option: str = "--output", force: bool = True
) -> Destination:
    """Check one output file before the work; return where it will land. `force=False` refuses an
    existing file (the command's --force allows it). Raises UsageError or OutputError."""
    dest = destination(path)  # a directory or a block device: UsageError
    if dest.file is None:
        return dest
    _not_an_input(dest.file, inputs, f"{option} {dest.given}", option)
    if not force and dest.file.exists():
        raise UsageError(f"{option} {dest.given} already exists; pass --force to replace it")
    _writable_folder(dest.file.parent, dest.given)
    return dest


def check_folder(
    folder: PathLike,
    names: Iterable[str],
    *,
    inputs: Iterable[PathLike | None] = (),
    option: str = "--out",
    force: bool = True,
) -> Path:
    """Check an output folder and the files `names` the command writes into it, before the work.
    `force=False` refuses a folder that already holds one of them. Returns the folder."""
    if os.fspath(folder) == "-":
        raise UsageError(f"{option} names a folder for several files; '-' (standard output) cannot be one")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder} is a file; name a folder (it is created if missing)")
    existing = []
    for name in names:
        dest = destination(folder / name)  # a directory where a file goes: UsageError
        if dest.file is None:
            continue
        _not_an_input(dest.file, inputs, f"{option} {folder}", option, name)
        if dest.file.exists():
            existing.append(name)
    if existing and not force:
        raise UsageError(
            f"{option} {folder} already holds {', '.join(existing)}; pass --force to replace "
            f"{'it' if len(existing) == 1 else 'them'} or choose another {option}"
        )
    _writable_folder(folder, folder)
    return folder


def check_distinct(outputs: Iterable[tuple[str, PathLike | None]]) -> None:
    """Two outputs must not be the same file (e.g. -o and --save-predictions): (option, path) pairs.
    Streams may repeat (two formats to standard output follow each other)."""
    seen: dict[str, str] = {}
    for option, path in outputs:
        if path is None:
            continue
        dest = destination(path)
        if dest.file is None:
            continue
        key = os.fspath(dest.file)
        if key in seen:
            what = f"{option} {path} is given twice" if seen[key] == option else f"{seen[key]} and {option} name {path}"
            raise UsageError(f"{what}; give each output its own file")
        seen[key] = option


def _same_file(a: Path, b: Path) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)  # hard links
    except OSError:
        return False


def _not_an_input(target: Path, inputs: Iterable[PathLike | None], what: str, option: str, name: str = "") -> None:
    for item in inputs:
        if item is None or os.fspath(item) == "-":
            continue
        source = Path(item)
        if source.exists() and source.is_file() and _same_file(target, source):
            written = f" ({name})" if name else ""
            raise UsageError(f"{what} would replace the input {source}{written}; choose another {option}")


def _writable_folder(folder: Path, given: PathLike) -> None:
    """The nearest existing ancestor of `folder` must be a folder this process can write into."""
    probe = Path(os.path.abspath(folder))
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        raise UsageError(f"cannot write {os.fspath(given)}: {probe} is a file, not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        read_only = hasattr(os, "statvfs") and os.statvfs(probe).f_flag & os.ST_RDONLY
        code = errno.EROFS if read_only else errno.EACCES
        raise output_error(given, OSError(code, os.strerror(code)))
