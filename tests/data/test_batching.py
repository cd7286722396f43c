"""data/batching.py: decoded image folders read by worker processes, forked with the parent's objects frozen out
of their garbage collection (a worker that collects the parent's garbage, an onnxruntime session in a cycle, can
hang in its destructor on thread-pool locks copied mid-use)."""

from __future__ import annotations

import gc

import numpy as np
from conftest import tiny_images
from PIL import Image

from macs_audit.data import batching
from macs_audit.data.sources import load_imagefolder


def test_worker_batches_equal_plain_reads_and_the_parent_is_left_unfrozen(tmp_path):
    x, y = tiny_images(24)
    for i, (image, label) in enumerate(zip(x, y, strict=True)):
        folder = tmp_path / f"c{int(label)}"
        folder.mkdir(exist_ok=True)
        Image.fromarray(image).save(folder / f"{i:03d}.png")
    source = load_imagefolder(tmp_path, (32, 32))
    starts = [0, 8, 16]
    frozen: list[int] = []
    real_freeze = gc.freeze

    def freeze() -> None:  # the workers fork while the parent's objects are frozen
        real_freeze()
        frozen.append(gc.get_freeze_count())

    gc.freeze = freeze  # type: ignore[assignment]
    try:
        read = dict(batching._batch_images(source, starts, 8, None, workers=2))
    finally:
        gc.freeze = real_freeze  # type: ignore[assignment]
    assert frozen and frozen[0] > 0 and gc.get_freeze_count() == 0
    plain = dict(batching._batch_images(source, starts, 8, None, workers=0))
    assert set(read) == set(starts)
    for start in starts:
        assert np.array_equal(read[start], plain[start])
