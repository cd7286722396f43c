"""macs_audit.data.released: a --corrupted-data folder in either released layout (the CIFAR-C `.npy` files or the
ImageNet-C image tree) is told apart, checked before the model loads and against the clean data before the clean
pass, and read as views of the clean data. The layouts' own details: test_npy_layout.py and test_image_tree.py."""

import numpy as np
import pytest
from conftest import tiny_images

from macs_audit.data.grid import Grid, write_corruption_grid, write_corruption_tree
from macs_audit.data.released import check_released_files, check_released_matches, released_source
from macs_audit.data.sources import array_source
from macs_audit.errors import InputError

NAMES = [f"class{i}" for i in range(10)]


@pytest.fixture(scope="module")
def layouts(tmp_path_factory):
    """One clean source and its contrast corruption written in both layouts from the same grid (PNG: lossless)."""
    root = tmp_path_factory.mktemp("released")
    x, y = tiny_images(12, seed=3)
    source = array_source("tiny", "npz", x, y, NAMES)
    grid = Grid(source, seed=0, batch_size=5, device="cpu")
    write_corruption_grid(root / "npy", grid, ("contrast",))
    write_corruption_tree(root / "tree", grid, ("contrast",), (1, 2))
    return source, {"cifar-c": root / "npy", "imagefolder": root / "tree"}


def test_either_layout_gives_the_same_images_at_the_data_positions(layouts):
    source, folders = layouts
    read = {}
    for kind, folder in folders.items():
        check_released_files(folder, ["contrast"], [1, 2])
        check_released_matches(folder, ["contrast"], [1, 2], source)
        for severity in (1, 2):
            cell = released_source(folder, source, "contrast", severity)
            assert cell.format == kind and len(cell) == len(source)
            np.testing.assert_array_equal(cell.labels, source.labels)
            read[kind, severity] = cell.images(np.arange(len(cell)))
    for severity in (1, 2):
        np.testing.assert_array_equal(read["cifar-c", severity], read["imagefolder", severity])
    assert not np.array_equal(read["cifar-c", 1], read["cifar-c", 2])  # each severity its own images


def test_a_subset_of_the_data_the_npy_files_were_made_from_reads_its_own_rows(layouts):
    """A --limit subset of the data the .npy files were made from reads the subset's rows (the tree's case, a
    subset of the clean folder beside it: test_image_tree.py)."""
    source, folders = layouts
    positions = np.array([2, 7, 11])
    subset = source.subset(positions)
    check_released_matches(folders["cifar-c"], ["contrast"], [1], subset)
    whole = released_source(folders["cifar-c"], source, "contrast", 2).images(positions)
    read = released_source(folders["cifar-c"], subset, "contrast", 2)
    np.testing.assert_array_equal(read.images(np.arange(3)), whole)


def test_a_missing_corruption_or_severity_is_found_before_the_model_loads(layouts):
    _, folders = layouts
    with pytest.raises(InputError, match=r"has no fog.npy \(found: contrast\)"):
        check_released_files(folders["cifar-c"], ["contrast", "fog"], [1])
    with pytest.raises(InputError, match="has no fog folder"):
        check_released_files(folders["imagefolder"], ["fog"], [1])
    with pytest.raises(InputError, match="has no severity folder 3"):
        check_released_files(folders["imagefolder"], ["contrast"], [1, 3])
    check_released_files(folders["cifar-c"], ["contrast"], [5])  # a .npy file holds every severity


def test_a_folder_made_from_other_data_is_refused_before_the_clean_pass(layouts):
    source, folders = layouts
    x, y = tiny_images(12, seed=9)
    other = array_source("other", "npz", x, (y + 1) % 10, NAMES)  # other labels at the same positions
    for folder in folders.values():
        with pytest.raises(InputError, match="does not match the clean data"):
            check_released_matches(folder, ["contrast"], [1], other)
    # Nothing requested: nothing read, not even a folder that is not there.
    check_released_matches(folders["cifar-c"].parent / "absent", [], [1], other)
    check_released_matches(folders["cifar-c"].parent / "absent", ["contrast"], [], other)
