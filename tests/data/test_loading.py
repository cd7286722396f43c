"""data/loading.py: the data facts a report records, the split among them only where the source has one."""

import numpy as np
from conftest import tiny_images
from data.test_sources import write_cifar10_dir

from macs_audit.data.loading import DataSpec, load_data


def test_the_split_is_recorded_only_where_the_source_was_read_from_one(tmp_path):
    x, y = tiny_images(20)
    np.savez(tmp_path / "held_out.npz", x=x, y=y)
    _, info = load_data(DataSpec(tmp_path / "held_out.npz"))
    assert info["split"] is None  # an .npz has no split: not --split's default "test"
    _, info = load_data(DataSpec(None))
    assert info["split"] == "test"  # the built-in set is CIFAR-10's test split
    write_cifar10_dir(tmp_path / "cifar")
    for split in ("train", "test"):
        _, info = load_data(DataSpec(tmp_path / "cifar", split=split))
        assert info["split"] == split
