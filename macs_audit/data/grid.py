"""The corruption grid of a source generated batch by batch and written in a released layout: the CIFAR-C
`.npy` files (data.released) or the ImageNet-C image tree (data.image_tree).

Batches are cut where `evaluate` cuts them (data.batching.prefetched) and corrupted by
views.corruptions.apply.corrupt_batch, the one home of the per-batch seeding rule, so the files that
`corrupt` writes hold the bytes that `evaluate`'s corruption views score.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import numpy as np

from macs_audit.data.batching import prefetched
from macs_audit.data.image_tree import write_image_tree
from macs_audit.data.released import write_cifar_c
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE
from macs_audit.views.corruptions.apply import corrupt_batch


def corrupted_batches(
    source: Source,
    name: str,
    severity: int,
    seed: int,
    batch_size: int,
    device: str,
    frost_textures: str | None = None,
    corruption_set: str = "cifar",
) -> Iterator[tuple[int, Any]]:
    """(start, corrupted uint8 batch) for every batch of `source` in order: the batches, cut where
    `evaluate` cuts them, that its corruption view scores."""

    def view(images: Any, start: int) -> Any:
        return corrupt_batch(images, start, name, severity, seed, device, frost_textures, corruption_set)

    for start, images, _ in prefetched(source, batch_size, view, SINGLE):
        yield start, images


def write_corruption_grid(
    out: str | Path,
    source: Source,
    names: tuple[str, ...],
    seed: int,
    batch_size: int,
    device: str,
    frost_textures: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    corruption_set: str = "cifar",
) -> list[Path]:
    """Generate `names` at severities 1-5 of `source` with a parameter set's values and write them to
    `out` in the released CIFAR-C layout (each file atomically); return the paths written."""

    def images_fn(name: str, severity: int) -> Iterator[Any]:
        batches = corrupted_batches(source, name, severity, seed, batch_size, device, frost_textures, corruption_set)
        for _, batch in batches:
            yield batch

    return write_cifar_c(out, images_fn, source.labels, names, progress=progress)


def write_corruption_tree(
    out: str | Path,
    source: Source,
    names: tuple[str, ...],
    severities: tuple[int, ...],
    seed: int,
    batch_size: int,
    device: str,
    frost_textures: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    corruption_set: str = "cifar",
) -> tuple[int, int]:
    """Generate `names` at `severities` of `source` with a parameter set's values and write them to `out` as
    the set's released image tree (data.image_tree: that set's file format, atomic per file, finished files
    kept); return (files written, files kept). A batch is generated only when one of its files is missing or
    damaged, with the bytes `evaluate` scores (the same batch cuts and seeds)."""

    def corrupt_fn(name: str, severity: int, start: int, stop: int) -> Any:
        images = source.images(np.arange(start, stop))
        return corrupt_batch(images, start, name, severity, seed, device, frost_textures, corruption_set)

    return write_image_tree(
        out,
        corrupt_fn,
        source.labels,
        source.class_names,
        source.image_size(),
        names,
        severities,
        corruption_set,
        batch_size,
        progress,
    )
