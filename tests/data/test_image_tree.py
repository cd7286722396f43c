"""The ImageNet-C image tree (<corruption>/<severity>/<class>/<image>): written by `corrupt`'s writer, read back
aligned with the clean data's positions, class folders mapped by name, damaged files rewritten on a rerun."""

import os
import shutil

import numpy as np
import pytest
from conftest import tiny_images
from PIL import Image

from macs_audit.data.grid import Grid, corrupted_batches, write_corruption_tree
from macs_audit.data.image_tree import is_image_tree, tree_source
from macs_audit.data.released import check_released_files, check_released_matches, released_source
from macs_audit.data.sources import array_source, load_imagefolder
from macs_audit.errors import InputError

# Class names in label order that are not sorted, so folder order (sorted) differs from label order.
NAMES = ["zebra", "apple", "mango"]


def _source(n=10, size=64, seed=0):
    x, _ = tiny_images(n, seed=seed, size=size)
    y = np.arange(n) % 3  # classes interleaved: the tree groups them by folder
    return array_source("tiny", "npz", x, y, NAMES)


def _generated(source, name, severity, batch_size, corruption_set):
    batches = corrupted_batches(Grid(source, 0, batch_size, "cpu", corruption_set=corruption_set), name, severity)
    return np.concatenate([b.numpy() for _, b in batches])


def test_png_tree_reads_back_the_generated_bytes_at_the_data_positions(tmp_path):
    source = _source()
    written, kept = write_corruption_tree(
        tmp_path, Grid(source, 0, 4, "cpu", corruption_set="cifar"), ("contrast", "gaussian_noise"), (1, 2)
    )
    assert (written, kept) == (2 * 2 * 10, 0)
    assert sorted(p.name for p in (tmp_path / "contrast" / "2").iterdir()) == sorted(NAMES)
    zebras = sorted(p.name for p in (tmp_path / "contrast" / "2" / "zebra").iterdir())
    assert zebras == ["0.png", "3.png", "6.png", "9.png"]
    assert is_image_tree(tmp_path)
    check_released_files(tmp_path, ["contrast", "gaussian_noise"], [1, 2])
    check_released_matches(tmp_path, ["contrast", "gaussian_noise"], [1, 2], source)
    for name in ("contrast", "gaussian_noise"):
        for severity in (1, 2):
            read = released_source(tmp_path, source, name, severity)
            assert read.format == "imagefolder" and read.class_names == NAMES
            np.testing.assert_array_equal(read.labels, source.labels)
            everything = read.images(np.arange(len(read)))
            np.testing.assert_array_equal(everything, _generated(source, name, severity, 4, "cifar"))


def test_jpeg_tree_at_224_px_is_quality_85_and_close(tmp_path):
    # Smooth images (JPEG's case; random noise would lose several grey levels to it).
    rows, cols = np.meshgrid(np.linspace(0, 1, 224), np.linspace(0, 1, 224), indexing="ij")
    x = np.stack([np.stack([rows * cols * 200 + 20 * i, rows * 255, 40 + 150 * cols], -1) for i in range(6)])
    source = array_source("smooth", "npz", x.astype(np.uint8), np.arange(6) % 3, NAMES)
    write_corruption_tree(tmp_path, Grid(source, 0, 6, "cpu", corruption_set="imagenet"), ("contrast",), (1,))
    file = tmp_path / "contrast" / "1" / "apple" / "1.jpg"
    with Image.open(file) as im:
        assert im.format == "JPEG" and im.size == (224, 224)
    read = tree_source(tmp_path, source, "contrast", 1).images(np.arange(6)).astype(float)
    want = _generated(source, "contrast", 1, 6, "imagenet").astype(float)
    assert 0 < np.abs(read - want).mean() < 1  # lossy, by a fraction of a grey level


def test_a_damaged_or_missing_file_is_rewritten_and_the_rest_kept(tmp_path):
    source = _source()
    write_corruption_tree(
        tmp_path, Grid(source, 0, 4, "cpu", corruption_set="tiny-imagenet"), ("gaussian_noise",), (1,)
    )
    cell = tmp_path / "gaussian_noise" / "1"
    truncated, removed, resized = cell / "zebra" / "3.jpg", cell / "apple" / "1.jpg", cell / "mango" / "5.jpg"
    original = truncated.read_bytes()
    truncated.write_bytes(original[: len(original) // 2])
    removed.unlink()
    Image.new("RGB", (32, 32)).save(resized, format="JPEG")
    stale = cell / "zebra" / ".0.jpg.abcd1234.tmp"  # what a killed run leaves
    stale.write_bytes(b"x")
    os.utime(stale, (1, 1))
    others = {p: p.stat().st_mtime_ns for p in cell.rglob("*.jpg") if p not in (truncated, resized)}

    written, kept = write_corruption_tree(
        tmp_path, Grid(source, 0, 4, "cpu", corruption_set="tiny-imagenet"), ("gaussian_noise",), (1,)
    )
    assert (written, kept) == (3, 7)
    assert truncated.read_bytes() == original  # the same bytes again: same seed, same batch
    assert removed.exists() and Image.open(resized).size == (64, 64)
    assert all(p.stat().st_mtime_ns == t for p, t in others.items())
    assert not stale.exists()


def test_class_folders_that_name_no_class_and_missing_folders_are_errors(tmp_path):
    source = _source()
    write_corruption_tree(tmp_path, Grid(source, 0, 10, "cpu", corruption_set="cifar"), ("contrast",), (1, 2))
    with pytest.raises(InputError, match="has no fog folder"):
        check_released_files(tmp_path, ["fog"], [1])
    with pytest.raises(InputError, match="has no severity folder 3"):
        check_released_files(tmp_path, ["contrast"], [1, 3])
    (tmp_path / "contrast" / "2" / "apple").rename(tmp_path / "contrast" / "2" / "dog")
    with pytest.raises(InputError, match=r"class folder \S+dog names no class of the data \(3 classes: zebra"):
        check_released_matches(tmp_path, ["contrast"], [1, 2], source)
    with pytest.raises(InputError, match="dog names no class"):
        tree_source(tmp_path, source, "contrast", 2)
    shutil.rmtree(tmp_path / "contrast" / "2" / "dog")
    (tmp_path / "contrast" / "2" / "dog").mkdir()
    with pytest.raises(InputError, match="holds no images"):
        check_released_files(tmp_path, ["contrast"], [2])
    for folder in (tmp_path / "contrast" / "2").iterdir():
        shutil.rmtree(folder)
    with pytest.raises(InputError, match="is empty"):
        check_released_files(tmp_path, ["contrast"], [2])
    with pytest.raises(InputError, match="does not match the clean data"):  # other images than the data's
        tree_source(tmp_path, _source(n=13), "contrast", 1)


def test_a_released_tree_beside_its_clean_folder_serves_a_subset_and_family_folders(tmp_path):
    """The ImageNet-C situation: the tree holds the whole clean folder (same names, same order); the audit
    evaluates a --limit subset of that folder; the tars are extracted one per family folder."""
    x, _ = tiny_images(9, size=64)
    clean = tmp_path / "val"
    for i in range(9):
        (clean / NAMES[i % 3]).mkdir(parents=True, exist_ok=True)
        Image.fromarray(x[i]).save(clean / NAMES[i % 3] / f"img{i}.png")
    full = load_imagefolder(clean, (64, 64))
    tree = tmp_path / "tree"
    write_corruption_tree(tree / "noise", Grid(full, 0, 9, "cpu", corruption_set="cifar"), ("gaussian_noise",), (1,))
    subset = full.subset(np.array([1, 4, 8]))
    read = released_source(tree, subset, "gaussian_noise", 1)
    np.testing.assert_array_equal(read.labels, subset.labels)
    want = _generated(full, "gaussian_noise", 1, 9, "cifar")[[1, 4, 8]]
    np.testing.assert_array_equal(read.images(np.arange(3)), want)
