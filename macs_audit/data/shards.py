"""WebDataset tar shards as a source: `shards-{000000..000099}.tar`, each sample an image and its `.cls` label, as
the `webdataset` package writes them (`ShardWriter`, `TarWriter`).

The shards are indexed once, in order: every member's header is read (tar headers only; the image data is
skipped over) and each `.cls` member's few bytes; a sample's members share a key (the member name up to the
first dot of its base name, webdataset's rule). The source then holds, per image, its shard and the offset and
size of its bytes, and its label: memory grows with the number of images by a few integers each, never with
their pixels. A batch's images are read at their offsets and decoded by the pipeline of image folders
(`images.open_image`, then `models.preprocessing.fit_image` to the model's input), so a shard set scores
exactly as the same images as a folder. Batches are read in order, cut every --batch-size positions as for
any source; under torchrun a batch is the rank's that owns the shard of its first image (data/batching.py,
`owned_starts`), and the merge is the exact one of every source.

Class names: a `classes.txt` beside the shards (in the first shard's folder), one name per line, line i naming
label i (e.g. the WordNet ids of an ImageNet-style folder in its sorted order, as an ImageFolder numbers its
classes), gives the set the names a folder would have, so that `--shift-data` maps it by WordNet id or by the
model's class names as it maps a folder (data/label_space.py); it must name every label the shards hold.
Without it the names are "0".."K-1", K one more than the largest label (output indices, or --class-map).
A sample's `.json` member, one JSON object of numbers, text, booleans or nulls (at most MAX_JSON_BYTES), is its
metadata: read while indexing, held by the source (`Source.metadata`, typed and joined by data/metadata.py).
Only uncompressed tars are read (what ShardWriter writes).

A damaged shard (cut short inside a header or a member's data, or not ending in the tar's end-of-archive
block) is an InputError naming the shard and the byte or member; with `skip_damaged` it is left out whole and
named in the index's `skipped` (the report's `data.damaged_shards_skipped` counts them). A pattern names at
most MAX_SHARDS shards, counted before it is expanded; a `.cls` label is a decimal integer below
`models.config.MAX_CLASSES`.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
import json
import re
import tarfile
from pathlib import Path
from typing import Any, cast

import numpy as np

from macs_audit.data.sources import UNLABELED, Source
from macs_audit.errors import InputError, UsageError
from macs_audit.images import IMAGE_SUFFIXES, open_image
from macs_audit.models.config import MAX_CLASSES
from macs_audit.models.preprocessing import fit_image

FORMAT = "shards"
BRACES = re.compile(r"\{([0-9]+)\.\.([0-9]+)\}")  # ASCII digits: the names are written with them
MAX_SHARDS = 1_000_000  # names a pattern may expand to, all its ranges together
MAX_BOUND_DIGITS = 18  # characters of a range's bound: a longer one names too many shards or a needless width
MAX_LABEL_BYTES = 64  # a .cls member holds a decimal integer
LABEL = re.compile(r"[0-9]+")  # not str.isdigit(), which accepts "²" that int() refuses
BLOCK = tarfile.BLOCKSIZE  # a tar ends in a block of NULs where the next header would be
USTAR, USTAR_AT = b"ustar", 257  # the magic of a POSIX tar header, at its offset in the header
# webdataset's key rule: the member name up to the first dot of its base name, the rest its field.
KEY = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")
IMAGE_FIELDS = tuple(s.lstrip(".") for s in IMAGE_SUFFIXES)
MAX_JSON_BYTES = 64 * 1024  # a sample's .json member: a few metadata fields (data/metadata.py)
CLASSES_FILE = "classes.txt"  # the shard set's class names, beside its shards (module docstring)
MAX_CLASSES_BYTES = 16 * 1024 * 1024


def is_shard_spec(path: str | Path) -> bool:
    """A shard pattern (`shards-{000000..000099}.tar`) or one `.tar` file."""
    text = str(path)
    return bool(BRACES.search(text)) or text.endswith(".tar")


def expand(spec: str) -> list[Path]:
    """`a-{000..002}.tar` -> a-000.tar, a-001.tar, a-002.tar (each brace range zero-padded to its first bound's
    width; several ranges expand as nested loops, the first outermost). The names are counted before they are
    made: more than MAX_SHARDS is a UsageError."""
    ranges = list(BRACES.finditer(spec))
    count = 1
    for braces in ranges:
        first, last = braces.group(1), braces.group(2)
        if max(len(first), len(last)) > MAX_BOUND_DIGITS or int(last) < int(first):
            raise UsageError(f"{spec}: the range {{{first}..{last}}} names no shard or too many")
        count *= int(last) - int(first) + 1
        if count > MAX_SHARDS:
            raise UsageError(f"{spec}: names more than {MAX_SHARDS:,} shards; the limit is {MAX_SHARDS:,}")
    cuts = [0, *(i for b in ranges for i in (b.start(), b.end())), len(spec)]
    texts = [spec[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True)]  # the text around the ranges
    numbers = [[f"{i:0{len(b.group(1))}d}" for i in range(int(b.group(1)), int(b.group(2)) + 1)] for b in ranges]
    return [
        Path("".join(part for pair in itertools.zip_longest(texts, chosen, fillvalue="") for part in pair))
        for chosen in itertools.product(*numbers)
    ]


class NamedBytes(io.BytesIO):
    """An image's bytes that messages name as `shard:member` (open_image writes its path's str)."""

    def __init__(self, data: bytes, name: str):
        super().__init__(data)
        self.label = name

    def __str__(self) -> str:
        return self.label


def _as_path(data: NamedBytes) -> Any:
    """For open_image, which PIL has open a file object as it opens a path (its messages name it by str)."""
    return cast(Any, data)


@dataclasses.dataclass(frozen=True)
class ShardIndex:
    """Per image: its shard, the offset and size of its bytes there, its member name; and its label."""

    shards: tuple[str, ...]
    shard: np.ndarray  # int32
    offset: np.ndarray  # int64
    size: np.ndarray  # int64
    names: tuple[str, ...]
    labels: np.ndarray  # int64; UNLABELED where a sample has no .cls
    skipped: tuple[str, ...] = ()  # damaged shards left out (skip_damaged), each "shard: what is wrong"
    # Per image, its .json member's fields (None where it has none); () where no sample has one.
    metadata: tuple[dict[str, Any] | None, ...] = ()


class DamagedShardError(InputError):
    """A shard cut short or otherwise not a whole tar: the one fault `skip_damaged` skips."""


def _label(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> int:
    if member.size > MAX_LABEL_BYTES:
        raise InputError(f"{where}: a .cls member of {member.size} bytes; it holds one class index")
    handle = tar.extractfile(member)
    text = handle.read().decode("utf-8", "replace").strip() if handle is not None else ""
    if not LABEL.fullmatch(text) or int(text) >= MAX_CLASSES:
        raise InputError(f"{where}: the .cls member holds {text[:30]!r}, not a class index (0 to {MAX_CLASSES - 1:,})")
    return int(text)


def _samples(path: Path, labeled: bool) -> dict[str, dict]:
    """One shard's samples by key, each its image member and label; DamagedShardError where the tar is cut short
    or does not end in its end-of-archive block (tarfile stops at a bad header after the first without a word)."""
    with open(path, "rb") as fh:
        length = fh.seek(0, io.SEEK_END)
        fh.seek(0)
        try:
            tar = tarfile.open(fileobj=fh, mode="r:")  # reads the first member's headers
        except tarfile.ReadError as exc:
            fh.seek(USTAR_AT)
            if fh.read(len(USTAR)) == USTAR:  # a tar's first header, the rest of it or what follows missing
                raise DamagedShardError(f"{path}: damaged shard: {exc} in its first member") from None
            raise
        try:
            samples = _members(tar, path, length)
        except tarfile.ReadError as exc:  # a header cut short after another header, data cut short
            raise DamagedShardError(f"{path}: damaged shard: {exc} after byte {tar.offset:,}") from None
        fh.seek(tar.offset)
        if fh.read(BLOCK) != bytes(BLOCK):  # where the headers stopped: a header cut short, or no end
            raise DamagedShardError(
                f"{path}: damaged shard: at byte {tar.offset:,} neither a whole tar header nor the tar's end"
            )
    for key, sample in samples.items():
        if "image" not in sample:
            raise InputError(f"{path}: sample {key!r} has no image ({', '.join(IMAGE_FIELDS)})")
        if labeled and "label" not in sample:
            raise InputError(f"{path}: sample {key!r} has no .cls label")
    return samples


def _members(tar: tarfile.TarFile, path: Path, length: int) -> dict[str, dict]:
    """The samples of `tar` (the shard `path`, `length` bytes) by key, from its headers in order: the data between
    them is seeked over, and a member whose data would pass the end of the file is a DamagedShardError."""
    samples: dict[str, dict] = {}
    for member in tar:
        if member.offset_data + member.size > length:
            raise DamagedShardError(
                f"{path}: damaged shard: member {member.name!r} is cut short (its data would end at byte "
                f"{member.offset_data + member.size:,}; the file ends at {length:,})"
            )
        match = KEY.match(member.name) if member.isfile() else None
        if match is None:
            continue
        key, field = match.group(1), match.group(2).lower()
        sample = samples.setdefault(key, {})
        if field in IMAGE_FIELDS and "image" not in sample:
            sample["image"] = member
        elif field == "cls":
            sample["label"] = _label(tar, member, f"{path}: {member.name}")
        elif field == "json":
            sample["metadata"] = _fields(tar, member, f"{path}:{member.name}")
    return samples


def _fields(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> dict[str, Any]:
    """A .json member's metadata: one JSON object of numbers, text, booleans or nulls, at most MAX_JSON_BYTES."""
    if member.size > MAX_JSON_BYTES:
        limit = f"{MAX_JSON_BYTES // 1024} KiB"
        raise InputError(f"{where}: a .json member of {member.size:,} bytes; sample metadata holds at most {limit}")
    handle = tar.extractfile(member)
    data = handle.read() if handle is not None else b""
    try:
        fields = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text at byte {exc.start:,}; write the .json member as UTF-8") from None
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else getattr(exc, "msg", str(exc))
        raise InputError(f"{where}: not JSON ({why}); a sample's .json holds one object of metadata") from None
    if not isinstance(fields, dict):
        raise InputError(f"{where}: holds a JSON {type(fields).__name__}; a sample's .json holds one object")
    for field, value in fields.items():
        if isinstance(value, (list, dict)):
            raise InputError(
                f"{where}: field {field!r} holds a nested value ({type(value).__name__}); metadata fields are "
                "numbers or text"
            )
    return fields


def index_shards(paths: list[Path], labeled: bool = True, skip_damaged: bool = False) -> ShardIndex:
    """Read every shard's headers in order (module docstring); InputError for a sample without an image or,
    where `labeled`, without a `.cls` label; DamagedShardError for a damaged shard, unless `skip_damaged`."""
    shard, offset, size, names, labels, skipped = [], [], [], [], [], []
    metadata: list[dict[str, Any] | None] = []
    for number, path in enumerate(paths):
        if not path.is_file():
            raise InputError(f"shard not found: {path}")
        try:
            samples = _samples(path, labeled)
        except DamagedShardError as exc:
            if not skip_damaged:
                raise DamagedShardError(f"{exc}; pass --skip-damaged-shards to leave it out") from None
            skipped.append(str(exc))
            continue
        except tarfile.ReadError as exc:
            raise InputError(f"{path} is not an uncompressed tar shard: {exc}") from None
        except OSError as exc:
            raise InputError(f"cannot read shard {path}: {exc.strerror or exc}") from None
        for sample in samples.values():
            member = sample["image"]
            shard.append(number)
            offset.append(member.offset_data)
            size.append(member.size)
            names.append(member.name)
            labels.append(sample.get("label", UNLABELED))
            metadata.append(sample.get("metadata"))
    if not names:
        raise InputError(f"{paths[0]}: the shards hold no samples" + (f" ({len(skipped)} damaged)" if skipped else ""))
    return ShardIndex(
        tuple(map(str, paths)),
        np.asarray(shard, dtype=np.int32),
        np.asarray(offset, dtype=np.int64),
        np.asarray(size, dtype=np.int64),
        tuple(names),
        np.asarray(labels, dtype=np.int64),
        tuple(skipped),
        tuple(metadata) if any(fields is not None for fields in metadata) else (),
    )


def metadata_columns(index: ShardIndex) -> dict[str, np.ndarray]:
    """The samples' .json fields as columns (first-seen order), None where a sample lacks the field: per image as
    the source's `metadata` (data/metadata.py types them)."""
    samples = [fields or {} for fields in index.metadata]
    names = dict.fromkeys(field for fields in samples for field in fields)
    columns = {}
    for name in names:
        column = np.empty(len(samples), dtype=object)
        column[:] = [fields.get(name) for fields in samples]
        columns[name] = column
    return columns


@dataclasses.dataclass(frozen=True)
class ShardFetch:
    """Images by index, read at their offsets and brought to (h, w) by the image folders' pipeline. A plain
    picklable object, for DataLoader worker processes."""

    index: ShardIndex
    h: int
    w: int
    crop_pct: float | None = None
    interpolation: str | None = None
    crop_offset: str = "round"  # as for an image folder (models/preprocessing.fit_image)

    def read(self, i: int, handles: dict[int, Any] | None = None) -> NamedBytes:
        """Image i's bytes, from an open handle of its shard in `handles` (opened there if missing)."""
        ix = self.index
        shard = int(ix.shard[i])
        path = ix.shards[shard]
        try:
            fh = handles.get(shard) if handles is not None else None
            if fh is None:
                fh = open(path, "rb")  # noqa: SIM115 - closed by the caller that keeps it, or below
                if handles is not None:
                    handles[shard] = fh
            try:
                fh.seek(int(ix.offset[i]))
                data = fh.read(int(ix.size[i]))
            finally:
                if handles is None:
                    fh.close()
        except OSError as exc:
            raise InputError(f"cannot read shard {path}: {exc.strerror or exc}") from None
        return NamedBytes(data, f"{path}:{ix.names[i]}")

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), self.h, self.w, 3), dtype=np.uint8)
        handles: dict[int, Any] = {}  # each shard opened once per batch (a batch is mostly one shard, in order)
        try:
            for row, i in enumerate(np.asarray(idx).tolist()):
                image = np.asarray(open_image(_as_path(self.read(i, handles))))
                out[row] = fit_image(image, (self.h, self.w), self.crop_pct, self.interpolation, self.crop_offset)
        finally:
            for handle in handles.values():
                handle.close()
        return out


def class_names(paths: list[Path], labels: np.ndarray) -> list[str]:
    """The names in `classes.txt` beside the first shard, else "0".."K-1" (module docstring); InputError for a file
    that does not name every label, or names one class twice."""
    k = int(labels.max()) + 1
    path = paths[0].parent / CLASSES_FILE
    if not path.is_file():
        return [str(c) for c in range(k)]
    try:
        if path.stat().st_size > MAX_CLASSES_BYTES:
            raise InputError(f"{path}: larger than {MAX_CLASSES_BYTES // 2**20} MiB; not a list of class names")
        names = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {path} as UTF-8 text: {exc}") from None
    if len(names) < k:
        raise InputError(f"{path} names {len(names)} classes but the shards' labels go up to {k - 1}; one name a line")
    seen: set[str] = set()
    for name in names:  # linear: a file of one name a million times is refused at once
        if name in seen:  # the image folders' rule (image_tree.class_folder_names), with the file named
            raise InputError(f"{path}: class name {name!r} appears twice; classes need distinct names")
        seen.add(name)
    return names


def load_shards(
    spec: str,
    image_size: tuple[int, int] | None,
    labeled: bool = True,
    crop_pct: float | None = None,
    interpolation: str | None = None,
    crop_offset: str = "round",
    skip_damaged: bool = False,
) -> Source:
    """The shards `spec` names as a source (module docstring); images sized as load_imagefolder sizes them;
    damaged shards left out where `skip_damaged` (the source's `fetch.index.skipped` names them)."""
    paths = expand(spec)
    index = index_shards(paths, labeled, skip_damaged)
    metadata = metadata_columns(index)
    index = dataclasses.replace(index, metadata=())  # the source holds it: workers receive the fetch without it
    if image_size is None:  # the first image's size, as for a folder
        width, height = open_image(_as_path(ShardFetch(index, 1, 1).read(0))).size
        image_size = (height, width)
    fetch = ShardFetch(index, image_size[0], image_size[1], crop_pct, interpolation, crop_offset)
    if not labeled or (index.labels == UNLABELED).all():
        unlabeled = np.full(len(index.names), UNLABELED, dtype=np.int64)
        return Source(spec, FORMAT, unlabeled, [], fetch, metadata=metadata)
    return Source(spec, FORMAT, index.labels, class_names(paths, index.labels), fetch, metadata=metadata)
