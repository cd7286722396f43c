"""Data sources: uint8 images (N, H, W, C), int64 labels, class names.

Formats: the built-in CIFAR-10 test set (package data), CIFAR-10/100 python-batches directories
(`cifar-10-batches-py`, `cifar-100-python`), `.npz` files with `x` and `y` (and optionally
class names: `class_names`, `label_names`, `fine_label_names`, `fine_names` or `classes`), and
ImageFolder directories (one sub-directory of images per class).
CIFAR-10-C / CIFAR-100-C directories are read by `macs_audit.data.npy_layout` (through `data.released`).

Where labels are not needed (OOD data, unlabeled target images: `labeled=False`), an npz with only `x` and
a folder of images without class sub-directories are read too; their images carry the label UNLABELED and
the source has no class names.
"""

from __future__ import annotations

import dataclasses
import pickle
from importlib import resources
from pathlib import Path
from typing import Callable

import numpy as np

from macs_audit.data.npz import NpzArchive, open_npz
from macs_audit.errors import InputError, UsageError
from macs_audit.images import IMAGE_SUFFIXES, open_image
from macs_audit.models.config import MAX_CLASSES  # a label at or above it is an id or a hash
from macs_audit.models.preprocessing import fit_image

CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
FORMATS = ("auto", "builtin", "npz", "cifar", "imagefolder")
# Where npz files keep class names, in label order: ours, then CIFAR's own (`label_names` of CIFAR-10,
# `fine_label_names` of CIFAR-100) and the names other exporters use.
NPZ_CLASS_NAME_KEYS = ("class_names", "label_names", "fine_label_names", "fine_names", "classes")
UNLABELED = -1  # the label of every image of a source read without labels
NPZ_METADATA_PREFIX = "meta_"  # an .npz's per-image metadata arrays: meta_<name> (N,)


@dataclasses.dataclass
class Source:
    """A labelled image set. `fetch(indices)` returns those images as uint8 (n, H, W, C)."""

    name: str
    format: str
    labels: np.ndarray
    class_names: list[str]
    fetch: Callable[[np.ndarray], np.ndarray]
    indices: np.ndarray | None = None  # a subset of the underlying set, if any
    # False where the class names are placeholders (an .npz without names): its classes then meet the model's
    # outputs by position only (data/label_space.py), never by those names.
    named: bool = True
    # Per-image metadata the data carries (an .npz's `meta_<name>` arrays, shards' `.json` members), as read, by
    # UNDERLYING index like `fetch` (so a subset keeps it as is); data/metadata.py joins and types it.
    metadata: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    def images(self, positions: np.ndarray) -> np.ndarray:
        """Images at `positions` (0..len-1) of this (possibly subset) source."""
        underlying = positions if self.indices is None else self.indices[positions]
        return self.fetch(underlying)

    def image_size(self) -> tuple[int, int]:
        """(height, width) of the images (all of a source's images share it), read from the first."""
        height, width = self.images(np.zeros(1, dtype=np.int64)).shape[1:3]
        return int(height), int(width)

    def metadata_at(self, positions: np.ndarray) -> dict[str, np.ndarray]:
        """Each metadata column's values at `positions` (0..len-1) of this (possibly subset) source."""
        underlying = positions if self.indices is None else self.indices[positions]
        return {name: values[underlying] for name, values in self.metadata.items()}

    def subset(self, positions: np.ndarray) -> "Source":
        positions = np.asarray(positions, dtype=np.int64)
        underlying = positions if self.indices is None else self.indices[positions]
        return dataclasses.replace(self, labels=self.labels[positions], indices=underlying)


def array_source(name: str, fmt: str, x: np.ndarray, y: np.ndarray, class_names: list[str]) -> Source:
    x = _as_nhwc_uint8(x, name)
    y = np.asarray(y)
    if y.ndim != 1 or len(y) != len(x):
        raise InputError(f"{name}: expected one label per image, got {len(x)} images and labels of shape {y.shape}")
    if not np.issubdtype(y.dtype, np.integer):
        raise InputError(f"{name}: labels must be integers, got {y.dtype}")
    return _validated(Source(name, fmt, y.astype(np.int64), list(class_names), lambda idx: np.asarray(x[idx])))


def _as_nhwc_uint8(x: np.ndarray, name: str) -> np.ndarray:
    if x.ndim == 3:  # greyscale (N, H, W)
        x = x[..., None]
    if x.ndim != 4:
        raise InputError(f"{name}: expected images of shape (N, H, W, C), got {x.shape}")
    if x.shape[-1] not in (1, 3) and x.shape[1] in (1, 3):  # channels-first
        x = x.transpose(0, 2, 3, 1)
    if x.dtype != np.uint8:
        raise InputError(f"{name}: images must be uint8 in [0, 255], got {x.dtype}")
    return x


def _validated(source: Source) -> Source:
    if len(source) == 0:
        raise InputError(f"{source.name}: the data set is empty")
    lo, hi = int(source.labels.min()), int(source.labels.max())
    if lo < 0 or hi >= source.num_classes:
        bad = lo if lo < 0 else hi
        raise InputError(f"{source.name}: label {bad} is out of range for {source.num_classes} classes")
    return source


def builtin_cifar10_test() -> Source:
    """The 10,000-image CIFAR-10 test set shipped with the package (Krizhevsky, 2009)."""
    with resources.files("macs_audit").joinpath("assets/cifar10_test.npz").open("rb") as fh:
        data = np.load(fh, allow_pickle=False)
        x, y, names = data["x"], data["y"], [str(n) for n in data["class_names"]]
    return array_source("builtin:cifar10-test", "builtin", x, y, names)


def unlabeled_source(name: str, fmt: str, x: np.ndarray) -> Source:
    """Images without labels (labels UNLABELED, no class names)."""
    x = _as_nhwc_uint8(x, name)
    if len(x) == 0:
        raise InputError(f"{name}: the data set is empty")
    return Source(name, fmt, np.full(len(x), UNLABELED, dtype=np.int64), [], lambda idx: np.asarray(x[idx]))


def load_npz(path: Path, labeled: bool = True) -> Source:
    """An .npz of images `x` and labels `y` (and class names, and per-image metadata `meta_<name>`), read by
    data.npz: each array's header is checked against the file and a size limit before anything is allocated."""
    with open_npz(path) as data:
        source = _npz_source(path, data, labeled)
        return dataclasses.replace(source, metadata=_npz_metadata(path, data, len(source)))


def _npz_metadata(path: Path, data: NpzArchive, n: int) -> dict[str, np.ndarray]:
    """The `meta_<name>` arrays by name: one value per image (N,), numbers or text."""
    metadata = {}
    for key in sorted(k for k in data.keys if k.startswith(NPZ_METADATA_PREFIX)):
        name = key[len(NPZ_METADATA_PREFIX) :]
        values = data.read(key)
        if not name or values.ndim != 1 or len(values) != n:
            raise InputError(
                f"{path}: metadata array {key!r} has shape {values.shape}; a meta_<name> array (a name after "
                f"meta_) holds one value per image ({n},)"
            )
        metadata[name] = values
    return metadata


def _npz_source(path: Path, data: NpzArchive, labeled: bool) -> Source:
    """The images, labels and class names of an opened .npz (load_npz)."""
    keys = data.keys
    if not labeled and "x" in keys and "y" not in keys:
        return unlabeled_source(str(path), "npz", data.read("x"))
    if not {"x", "y"} <= keys:
        raise InputError(f"{path}: an .npz data file needs arrays 'x' (images) and 'y' (labels); found {sorted(keys)}")
    y = data.read("y")
    if y.dtype.kind not in "iu":
        raise InputError(
            f"{path}: labels 'y' must be integer class indices, got {y.dtype}; store the indices in 'y' "
            "and the names in 'class_names'"
        )
    if len(y) and int(y.max()) >= MAX_CLASSES:
        raise InputError(f"{path}: label {int(y.max())} is not a class index (0..K-1, K below {MAX_CLASSES:,})")
    names = _npz_class_names(data, keys)
    if names is None:
        k = int(y.max()) + 1 if len(y) else 0
        names = CIFAR10_CLASSES if k <= 10 and k > 0 and len(y) else [str(i) for i in range(k)]
        return dataclasses.replace(array_source(str(path), "npz", data.read("x"), y, names), named=False)
    return array_source(str(path), "npz", data.read("x"), y, names)


def _npz_class_names(data: NpzArchive, keys: set[str]) -> list[str] | None:
    """The class names under the first of NPZ_CLASS_NAME_KEYS the npz has; the other exporters' keys count
    only as a list of strings (a `classes` array of numbers is not names)."""
    for key in NPZ_CLASS_NAME_KEYS:
        if key in keys:
            names = data.read(key)
            if names.ndim == 1 and (key == "class_names" or names.dtype.kind in "US"):
                return _decode(names)
    return None


class _ArrayOnlyUnpickler(pickle.Unpickler):
    """Unpickles the official CIFAR python batches without running arbitrary code:
    only numpy array reconstruction is allowed besides plain Python containers."""

    ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("_codecs", "encode"),  # how Python 3 pickles bytes at protocol 2 (files re-saved from Python 3)
    }

    def find_class(self, module, name):
        if (module, name) in self.ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def _unpickle(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            obj = _ArrayOnlyUnpickler(fh, encoding="bytes").load()
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as exc:
        raise InputError(f"cannot read CIFAR batch {path}: {exc}") from None
    if not isinstance(obj, dict):
        raise InputError(f"{path} is not a CIFAR python batch (expected a dict)")
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in obj.items()}


def _decode(names) -> list[str]:
    return [n.decode() if isinstance(n, bytes) else str(n) for n in names]


def load_cifar_dir(path: Path, split: str) -> Source:
    """`cifar-10-batches-py` (data_batch_1..5, test_batch, batches.meta) or
    `cifar-100-python` (train, test, meta; fine labels)."""
    if (path / "batches.meta").is_file():
        names = _decode(_unpickle(path / "batches.meta")["label_names"])
        files = ["test_batch"] if split == "test" else [f"data_batch_{i}" for i in range(1, 6)]
        label_key = "labels"
    elif (path / "meta").is_file():
        names = _decode(_unpickle(path / "meta")["fine_label_names"])
        files = [split]
        label_key = "fine_labels"
    else:
        raise InputError(f"{path} is not a CIFAR python-batches directory (no batches.meta or meta file)")
    xs, ys = [], []
    for name in files:
        if not (path / name).is_file():
            raise InputError(f"{path}: missing CIFAR batch file {name!r}")
        batch = _unpickle(path / name)
        if "data" not in batch or label_key not in batch:
            raise InputError(f"{path / name}: not a CIFAR batch (needs 'data' and '{label_key}')")
        data = np.asarray(batch["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3072:
            raise InputError(f"{path / name}: expected data of shape (N, 3072), got {data.shape}")
        xs.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        ys.append(np.asarray(batch[label_key], dtype=np.int64))
    return array_source(str(path), "cifar", np.concatenate(xs), np.concatenate(ys), names)


def load_imagefolder(
    path: Path,
    image_size: tuple[int, int] | None,
    labeled: bool = True,
    crop_pct: float | None = None,
    interpolation: str | None = None,
    crop_offset: str = "round",
) -> Source:
    """root/<class>/<image>; classes sorted by name; images brought to `image_size` (H, W) if given, else to
    the size of the first image, by the one preprocessing (`models.preprocessing.fit_image`: resized whole, or
    with `crop_pct` resized so the shorter side is size / crop_pct and centre-cropped; by the model's
    `interpolation` where it declares one, and its `crop_offset`). Unlabeled
    (`labeled=False`, no class sub-directories): root/<image>."""
    classes = sorted(d.name for d in path.iterdir() if d.is_dir() and not d.name.startswith("."))
    if not labeled and not classes:
        flat = tuple(sorted(f for f in path.iterdir() if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file()))
        if not flat:
            raise InputError(f"{path}: no images found (expected images in it, or root/<class>/<image>)")
        fetch = _ImageFolderFetch(flat, *(image_size or _first_size(flat[0])), crop_pct, interpolation, crop_offset)
        return Source(str(path), "imagefolder", np.full(len(flat), UNLABELED, dtype=np.int64), [], fetch)
    files, labels = [], []
    for label, cls in enumerate(classes):
        for f in sorted((path / cls).rglob("*")):
            if f.suffix.lower() in IMAGE_SUFFIXES and f.is_file():
                files.append(f)
                labels.append(label)
    if not files:
        raise InputError(f"{path}: no images found (expected root/<class>/<image> sub-directories)")

    size = image_size or _first_size(files[0])
    fetch = _ImageFolderFetch(tuple(files), *size, crop_pct, interpolation, crop_offset)
    return _validated(Source(str(path), "imagefolder", np.asarray(labels, dtype=np.int64), classes, fetch))


def _first_size(f: Path) -> tuple[int, int]:
    w, h = open_image(f).size
    return h, w


@dataclasses.dataclass(frozen=True)
class _ImageFolderFetch:
    """Reads images by index, each brought to (h, w) by the one preprocessing (`fit_image`: resized whole, or
    resized and centre-cropped with `crop_pct`), so that they batch. A plain picklable object (not a closure),
    so DataLoader worker processes can receive it under any start method."""

    files: tuple
    h: int
    w: int
    crop_pct: float | None = None
    interpolation: str | None = None
    crop_offset: str = "round"

    def __call__(self, idx: np.ndarray) -> np.ndarray:
        out = np.empty((len(idx), self.h, self.w, 3), dtype=np.uint8)
        for row, i in enumerate(idx):
            image = np.asarray(open_image(self.files[i]))
            out[row] = fit_image(image, (self.h, self.w), self.crop_pct, self.interpolation, self.crop_offset)
        return out


def detect_format(path: Path) -> str:
    if path.is_file():
        if path.suffix == ".npz":
            return "npz"
        raise UsageError(f"{path}: unknown data file type (expected .npz or a directory)")
    if (path / "batches.meta").is_file() or (path / "meta").is_file():
        return "cifar"
    if (path / "labels.npy").is_file():
        raise UsageError(f"{path} looks like a CIFAR-C directory: pass it with --cifar-c, not --data")
    return "imagefolder"


def load_source(
    path: str | Path | None = None,
    fmt: str = "auto",
    split: str = "test",
    image_size: tuple[int, int] | None = None,
    labeled: bool = True,
    crop_pct: float | None = None,
    interpolation: str | None = None,
    crop_offset: str = "round",
) -> Source:
    """Open a data source. `path=None` gives the built-in CIFAR-10 test set. `labeled=False` also reads
    images without labels (the module's docstring). `image_size`, `crop_pct`, `interpolation`, `crop_offset`:
    load_imagefolder's."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown data format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if split not in ("train", "test"):
        raise UsageError(f"split must be 'train' or 'test', got {split!r}")
    if path is None or fmt == "builtin":
        return builtin_cifar10_test()
    path = Path(path)
    if not path.exists():
        raise InputError(f"data not found: {path}")
    try:
        fmt = detect_format(path) if fmt == "auto" else fmt
        if fmt == "npz":
            return load_npz(path, labeled)
        if fmt == "cifar":
            return load_cifar_dir(path, split)
        return load_imagefolder(path, image_size, labeled, crop_pct, interpolation, crop_offset)
    except OSError as exc:  # a folder or file the OS refuses to list or read (its permissions)
        raise InputError(f"cannot read data {exc.filename or path}: {exc.strerror or exc}") from None
