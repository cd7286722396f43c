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
Only uncompressed tars are read (what ShardWriter writes).
"""

from __future__ import annotations

import dataclasses
import io
import re
import tarfile
from pathlib import Path
from typing import Any, cast

import numpy as np

from macs_audit.data.sources import UNLABELED, Source
from macs_audit.errors import InputError, UsageError
from macs_audit.images import IMAGE_SUFFIXES, open_image
from macs_audit.models.preprocessing import fit_image

FORMAT = "shards"
BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")
MAX_SHARDS = 1_000_000
MAX_LABEL_BYTES = 64  # a .cls member holds a decimal integer
# webdataset's key rule: the member name up to the first dot of its base name, the rest its field.
KEY = re.compile(r"^((?:.*/|)[^./]+)\.([^/]*)$")
IMAGE_FIELDS = tuple(s.lstrip(".") for s in IMAGE_SUFFIXES)
CLASSES_FILE = "classes.txt"  # the shard set's class names, beside its shards (module docstring)
MAX_CLASSES_BYTES = 16 * 1024 * 1024


def is_shard_spec(path: str | Path) -> bool:
    """A shard pattern (`shards-{000000..000099}.tar`) or one `.tar` file."""
    text = str(path)
    return bool(BRACES.search(text)) or text.endswith(".tar")


def expand(spec: str) -> list[Path]:
    """`a-{000..002}.tar` -> a-000.tar, a-001.tar, a-002.tar (each brace range zero-padded to its first bound's
    width; several ranges expand as nested loops, the first outermost)."""
    match = BRACES.search(spec)
    if match is None:
        return [Path(spec)]
    lo, hi = int(match.group(1)), int(match.group(2))
    if hi < lo or hi - lo >= MAX_SHARDS:
        raise UsageError(f"{spec}: the range {{{match.group(1)}..{match.group(2)}}} names no shard or too many")
    width = len(match.group(1))
    head, tail = spec[: match.start()], spec[match.end() :]
    return [path for i in range(lo, hi + 1) for path in expand(f"{head}{i:0{width}d}{tail}")]


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


def _label(tar: tarfile.TarFile, member: tarfile.TarInfo, where: str) -> int:
    if member.size > MAX_LABEL_BYTES:
        raise InputError(f"{where}: a .cls member of {member.size} bytes; it holds one class index")
    handle = tar.extractfile(member)
    text = handle.read().decode("utf-8", "replace").strip() if handle is not None else ""
    if not text.isdigit():
        raise InputError(f"{where}: the .cls member holds {text[:20]!r}, not a class index")
    return int(text)


def index_shards(paths: list[Path], labeled: bool = True) -> ShardIndex:
    """Read every shard's headers in order (module docstring); InputError for a sample without an image or,
    where `labeled`, without a `.cls` label."""
    shard, offset, size, names, labels = [], [], [], [], []
    for number, path in enumerate(paths):
        if not path.is_file():
            raise InputError(f"shard not found: {path}")
        try:
            with tarfile.open(path, "r:") as tar:
                samples: dict[str, dict] = {}
                for member in tar:  # headers in order; the data between them is seeked over
                    match = KEY.match(member.name) if member.isfile() else None
                    if match is None:
                        continue
                    key, field = match.group(1), match.group(2).lower()
                    sample = samples.setdefault(key, {})
                    if field in IMAGE_FIELDS and "image" not in sample:
                        sample["image"] = member
                    elif field == "cls":
                        sample["label"] = _label(tar, member, f"{path}: {member.name}")
                for key, sample in samples.items():
                    if "image" not in sample:
                        raise InputError(f"{path}: sample {key!r} has no image ({', '.join(IMAGE_FIELDS)})")
                    if labeled and "label" not in sample:
                        raise InputError(f"{path}: sample {key!r} has no .cls label")
                    member = sample["image"]
                    shard.append(number)
                    offset.append(member.offset_data)
                    size.append(member.size)
                    names.append(member.name)
                    labels.append(sample.get("label", UNLABELED))
        except tarfile.ReadError as exc:
            raise InputError(f"{path} is not an uncompressed tar shard: {exc}") from None
        except OSError as exc:
            raise InputError(f"cannot read shard {path}: {exc.strerror or exc}") from None
    if not names:
        raise InputError(f"{paths[0]}: the shards hold no samples")
    return ShardIndex(
        tuple(map(str, paths)),
        np.asarray(shard, dtype=np.int32),
        np.asarray(offset, dtype=np.int64),
        np.asarray(size, dtype=np.int64),
        tuple(names),
        np.asarray(labels, dtype=np.int64),
    )


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
    if len(set(names)) < len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InputError(f"{path}: a class named twice: {', '.join(twice[:5])}")
    return names


def load_shards(
    spec: str,
    image_size: tuple[int, int] | None,
    labeled: bool = True,
    crop_pct: float | None = None,
    interpolation: str | None = None,
    crop_offset: str = "round",
) -> Source:
    """The shards `spec` names as a source (module docstring); images sized as load_imagefolder sizes them."""
    paths = expand(spec)
    index = index_shards(paths, labeled)
    if image_size is None:  # the first image's size, as for a folder
        width, height = open_image(_as_path(ShardFetch(index, 1, 1).read(0))).size
        image_size = (height, width)
    fetch = ShardFetch(index, image_size[0], image_size[1], crop_pct, interpolation, crop_offset)
    if not labeled or (index.labels == UNLABELED).all():
        return Source(spec, FORMAT, np.full(len(index.names), UNLABELED, dtype=np.int64), [], fetch)
    return Source(spec, FORMAT, index.labels, class_names(paths, index.labels), fetch)
