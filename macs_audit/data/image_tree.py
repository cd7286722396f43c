"""The released ImageNet-C / Tiny-ImageNet-C layout: an image tree, read and written.

Layout (Zenodo 2235448 / 2536630): ``<root>/<corruption>/<severity>/<class>/<image>``, one image
file per corrupted image, class folders named by the class (WordNet ids in the releases). Users
who extract the ImageNet-C tars one per family get ``<root>/<family>/<corruption>/...``: a
corruption folder one level down is found too.

Reading: each (corruption, severity) folder is an image folder (``sources.load_imagefolder``,
images sized to the evaluated data's size), its class folders mapped by name to the data's
classes, its images aligned with the data's positions (``tree_source``).

Writing: an image folder's images keep their class folder and file name, the suffix the layout's format's
(``ILSVRC2012_val_00000001.JPEG`` -> ``<class>/ILSVRC2012_val_00000001.jpg``, as the released ImageNet-C keeps
the validation files' names: ``source_stems``); images of arrays are named ``<n>.<ext>``, n their position in
the data (zero-padded, so that sorted names keep the data's order within a class). Each file is written
atomically; a rerun keeps the files that decode to the right size and writes the rest (``write_image_tree``).
"""

from __future__ import annotations

import dataclasses
import io
import os
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.atomic import remove_stale_temporaries, write_bytes
from macs_audit.data.sources import Source, load_imagefolder
from macs_audit.errors import InputError, UsageError
from macs_audit.images import IMAGE_SUFFIXES
from macs_audit.progress import ProgressFn
from macs_audit.views.corruptions.table import CORRUPTIONS, parameter_set

# Writing a file atomically costs an fsync (milliseconds); threads overlap those, and the JPEG codec
# and fsync release the GIL (measured: 240 files/s in one thread, 440 in 8, for 224 px JPEGs).
WRITE_THREADS = 8
CorruptFn = Callable[[str, int, int, int], Any]  # (name, severity, start, stop) -> uint8 (b, H, W, 3)


def is_image_tree(directory: str | os.PathLike) -> bool:
    """Whether `directory` holds the image-tree layout (a corruption folder, not labels.npy)."""
    root = Path(directory)
    if not root.is_dir() or (root / "labels.npy").exists():
        return False
    return any(_corruption_folder(root, name) is not None for name in CORRUPTIONS)


def _corruption_folder(root: Path, name: str) -> Path | None:
    """root/<name>, or root/<family folder>/<name> (the tars extracted one per folder)."""
    if (root / name).is_dir():
        return root / name
    for sub in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (sub / name).is_dir():
            return sub / name
    return None


def _cell(root: Path, name: str, severity: int) -> Path:
    folder = _corruption_folder(root, name)
    if folder is None:
        present = [c for c in CORRUPTIONS if _corruption_folder(root, c) is not None]
        raise InputError(
            f"{root} has no {name} folder (found: {', '.join(present) or 'none'}); choose --corruptions from "
            "the folders present or write the others with `macs-audit corrupt --layout tree`"
        )
    cell = folder / str(severity)
    if not cell.is_dir():
        raise InputError(f"{folder} has no severity folder {severity} (<corruption>/<severity>/<class>/<image>)")
    return cell


def _class_folders(cell: Path) -> list[Path]:
    return sorted(p for p in cell.iterdir() if p.is_dir() and not p.name.startswith("."))


def check_image_tree(directory: str | os.PathLike, corruptions: Iterable[str], severities: Iterable[int]) -> None:
    """Fail before the model loads when the tree cannot serve every (corruption, severity): a folder missing
    or empty, or a class folder without images. Reads folder listings only."""
    root = Path(directory)
    for name in corruptions:
        for severity in severities:
            cell = _cell(root, name, severity)
            folders = _class_folders(cell)
            if not folders:
                raise InputError(f"{cell} is empty (expected <class>/<image> folders)")
            for folder in folders:
                if not any(f.suffix.lower() in IMAGE_SUFFIXES for f in folder.rglob("*")):
                    raise InputError(f"{folder} holds no images")


def check_tree_classes(
    directory: str | os.PathLike, corruptions: Iterable[str], severities: Iterable[int], class_names: list[str]
) -> None:
    """Fail before the clean pass when a class folder of any (corruption, severity) names no class of the
    data's `class_names` (the folders are there: `check_image_tree`)."""
    root = Path(directory)
    known = set(class_names)
    for name in corruptions:
        for severity in severities:
            for folder in _class_folders(_cell(root, name, severity)):
                if folder.name not in known:
                    raise InputError(_unmatched(folder, class_names))


def _unmatched(folder: Path, class_names: list[str]) -> str:
    shown = ", ".join(class_names[:5]) + (", ..." if len(class_names) > 5 else "")
    return f"class folder {folder} names no class of the data ({len(class_names)} classes: {shown})"


def tree_source(directory: str | os.PathLike, clean_source: Source, name: str, severity: int) -> Source:
    """The tree's images of one corruption x severity as `clean_source`'s positions: same labels, class names
    and order, images read from the tree (sized like the clean images, decoded by worker processes).

    The tree holds either the whole set `clean_source` was cut from, in its order (the released tree
    beside the clean folder it was made from), or exactly the evaluated images, grouped by class folder
    (written by `corrupt` from this data and --limit). Anything else is an InputError."""
    cell = _cell(Path(directory), name, severity)
    tree = load_imagefolder(cell, clean_source.image_size())  # released images are already cropped: resize only
    index = {c: i for i, c in enumerate(clean_source.class_names)}
    unmatched = next((c for c in tree.class_names if c not in index), None)
    if unmatched is not None:
        raise InputError(_unmatched(cell / unmatched, clean_source.class_names))
    labels = np.array([index[c] for c in tree.class_names], dtype=np.int64)[tree.labels]
    rows = _aligned_rows(labels, clean_source)
    if rows is None:
        raise InputError(
            f"{cell} ({len(labels)} images) does not match the clean data ({len(clean_source)} images): pass the "
            "clean set it was made from with --data and the same --limit"
        )
    # Its own images at the clean positions: the clean set's metadata, indexed by the clean set's, is not theirs.
    return dataclasses.replace(
        clean_source, name=str(cell), format="imagefolder", indices=rows, fetch=tree.fetch, metadata={}
    )


def _aligned_rows(tree_labels: np.ndarray, clean: Source) -> np.ndarray | None:
    """For every position of `clean`, the tree image that holds it; None when the tree is not aligned."""
    if clean.indices is not None:  # the whole underlying set, in its order
        rows = clean.indices
        if rows.max() < len(tree_labels) and np.array_equal(tree_labels[rows], clean.labels):
            return rows
    # Exactly the evaluated images, by class folder (sorted names), positions in order within a class.
    rank = np.argsort(np.argsort(np.array(clean.class_names, dtype=object), kind="stable"), kind="stable")
    order = np.argsort(rank[clean.labels], kind="stable")
    if len(tree_labels) != len(clean) or not np.array_equal(tree_labels, clean.labels[order]):
        return None
    rows = np.empty(len(order), dtype=np.int64)
    rows[order] = np.arange(len(order))
    return rows


def class_folder_names(class_names: list[str]) -> list[str]:
    """The data's class names, checked to be usable (and readable back) as folder names."""
    for name in class_names:
        if not name or name in (".", "..") or name.startswith(".") or any(c in name for c in "/\\\0"):
            raise InputError(
                f"class name {name!r} cannot name a class folder (empty, hidden, or with a path separator); "
                "give the data other class names or write the .npy layout"
            )
    if len(set(class_names)) != len(class_names):
        twice = next(c for c in class_names if class_names.count(c) > 1)
        raise InputError(f"class name {twice!r} appears twice; class folders need distinct names")
    return list(class_names)


def source_stems(source: Source) -> list[str] | None:
    """Each position's file of an image-folder source, as a path under its class folder without the suffix;
    None for a source of arrays (its images have no names) or one whose names collide without their suffixes."""
    files = getattr(source.fetch, "files", None)
    if source.format != "imagefolder" or files is None or not source.class_names:
        return None
    root = Path(source.name)
    underlying = source.indices if source.indices is not None else np.arange(len(source))
    stems = []
    for label, i in zip(source.labels.tolist(), underlying.tolist(), strict=True):
        path = Path(files[i])
        try:
            stems.append(path.relative_to(root / source.class_names[label]).with_suffix("").as_posix())
        except ValueError:  # not under its class folder: no name to keep
            return None
    named = [f"{source.class_names[label]}/{stem}" for label, stem in zip(source.labels.tolist(), stems, strict=True)]
    return stems if len(set(named)) == len(named) else None  # a.png and a.jpg of one class: index names


def write_image_tree(
    out_dir: str | os.PathLike,
    corrupt_fn: CorruptFn,
    source: Source,
    corruptions: Iterable[str],
    severities: Iterable[int],
    corruption_set: str,
    batch_size: int,
    progress: ProgressFn | None = None,
) -> tuple[int, int]:
    """Write `out_dir/<corruption>/<severity>/<class>/<stem>.<ext>` for every position n of `source` (its labels
    and class names), the stem its file's name where it keeps one (`source_stems`), else n; return (files written,
    finished files kept).

    ``corrupt_fn(name, severity, start, stop)`` returns the corrupted uint8 images (b, H, W, 3) of positions
    [start, stop), numpy or torch; it is called only for the batches (cut every `batch_size` positions) that
    have a file missing, damaged or of another size than the source's images (H, W). The file format is the one of
    `corruption_set`'s release (its ParameterSet's tree_format); each file is written atomically, and temporary
    files a killed run left are removed first. ``progress(description, done, total)`` is called after every
    batch, counting that corruption and severity's images."""
    started = time.time()
    names, sevs = list(dict.fromkeys(corruptions)), list(dict.fromkeys(severities))
    if not names or not sevs:
        raise UsageError("no corruptions or severities to write")
    fmt, ext, save_args = parameter_set(corruption_set).tree_format
    files = _tree_files(source, ext)
    n, image_size = len(files), source.image_size()
    by_folder: dict[str, list[str]] = {}  # a class folder (or a folder in it) -> its files' names
    for file in files:
        by_folder.setdefault(str(Path(file).parent), []).append(Path(file).name)
    written, kept = 0, 0
    with ThreadPoolExecutor(WRITE_THREADS) as pool:
        for name in names:
            for severity in sevs:
                cell = Path(out_dir) / name / str(severity)
                for folder, own in by_folder.items():
                    remove_stale_temporaries(cell / folder, own, before=started)
                for start in range(0, n, batch_size):
                    stop = min(start + batch_size, n)
                    paths = [cell / file for file in files[start:stop]]
                    intact = pool.map(_intact, paths, [image_size] * len(paths))
                    todo = [i for i, ok in enumerate(intact) if not ok]  # within the batch
                    if todo:
                        batch = _as_numpy(corrupt_fn(name, severity, start, stop))
                        todo_paths, images = [paths[i] for i in todo], [batch[i] for i in todo]
                        list(pool.map(_write, todo_paths, images, [fmt] * len(todo), [save_args] * len(todo)))
                    written += len(todo)
                    kept += stop - start - len(todo)
                    if progress is not None:  # each severity is a stage of its own n images
                        progress(f"{name} severity {severity}", stop, n)
    return written, kept


def _tree_files(source: Source, ext: str) -> list[str]:
    """Each image's file under a corruption and severity's folder: `<class>/<stem><ext>`, in data order."""
    folders = class_folder_names(source.class_names)
    labels = np.asarray(source.labels)
    n = len(labels)
    if n == 0 or labels.min() < 0 or labels.max() >= len(folders):
        raise InputError("every image needs a label of one of the data's classes to be written in a class folder")
    width = len(str(n - 1))
    stems = source_stems(source) or [f"{i:0{width}d}" for i in range(n)]  # an image folder's names, else indices
    return [f"{folders[label]}/{stem}{ext}" for stem, label in zip(stems, labels.tolist(), strict=True)]


def _intact(path: Path, size: tuple[int, int]) -> bool:
    """Whether `path` is an image that decodes whole to (H, W) = `size` (a rerun keeps it)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            im.load()  # a truncated file fails here
            return im.size == (size[1], size[0])
    except (OSError, ValueError, Image.DecompressionBombError):
        return False


def _write(path: Path, image: np.ndarray, fmt: str, save_args: Mapping[str, Any]) -> None:
    """Encode one image in `fmt` and write it atomically."""
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format=fmt, **save_args)
    write_bytes(path, buffer.getvalue())


def _as_numpy(batch: Any) -> np.ndarray:
    if hasattr(batch, "detach"):  # a torch tensor, on any device
        batch = batch.detach().cpu().numpy()
    batch = np.asarray(batch)
    if batch.dtype != np.uint8 or batch.ndim != 4 or batch.shape[3] != 3:
        raise InputError(f"corrupted batches must be uint8 (b, H, W, 3), got {batch.dtype} of shape {batch.shape}")
    return batch
