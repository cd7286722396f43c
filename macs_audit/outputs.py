"""Output paths checked before any work is done, so a bad one fails in a second, not after the audit.

An output file must not be a directory, must not be one of the command's inputs (every file it reads:
macs_audit.inputs lists them), and its folder must exist or be creatable and be writable; an existing
file is replaced only where the command allows it (`force`), an input never. An output folder gets the
same checks for every file the command will write into it. Streams (`-`, /dev/stdout, a character
device, a FIFO) need no checks: they are written as they are (macs_audit.atomic.destination).

An input is a file, a folder or a numbered pattern of files (`shards-{000..099}.tar`), compared through
links: an output that is an input file (its link target, a hard link of it), a file the pattern names, or
any path inside an input folder (a model folder, an image folder, the Hugging Face cache's folder of a
repository) would replace an input. An output that already exists is also compared with every file of the
input folders, so that a link in a folder (a hub snapshot's link into the cache's blobs, an image linked
from elsewhere) is found wherever it points: the first MAX_LINK_ENTRIES entries of each folder (all of a model
folder's or a hub repository's, and of any data folder but a very large tree).
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol, runtime_checkable

from macs_audit.atomic import Destination, destination, output_error
from macs_audit.errors import UsageError

PathLike = str | os.PathLike
# How many entries of an input folder check_links lists. It runs on every rerun whose output exists (a CI
# job with --force), and an ImageNet train tree holds 1.3 million files: listing them all would cost each
# rerun seconds to minutes (more on a network file system). A model folder or a hub repository holds a few
# dozen; an image tree linking to the very file the report is written to is rare, and the path checks (the
# output inside the folder, the output one of the data's files) hold whatever the folder's size.
MAX_LINK_ENTRIES = 100_000


@runtime_checkable
class FilePattern(Protocol):
    """Files named by a pattern (a shard set's `shards-{000000..000099}.tar`, macs_audit.inputs): each one is an
    input, told without listing them all."""

    @property
    def spec(self) -> str:
        """The pattern as given."""

    def matches(self, path: Path) -> bool:
        """Whether `path` (absolute, links resolved) is one of the names."""

    def files(self) -> list[Path]:
        """Every name (for the comparison through links of an output that exists)."""


Inputs = Iterable["PathLike | FilePattern | None"]


def check_file(path: PathLike, *, inputs: Inputs = (), option: str = "--output", force: bool = True) -> Destination:
    """Check one output file before the work; return where it will land. `force=False` refuses an
    existing file (the command's --force allows it); an input is never replaced. Raises UsageError or
    OutputError."""
    dest = destination(path)  # a directory or a block device: UsageError
    if dest.file is None:
        return dest
    sorted_inputs = _Inputs.of(inputs)
    sorted_inputs.check(dest.file, f"{option} {dest.given}", option)
    sorted_inputs.check_links({dest.file: (f"{option} {dest.given}", "")}, option)
    if not force and dest.file.exists():
        raise UsageError(f"{option} {dest.given} already exists; pass --force to replace it")
    _writable_folder(dest.file.parent, dest.given)
    return dest


def check_folder(
    folder: PathLike,
    names: Iterable[str],
    *,
    inputs: Inputs = (),
    option: str = "--out",
    force: bool = True,
    folders: Iterable[str] = (),
) -> Path:
    """Check an output folder and the files `names` the command writes into it, before the work; `folders`:
    the folders it writes whole into it (a Hugging Face save_pretrained folder, replaced as a whole).
    `force=False` refuses a folder that already holds one of them; an input is never replaced. Returns the
    folder."""
    if os.fspath(folder) == "-":
        raise UsageError(f"{option} names a folder for several files; '-' (standard output) cannot be one")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"{option} {folder} is a file; name a folder (it is created if missing)")
    sorted_inputs = _Inputs.of(inputs)
    existing = []
    for name in folders:
        path = folder / name
        sorted_inputs.check_replaced_folder(path, f"{option} {folder}", option, name)
        if path.is_dir():
            existing.append(name)
    targets: dict[Path, tuple[str, str]] = {}
    for name in names:
        dest = destination(folder / name)  # a directory where a file goes: UsageError
        if dest.file is None:
            continue
        sorted_inputs.check(dest.file, f"{option} {folder}", option, name)
        targets[dest.file] = (f"{option} {folder}", name)
        if dest.file.exists():
            existing.append(name)
    sorted_inputs.check_links(targets, option)
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


def _inside(path: PathLike, folder: PathLike) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


@dataclasses.dataclass(frozen=True)
class _Inputs:
    """A command's inputs sorted by kind: files, folders and file patterns that exist (or may)."""

    files: tuple[Path, ...]
    folders: tuple[Path, ...]
    patterns: tuple[FilePattern, ...]

    @classmethod
    def of(cls, inputs: Inputs) -> _Inputs:
        files, folders, patterns = [], [], []
        for item in inputs:
            if isinstance(item, FilePattern):
                patterns.append(item)
            elif item is not None and os.fspath(item) != "-":
                source = Path(item)
                if source.is_dir():
                    folders.append(source)
                elif source.is_file():
                    files.append(source)
        return cls(tuple(files), tuple(folders), tuple(patterns))

    def check(self, target: Path, what: str, option: str, name: str = "") -> None:
        """UsageError when writing `target` (a regular file's path, links resolved) would replace an input file,
        a file of an input pattern, or write into an input folder."""
        written = f" ({name})" if name else ""
        for source in self.files:
            if _same_file(target, source):
                raise UsageError(f"{what} would replace the input {source}{written}; choose another {option}")
        for pattern in self.patterns:
            if pattern.matches(target):
                raise UsageError(
                    f"{what} would replace the input {target} of {pattern.spec}{written}; choose another {option}"
                )
        for folder in self.folders:
            if _inside(target, folder):
                raise UsageError(f"{what} would write into the input folder {folder}{written}; choose another {option}")

    def check_links(self, targets: dict[Path, tuple[str, str]], option: str) -> None:
        """The targets that exist, compared with every file of the input patterns and folders (links followed,
        hard links found): one pass over each folder for all of them. `targets`: path -> (what, name)."""
        keys = {}
        for target, described in targets.items():
            try:
                info = os.stat(target)  # only an existing file can be a link's target or a hard link
            except OSError:
                continue
            keys[(info.st_dev, info.st_ino)] = described
        if not keys:
            return
        members = [source for pattern in self.patterns for source in pattern.files()]
        for source in members:
            try:
                info = os.stat(source)
            except OSError:
                continue
            _refuse_linked(keys.get((info.st_dev, info.st_ino)), source, option)
        for folder in self.folders:
            for key, member in _members(folder, set(keys)):
                _refuse_linked(keys[key], member, option)

    def check_replaced_folder(self, path: Path, what: str, option: str, name: str) -> None:
        """UsageError when replacing the folder `path` as a whole would replace an input: it is an input, holds
        one, or lies inside an input folder."""
        if path.exists() and not path.is_dir():
            return  # a file there: the write fails on it, replacing nothing
        holders = [*self.files, *self.folders, *(Path(os.path.dirname(p.spec) or ".") for p in self.patterns)]
        for source in holders:
            if _inside(source, path):
                shown = "the input" if _same_file(source, path) else f"the folder {path}, which holds the input"
                raise UsageError(f"{what} would replace {shown} {source} ({name}); choose another {option}")
        for folder in self.folders:
            if _inside(path, folder):
                raise UsageError(f"{what} would write into the input folder {folder} ({name}); choose another {option}")


def _refuse_linked(described: tuple[str, str] | None, member: Path, option: str) -> None:
    if described is not None:
        what, name = described
        written = f" ({name})" if name else ""
        raise UsageError(f"{what} would replace the input {member}{written}; choose another {option}")


def _members(folder: Path, keys: set[tuple[int, int]]) -> Iterable[tuple[tuple[int, int], Path]]:
    """(key, path) of each file under `folder` (links followed, as the loaders follow them) that is a file of
    `keys` (st_dev, st_ino). One pass over the folder's entries, made only for outputs that already exist, and
    over its first MAX_LINK_ENTRIES entries only (see there)."""
    seen: set[str] = set()
    stack = [(os.path.realpath(folder), Path(folder))]  # each folder and the path it is shown by
    listed = 0
    while stack and listed < MAX_LINK_ENTRIES:
        current, shown = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            device = os.stat(current).st_dev
            with os.scandir(current) as listing:
                entries = list(itertools.islice(listing, MAX_LINK_ENTRIES - listed))
        except OSError:
            continue
        listed += len(entries)
        for entry in entries:
            try:
                if entry.is_dir():  # a link to a folder too: its files are read
                    stack.append((os.path.realpath(entry.path), shown / entry.name))
                    continue
                # A link's target by stat; any other entry by the inode its listing gives (no call per file).
                found = (entry.stat().st_dev, entry.stat().st_ino) if entry.is_symlink() else (device, entry.inode())
            except OSError:
                continue
            if found in keys:
                yield found, shown / entry.name


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
