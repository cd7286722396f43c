"""The corruption grid of a source generated batch by batch and written in a released layout: the CIFAR-C
`.npy` files (data.npy_layout) or the ImageNet-C image tree (data.image_tree).

Batches are cut where `evaluate` cuts them (data.batching.prefetched) and corrupted by
views.corruptions.apply.corrupt_batch, the one home of the per-batch seeding rule, so the files that
`corrupt` writes hold the bytes that `evaluate`'s corruption views score.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit.data.batching import prefetched
from macs_audit.data.image_tree import write_image_tree
from macs_audit.data.npy_layout import write_cifar_c
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE
from macs_audit.progress import ProgressFn
from macs_audit.views.corruptions.apply import corrupt_batch


@dataclasses.dataclass(frozen=True)
class Grid:
    """What every corrupted copy of `source` is generated with: the seed, the batches (cut where `evaluate`
    cuts them), the device, the frost textures (None: procedural) and the corruption parameter set."""

    source: Source
    seed: int
    batch_size: int
    device: str
    frost_textures: str | None = None
    corruption_set: str = "cifar"

    def corrupt(self, images: Any, start: int, name: str, severity: int) -> Any:
        """`images` at data-set position `start` with corruption `name` at `severity` (corrupt_batch)."""
        return corrupt_batch(
            images, start, name, severity, self.seed, self.device, self.frost_textures, self.corruption_set
        )


def corrupted_batches(grid: Grid, name: str, severity: int) -> Iterator[tuple[int, Any]]:
    """(start, corrupted uint8 batch) for every batch of the grid's source in order: the batches, cut where
    `evaluate` cuts them, that its corruption view scores."""

    def view(images: Any, start: int) -> Any:
        return grid.corrupt(images, start, name, severity)

    for start, images, _ in prefetched(grid.source, grid.batch_size, view, SINGLE):
        yield start, images


def write_corruption_grid(
    out: str | Path, grid: Grid, names: tuple[str, ...], progress: ProgressFn | None = None
) -> list[Path]:
    """Generate `names` at severities 1-5 of the grid's source with its parameter set's values and write them
    to `out` in the released CIFAR-C layout (each file atomically); return the paths written."""

    def images_fn(name: str, severity: int) -> Iterator[Any]:
        for _, batch in corrupted_batches(grid, name, severity):
            yield batch

    return write_cifar_c(out, images_fn, grid.source.labels, names, progress=progress)


def write_corruption_tree(
    out: str | Path,
    grid: Grid,
    names: tuple[str, ...],
    severities: tuple[int, ...],
    progress: ProgressFn | None = None,
) -> tuple[int, int]:
    """Generate `names` at `severities` of the grid's source with its parameter set's values and write them to
    `out` as the set's released image tree (data.image_tree: that set's file format, atomic per file, finished
    files kept); return (files written, files kept). A batch is generated only when one of its files is
    missing or damaged, with the bytes `evaluate` scores (the same batch cuts and seeds)."""
    source = grid.source

    def corrupt_fn(name: str, severity: int, start: int, stop: int) -> Any:
        return grid.corrupt(source.images(np.arange(start, stop)), start, name, severity)

    return write_image_tree(out, corrupt_fn, source, names, severities, grid.corruption_set, grid.batch_size, progress)
