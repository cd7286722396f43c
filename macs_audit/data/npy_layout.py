"""The released CIFAR-10-C / CIFAR-100-C layout (`corrupt --layout npy`): read it memory-mapped, write it.
Which layout a --corrupted-data folder holds, this one or the image tree (data.image_tree), is data.released's.

Layout (Zenodo 2535967 / 3555552): one ``<corruption>.npy`` per corruption, uint8 of shape
(5 * n, H, W, 3) and severity-major (rows [(s - 1) * n, s * n) hold severity s, images in
test-set order), plus ``labels.npy``: the n labels tiled 5 times (uint8 in the release).

Reading never loads an image file whole: ``images(name, severity)`` returns a read-only
memory-mapped view of one severity block, and each file is opened once. Writing streams
severity blocks from a caller-supplied iterator of batches into a memory-mapped temporary
file in the target directory, renamed into place when complete (atomic per file).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.atomic import atomic_path, output_error, remove_stale_temporaries
from macs_audit.data.npz import data_bytes, npy_header
from macs_audit.errors import InputError, UsageError
from macs_audit.progress import ProgressFn
from macs_audit.views.corruptions.table import CORRUPTIONS, SEVERITIES

NUM_SEVERITIES = len(SEVERITIES)
LABELS_FILE = "labels.npy"

ImagesFn = Callable[[str, int], Iterable[Any]]


class CifarCDirectory:
    """A CIFAR-10-C / CIFAR-100-C directory, validated, with lazily opened memory maps.

    Attributes: ``path``; ``corruptions`` (names present, reference order); ``labels`` (int64,
    the n per-severity labels); ``num_per_severity`` (n); ``image_shape`` ((H, W, 3)).
    """

    def __init__(self, path: Path, corruptions: tuple[str, ...], labels: np.ndarray, image_shape: tuple[int, ...]):
        self.path = path
        self.corruptions = corruptions
        self.labels = labels
        self.num_per_severity = int(labels.shape[0])
        self.image_shape = image_shape
        self._maps: dict[str, np.ndarray] = {}

    def __repr__(self) -> str:
        return (
            f"CifarCDirectory({str(self.path)!r}, {len(self.corruptions)} corruptions, "
            f"{self.num_per_severity} images per severity)"
        )

    def images(self, name: str, severity: int) -> np.ndarray:
        """Read-only memory-mapped uint8 view (n, H, W, 3) of one corruption and severity."""
        if name not in CORRUPTIONS:
            raise UsageError(f"unknown corruption {name!r}; choose one of: {', '.join(CORRUPTIONS)}")
        if isinstance(severity, bool) or not isinstance(severity, int) or severity not in SEVERITIES:
            raise UsageError(f"corruption severity must be an integer 1-5, got {severity!r}")
        if name not in self.corruptions:
            raise InputError(f"{self.path} has no {name}.npy; present: {', '.join(self.corruptions)}")
        if name not in self._maps:
            self._maps[name] = _open_memmap(self.path / f"{name}.npy")
        n = self.num_per_severity
        return self._maps[name][(severity - 1) * n : severity * n]

    def close(self) -> None:
        """Drop the cached memory maps (they close when no view refers to them)."""
        self._maps.clear()


def read_cifar_c(directory: str | os.PathLike) -> CifarCDirectory:
    """Open and validate a CIFAR-10-C / CIFAR-100-C directory (headers only; no image data
    is read). Raises InputError with a one-line message when the layout is wrong."""
    path = Path(directory)
    if not path.is_dir():
        raise InputError(f"CIFAR-C directory {path} does not exist or is not a directory")
    labels_path = path / LABELS_FILE
    if not labels_path.is_file():
        raise InputError(
            f"{path} has no {LABELS_FILE}; a CIFAR-C directory holds <corruption>.npy files and labels.npy"
        )
    tiled = _open_memmap(labels_path)
    if tiled.ndim != 1 or tiled.dtype.kind not in "iu" or tiled.shape[0] == 0 or tiled.shape[0] % NUM_SEVERITIES:
        raise InputError(
            f"{labels_path} must be a 1-D integer array whose length is a multiple "
            f"of {NUM_SEVERITIES}, got {tiled.dtype} of shape {tiled.shape}"
        )
    n = tiled.shape[0] // NUM_SEVERITIES
    blocks = np.asarray(tiled).reshape(NUM_SEVERITIES, n)
    if not (blocks == blocks[0]).all():
        raise InputError(
            f"{labels_path} does not hold the same {n} labels for each of the "
            f"{NUM_SEVERITIES} severities; not a CIFAR-C labels file"
        )
    labels = blocks[0].astype(np.int64)
    if labels.min() < 0:
        raise InputError(f"{labels_path} holds negative labels")
    del tiled, blocks

    present = []
    image_shape = None
    for name in CORRUPTIONS:
        file = path / f"{name}.npy"
        if not file.exists():
            continue
        shape, dtype = _read_header(file)
        if dtype != np.uint8 or len(shape) != 4 or shape[0] != NUM_SEVERITIES * n or shape[3] != 3:
            raise InputError(
                f"{file} must be uint8 of shape ({NUM_SEVERITIES * n}, H, W, 3) to "
                f"match {LABELS_FILE}, got {dtype} of shape {shape}"
            )
        if image_shape is None:
            image_shape = tuple(shape[1:])
        elif tuple(shape[1:]) != image_shape:
            raise InputError(
                f"{file} holds {shape[1]}x{shape[2]} images, other files {image_shape[0]}x{image_shape[1]}"
            )
        present.append(name)
    if not present:
        raise InputError(f"{path} holds no corruption files (<name>.npy for the 19 CIFAR-C corruptions, e.g. fog.npy)")
    assert image_shape is not None  # set by the first file present
    return CifarCDirectory(path, tuple(present), labels, image_shape)


def output_names(corruptions: Iterable[str]) -> list[str]:
    """The files a write of `corruptions` puts in its folder: labels.npy and one <name>.npy each."""
    return [LABELS_FILE, *(f"{name}.npy" for name in dict.fromkeys(corruptions))]


def write_cifar_c(
    out_dir: str | os.PathLike,
    images_fn: ImagesFn,
    labels: Any,
    corruptions: Iterable[str] = CORRUPTIONS,
    progress: ProgressFn | None = None,
) -> list[Path]:
    """Write a CIFAR-C directory in the released layout; return the paths written.

    ``images_fn(name, severity)`` yields uint8 batches (b, H, W, 3), numpy arrays or tensors
    on any device, that together hold the n corrupted images of that corruption and severity
    in order; the caller controls batching and device. ``labels`` holds the n labels.
    ``labels.npy`` is written first (uint8 when every label is below 256, else int64), then
    one ``<name>.npy`` per corruption, each streamed severity by severity into a memory-mapped
    temporary file in ``out_dir`` and renamed into place only when complete. Temporary files of
    these names that a killed earlier run left in ``out_dir`` are removed first. ``progress``
    is called as progress(description, images_done, images_total) of that corruption and severity after every
    batch.
    """
    started = time.time()
    names = list(dict.fromkeys(corruptions))
    unknown = [c for c in names if c not in CORRUPTIONS]
    if unknown:
        raise UsageError(f"unknown corruption {unknown[0]!r}; choose from: {', '.join(CORRUPTIONS)}")
    if not names:
        raise UsageError("no corruptions to write")
    labels = np.asarray(labels)
    if labels.ndim != 1 or labels.shape[0] == 0 or labels.dtype.kind not in "iu" or (labels < 0).any():
        raise InputError(
            f"labels must be a non-empty 1-D array of non-negative integers, got {labels.dtype} of shape {labels.shape}"
        )
    n = labels.shape[0]
    out = Path(out_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise output_error(out, exc) from None
    remove_stale_temporaries(out, output_names(names), before=started)

    label_dtype = np.uint8 if labels.max() < 256 else np.int64
    written = [_save_array(out / LABELS_FILE, np.tile(labels.astype(label_dtype), NUM_SEVERITIES))]
    for name in names:
        target = out / f"{name}.npy"
        with atomic_path(target) as tmp:
            _write_corruption(tmp, name, images_fn, n, progress)
        written.append(target)
    return written


def _write_corruption(tmp: Path, name: str, images_fn: ImagesFn, n: int, progress: ProgressFn | None) -> None:
    """Stream corruption `name`'s n images at every severity into a memory-mapped .npy file `tmp`."""
    array = None
    for severity in SEVERITIES:
        row = 0
        for batch in images_fn(name, severity):
            batch = _as_uint8_batch(batch, name, severity)
            if array is None:
                array = np.lib.format.open_memmap(
                    tmp, mode="w+", dtype=np.uint8, shape=(NUM_SEVERITIES * n,) + batch.shape[1:]
                )
            elif batch.shape[1:] != array.shape[1:]:
                raise InputError(
                    f"{name} severity {severity}: batch of {batch.shape[1]}x{batch.shape[2]} images, earlier "
                    f"batches {array.shape[1]}x{array.shape[2]}"
                )
            if row + batch.shape[0] > n:
                raise InputError(f"{name} severity {severity}: more than the {n} images the labels describe")
            start = (severity - 1) * n + row
            array[start : start + batch.shape[0]] = batch
            row += batch.shape[0]
            if progress is not None:  # each severity is a stage of its own n images
                progress(f"{name} severity {severity}", row, n)
        if row != n:
            raise InputError(f"{name} severity {severity}: got {row} images, expected {n} (one per label)")
    if array is not None:
        array.flush()
        del array  # unmap before the rename


# ---------------------------------------------------------------------------------------------
def _open_memmap(file: Path) -> np.ndarray:
    try:
        array = np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read {file} as a .npy array: {_one_line(exc)}") from None
    if not isinstance(array, np.ndarray):
        raise InputError(f"{file} is not a single .npy array")
    if array.ndim > 1 and not array.flags.c_contiguous:
        raise InputError(f"{file} is stored in Fortran order; CIFAR-C files are C-ordered")
    return array


def _read_header(file: Path) -> tuple[tuple[int, ...], np.dtype]:
    """Shape and dtype from a .npy header, checking the file is as long as it claims."""
    try:
        with open(file, "rb") as f:
            shape, fortran, dtype = npy_header(f)
            offset = f.tell()
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read {file} as a .npy array: {_one_line(exc)}") from None
    if fortran and len(shape) > 1:
        raise InputError(f"{file} is stored in Fortran order; CIFAR-C files are C-ordered")
    size = offset + data_bytes(shape, dtype)  # Python integers: a huge claimed shape cannot wrap around
    if file.stat().st_size < size:
        raise InputError(f"{file} is truncated: {file.stat().st_size} bytes, the header describes {size}")
    return tuple(shape), dtype


def _as_uint8_batch(batch: Any, name: str, severity: int) -> np.ndarray:
    if hasattr(batch, "detach"):  # a torch tensor, on any device
        batch = batch.detach().cpu().numpy()
    batch = np.asarray(batch)
    if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[3] != 3:
        raise InputError(
            f"{name} severity {severity}: batches must be uint8 (b, H, W, 3), got {batch.dtype} of shape {batch.shape}"
        )
    return batch


def _save_array(target: Path, array: np.ndarray) -> Path:
    with atomic_path(target) as tmp:
        with open(tmp, "wb") as fh:
            np.save(fh, array, allow_pickle=False)
    return target


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def _open_cifar_c(directory: str) -> CifarCDirectory:
    """One CifarCDirectory per folder and its contents, so each file is memory-mapped once for all its
    severities. The cache key is the resolved path with every layout file's size and modification
    time: a relative path after a change of directory, or a folder rewritten since, is opened afresh."""
    real = os.path.realpath(directory)
    stamp = []
    for name in (LABELS_FILE, *(f"{c}.npy" for c in CORRUPTIONS)):
        try:
            info = os.stat(os.path.join(real, name))
        except OSError:
            continue
        stamp.append((name, info.st_size, info.st_mtime_ns, info.st_ino))
    return _open_cached(real, directory, tuple(stamp))


@functools.lru_cache(maxsize=4)
def _open_cached(real: str, given: str, stamp: tuple) -> CifarCDirectory:
    cc = read_cifar_c(real)
    cc.path = Path(given)  # messages name the folder as the user gave it
    return cc


def check_cifar_c(directory: str | os.PathLike, corruptions: Iterable[str]) -> None:
    """Fail before any audit when `directory` lacks a file of `corruptions`. Reads headers and labels only."""
    cc = _open_cifar_c(str(directory))
    missing = [name for name in corruptions if name not in cc.corruptions]
    if missing:
        raise InputError(
            f"{directory} has no {', '.join(f'{name}.npy' for name in missing)} (found: {', '.join(cc.corruptions)}); "
            "choose --corruptions from the files present or write the others with `macs-audit corrupt`"
        )


def cifar_c_source(directory, clean_source, name: str, severity: int):
    """The released images of one corruption x severity, aligned with `clean_source` (same positions)."""
    import dataclasses

    cc = _open_cifar_c(str(directory))
    if name not in cc.corruptions:
        raise InputError(f"{directory} has no {name}.npy (found: {', '.join(cc.corruptions) or 'none'})")
    # The directory holds either the whole clean set (subset positions index into it) or exactly
    # the evaluated images (e.g. written by `corrupt --limit N`); its labels must agree either way.
    n = len(clean_source)
    candidates = []
    if clean_source.indices is not None:
        candidates.append(clean_source.indices)
    candidates.append(np.arange(n))
    rows = next(
        (c for c in candidates if c.max() < cc.num_per_severity and np.array_equal(cc.labels[c], clean_source.labels)),
        None,
    )
    if rows is None:
        raise InputError(
            f"{directory} ({cc.num_per_severity} images per severity) does not match the clean data "
            f"({n} images): pass the clean set it was made from with --data and the same --limit"
        )

    def fetch(idx: np.ndarray) -> np.ndarray:
        return np.asarray(cc.images(name, severity)[idx])

    # Its own images at the clean positions: the clean set's metadata, indexed by the clean set's, is not theirs.
    return dataclasses.replace(
        clean_source, name=str(directory), format="cifar-c", indices=rows, fetch=fetch, metadata={}
    )
