"""Atomic file writes: write to a temporary file in the target directory, flush it to disk, then rename.

A crash leaves either the old file or the new one, never half of one. The one home of every write
the tool makes (reports, predictions, checkpoints, exported models, released-layout arrays).

What a path names decides how it is written (`destination`):

- a regular file, or a name that does not exist yet: the temporary file `.NAME.XXXXXXXX.tmp` next
  to it, renamed onto it (the new file gets the umask's mode, like any new file);
- a symbolic link: written through, atomically onto the file it points to (the link stays);
- `-`, /dev/stdout, /dev/stderr, /dev/fd/N: streamed to that stream of this process;
- a character device (/dev/null) or a FIFO: streamed to it, never replaced by a file;
- a directory: a UsageError (name a file inside it); a block device or socket: a UsageError.

An operating-system failure (permission denied, read-only file system, disk full) becomes an
OutputError that names the path the caller gave, not the temporary file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from macs_audit.errors import OutputError, UsageError

STDOUT = "-"
TEMP_SUFFIX = ".tmp"
# mkstemp's random part: 8 characters of this alphabet (CPython's tempfile._RandomNameSequence).
_RANDOM = r"[a-z0-9_]{8}"
_FD_PATH = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")
_STD_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}
# errno values that mean "this write cannot succeed here", whichever file the OS names.
_WRITE_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EIO, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}
_HINTS = {
    errno.ENOSPC: "free some space or write elsewhere",
    errno.EROFS: "choose a folder on a writable file system",
    errno.EACCES: "check the folder's permissions or write elsewhere",
    errno.EPERM: "check the file's permissions and attributes or write elsewhere",
    errno.EISDIR: "name a file, not a directory",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EPIPE: "the reading end of the pipe was closed",
}


@dataclasses.dataclass(frozen=True)
class Destination:
    """Where a write to `given` lands: a regular file (`file`, symlinks resolved) or a stream."""

    given: str  # the path as the caller gave it: what messages name
    file: Path | None = None  # the regular file the rename lands on; None for a stream
    fd: int | None = None  # a stream of this process: 1 stdout, 2 stderr, or another open descriptor
    device: Path | None = None  # a character device or FIFO, opened and streamed to

    @property
    def is_stream(self) -> bool:
        return self.file is None

    def describe(self) -> str:
        """How a message names it: 'standard output' for `-`, else the given path."""
        return "standard output" if self.given == STDOUT else self.given


def destination(path: str | os.PathLike) -> Destination:
    """What writing to `path` means (see the module docstring). Raises UsageError for a directory, a block
    device or a socket, and OutputError when the path cannot be inspected (a symlink loop, no permission)."""
    given = os.fspath(path)
    if given == STDOUT:
        return Destination(given, fd=1)
    if given in _STD_STREAMS:
        return Destination(given, fd=_STD_STREAMS[given])
    match = _FD_PATH.match(given)
    if match:
        return Destination(given, fd=int(match.group(1)))
    try:
        info = os.stat(given)  # follows symbolic links
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise output_error(given, exc) from None
    if info is None or stat.S_ISREG(info.st_mode):
        return Destination(given, file=Path(os.path.realpath(given)))
    if stat.S_ISDIR(info.st_mode):
        raise UsageError(f"{given} is a directory; name a file (for example {Path(given) / 'report.json'})")
    if stat.S_ISCHR(info.st_mode) or stat.S_ISFIFO(info.st_mode):
        return Destination(given, device=Path(given))
    raise UsageError(f"{given} is not a regular file, character device or FIFO; refusing to write to it")


def output_error(given: str | os.PathLike, exc: OSError) -> OutputError:
    """A one-line OutputError for an OS failure while writing `given`, with what to do."""
    reason = exc.strerror or type(exc).__name__
    hint = _HINTS.get(exc.errno or 0)
    return OutputError(f"cannot write {os.fspath(given)}: {reason}" + (f" ({hint})" if hint else ""))


def _file_mode() -> int:
    """The mode an ordinary new file gets here (0666 less the umask); mkstemp's own is 0600."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _is_write_failure(exc: OSError, *paths: Path) -> bool:
    """Whether `exc` is the OS refusing this write (not, say, a failure to read some input inside the block)."""
    names = {os.fspath(p) for p in paths}
    return exc.filename in names or exc.filename2 in names or (exc.filename is None and exc.errno in _WRITE_ERRNOS)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path for the caller to write; if the block succeeds, land it at `path`.

    A regular file is replaced atomically (flushed, then renamed); a stream gets the bytes copied.
    """
    dest = destination(path)
    if dest.file is None:
        with _streamed(dest) as tmp:
            yield tmp
        return
    target = dest.file
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=TEMP_SUFFIX, dir=target.parent)
        os.close(fd)
    except OSError as exc:
        raise output_error(dest.given, exc) from None
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:  # the bytes reach the disk before the name does
            os.fsync(fh.fileno())
        os.chmod(tmp, _file_mode())
        os.replace(tmp, target)
    except OSError as exc:
        if _is_write_failure(exc, tmp, target, target.parent):
            raise output_error(dest.given, exc) from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


@contextlib.contextmanager
def _streamed(dest: Destination) -> Iterator[Path]:
    """A temporary file in the system's temporary folder, copied to the stream when the block succeeds."""
    fd, name = tempfile.mkstemp(prefix=".macs-audit-stream.", suffix=TEMP_SUFFIX)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb") as src:
            if dest.fd in (1, 2):
                stream = sys.stdout if dest.fd == 1 else sys.stderr
                stream.flush()
                shutil.copyfileobj(src, stream.buffer)
                stream.buffer.flush()
            elif dest.fd is not None:
                with open(dest.fd, "wb", closefd=False) as out:
                    shutil.copyfileobj(src, out)
            else:
                assert dest.device is not None
                with open(dest.device, "wb") as out:
                    shutil.copyfileobj(src, out)
    except OSError as exc:
        if exc.filename in (None, os.fspath(tmp), os.fspath(dest.device or "")):
            raise output_error(dest.describe(), exc) from None
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | os.PathLike, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def temporary_pattern(name: str) -> re.Pattern[str]:
    """The names of the temporary files the writer makes for a file called `name`."""
    return re.compile(rf"^\.{re.escape(name)}\.{_RANDOM}{re.escape(TEMP_SUFFIX)}$")


def remove_stale_temporaries(folder: str | os.PathLike, names: Iterable[str], before: float) -> list[Path]:
    """Remove what a killed run of the writer left in `folder`: regular files `.NAME.XXXXXXXX.tmp` for the
    given output `names`, last modified before `before` (a time.time() value). Nothing else is touched.
    Returns the paths removed."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    patterns = [temporary_pattern(name) for name in names]
    removed = []
    for entry in os.scandir(folder):
        if not any(p.match(entry.name) for p in patterns):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(info.st_mode) and info.st_mtime < before:
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except FileNotFoundError:  # removed meanwhile
            continue
        except OSError as exc:
            raise output_error(entry.path, exc) from None
    return removed


@contextlib.contextmanager
def all_or_nothing(paths: Iterable[str | os.PathLike]) -> Iterator[None]:
    """Outputs a run writes one by one (the files and save_pretrained folders of an output folder), kept or
    dropped together: if the block fails (an error, an interrupt), each of `paths` it created is removed and
    each it replaced is put back as it was, and each folder it created that is left empty; when it succeeds,
    what was replaced is dropped. An existing file is kept aside as a hard link (a copy where the file system
    has none) in a hidden folder beside it, which keeps its bytes since every writer here lands a new file by
    renaming it onto the old one; an existing folder is renamed aside before the block, which replaces it whole."""
    targets = []
    for path in paths:
        path = Path(path)
        dest = path if path.is_dir() else destination(path).file  # a file written through its link
        if dest is not None:
            targets.append(dest)
    created_folders = _missing_folders({target.parent for target in targets})
    kept: list[tuple[Path, Path]] = []  # (output, the earlier version set aside)
    asides: dict[Path, Path] = {}  # a folder of kept versions per output folder
    new: list[Path] = []
    try:
        for target in targets:
            if not target.exists():
                new.append(target)
                continue
            if target.parent not in asides:
                asides[target.parent] = Path(tempfile.mkdtemp(prefix=".macs-audit-replaced.", dir=target.parent))
            aside = asides[target.parent] / target.name
            if target.is_dir():  # a link to a folder too: the link is set aside, as save_pretrained replaces it
                target.rename(aside)
            else:
                try:
                    os.link(target, aside)
                except OSError:
                    shutil.copy2(target, aside)
            kept.append((target, aside))
    except OSError as exc:
        _restore(kept, [], asides.values(), [])
        raise output_error(exc.filename or targets[0], exc) from None
    try:
        yield
    except BaseException:
        _restore(kept, new, asides.values(), created_folders)
        raise
    for aside in asides.values():
        shutil.rmtree(aside, ignore_errors=True)


def _missing_folders(folders: Iterable[Path]) -> list[Path]:
    """The folders of `folders` and their parents that do not exist yet, deepest first."""
    missing: set[Path] = set()
    for folder in folders:
        folder = Path(os.path.abspath(folder))
        while not folder.exists() and folder != folder.parent:
            missing.add(folder)
            folder = folder.parent
    return sorted(missing, key=lambda p: len(p.parts), reverse=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _restore(kept: list[tuple[Path, Path]], new: list[Path], asides: Iterable[Path], folders: list[Path]) -> None:
    """Undo a failed block of all_or_nothing: as much as can be undone (an error here would hide the run's); an
    earlier version that cannot be put back stays in its hidden folder."""
    for target in new:
        with contextlib.suppress(OSError):
            _remove(target)
    restored = True
    for target, aside in kept:
        try:
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target)
            os.replace(aside, target)
        except OSError:
            restored = False
    for aside in asides if restored else ():
        shutil.rmtree(aside, ignore_errors=True)
    for folder in folders:
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when empty: a checkpoint kept for --resume keeps its folder
