"""Sources read without labels (OOD data, unlabeled target images): an npz with only `x`, a flat image folder;
the labelled formats still read, and nothing changes where labels are needed."""

import numpy as np
import pytest
from PIL import Image

from macs_audit.data.loading import DataSpec, load_data
from macs_audit.data.sources import UNLABELED, load_source
from macs_audit.errors import InputError


def test_an_npz_with_only_images(tmp_path):
    x = np.random.default_rng(0).integers(0, 256, (7, 8, 8, 3), dtype=np.uint8)
    np.savez(tmp_path / "x.npz", x=x)
    source = load_source(tmp_path / "x.npz", labeled=False)
    assert len(source) == 7 and source.class_names == [] and (source.labels == UNLABELED).all()
    np.testing.assert_array_equal(source.images(np.arange(7)), x)
    with pytest.raises(InputError, match="'y'"):  # where labels are needed, still an error
        load_source(tmp_path / "x.npz")


def test_a_labelled_npz_reads_the_same_either_way(npz_data):
    a, b = load_source(npz_data), load_source(npz_data, labeled=False)
    np.testing.assert_array_equal(a.labels, b.labels)
    assert a.class_names == b.class_names


def test_a_flat_image_folder_resized_to_the_model(tmp_path):
    rng = np.random.default_rng(1)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)).save(tmp_path / f"{i}.png")
    (tmp_path / "notes.txt").write_text("not an image")
    source, _ = load_data(DataSpec(tmp_path, labeled=False), image_size=(16, 16))
    assert len(source) == 3 and (source.labels == UNLABELED).all()
    assert source.images(np.arange(3)).shape == (3, 16, 16, 3)
    with pytest.raises(InputError, match="no images"):
        load_source(tmp_path)  # labels needed: an ImageFolder wants class sub-directories


def test_an_empty_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no images"):
        load_source(tmp_path, labeled=False)
