"""The generated corruption grid: the batches `corrupt` writes are the ones evaluate's corruption view scores."""

import numpy as np
import pytest
from conftest import tiny_images

from macs_audit.data.grid import Grid, corrupted_batches, write_corruption_grid
from macs_audit.data.sources import array_source
from macs_audit.pixels import to_unit_float


@pytest.fixture
def source():
    x, y = tiny_images(25, seed=2)
    return array_source("tiny", "npz", x, y, [str(i) for i in range(10)])


def test_corrupted_batches_are_the_views_batches(source):
    from macs_audit.views import view

    corruption = view.corruption("gaussian_noise", 3, seed=5, device="cpu", frost_textures=None)
    batches = list(corrupted_batches(Grid(source, seed=5, batch_size=10, device="cpu"), "gaussian_noise", 3))
    assert [start for start, _ in batches] == [0, 10, 20]
    for start, batch in batches:
        images = source.images(np.arange(start, min(start + 10, len(source))))
        assert str(batch.dtype) == "torch.uint8" and tuple(batch.shape) == images.shape
        np.testing.assert_array_equal(to_unit_float(batch.numpy()), corruption(images, start))


def test_write_corruption_grid_writes_the_batches(tmp_path, source):
    grid = Grid(source, seed=1, batch_size=10, device="cpu")
    written = write_corruption_grid(tmp_path, grid, ("contrast",))
    assert [p.name for p in written] == ["labels.npy", "contrast.npy"]
    stored = np.load(tmp_path / "contrast.npy")
    for severity in (1, 5):
        want = np.concatenate([b.numpy() for _, b in corrupted_batches(grid, "contrast", severity)])
        np.testing.assert_array_equal(stored[(severity - 1) * 25 : severity * 25], want)
