"""ReaL labels read from the installed timm's copy (or a file) and matched to a validation folder by file name."""

import json

import numpy as np
import pytest
from fixtures.shift_trees import validation_folder
from PIL import Image

from macs_audit.data.label_space import imagenet_synsets
from macs_audit.data.real_labels import load_real_labels, read_real_labels
from macs_audit.data.sources import load_imagefolder
from macs_audit.errors import InputError, UsageError


def test_timms_copy_is_read_and_matched_by_file_number(tmp_path):
    labels, shown = read_real_labels()
    assert len(labels) == 50_000 and "timm" in shown
    folder = validation_folder(tmp_path / "val", {1: 65, 2: 970, 3: 230})
    source = load_imagefolder(folder, (32, 32))
    real = load_real_labels(source)
    # Sorted by class folder: 65 (val 1), 230 (val 3), 970 (val 2); entry i of the file is val i + 1.
    assert real.sets == (tuple(labels[0]), tuple(labels[2]), tuple(labels[1]))
    assert source.labels.tolist() == [65, 230, 970]


def test_a_file_of_another_shape_and_a_folder_that_is_not_imagenet_validation(tmp_path):
    bad = tmp_path / "real.json"
    bad.write_text(json.dumps([[1], [2]]))
    with pytest.raises(UsageError, match="expected a list of 50,000 label lists"):
        read_real_labels(bad)
    bad.write_text(json.dumps([[1000]] * 50_000))
    with pytest.raises(UsageError, match="entry 0 is not a list of class indices 0-999"):
        read_real_labels(bad)
    folder = validation_folder(tmp_path / "val", {4: 3})
    (folder / imagenet_synsets()[3] / "ILSVRC2012_val_00000004.JPEG").rename(
        folder / imagenet_synsets()[3] / "photo.JPEG"
    )
    with pytest.raises(InputError, match="is not named as a validation image"):
        load_real_labels(load_imagefolder(folder, (32, 32)))
    small = tmp_path / "small"
    (small / "cat").mkdir(parents=True)
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(small / "cat" / "ILSVRC2012_val_00000001.png")
    with pytest.raises(InputError, match="needs the 1,000 ImageNet classes"):
        load_real_labels(load_imagefolder(small, (8, 8)))


def test_a_shard_set_of_validation_images_is_matched_by_its_keys(tmp_path):
    wds = pytest.importorskip("webdataset")
    import io

    from macs_audit.data.shards import load_shards

    numbers = {7: 65, 2: 970, 3: 230, 4: 999}  # shard order, not sorted: the index keeps it
    with wds.TarWriter(str(tmp_path / "val-000000.tar")) as sink:
        for number, label in numbers.items():
            buffer = io.BytesIO()
            Image.fromarray(np.full((16, 16, 3), label % 256, dtype=np.uint8)).save(buffer, format="PNG")
            sink.write({"__key__": f"ILSVRC2012_val_{number:08d}", "png": buffer.getvalue(), "cls": label})
    source = load_shards(str(tmp_path / "val-000000.tar"), (16, 16))
    labels, _ = read_real_labels()
    assert source.num_classes == 1000 and source.labels.tolist() == list(numbers.values())
    assert load_real_labels(source).sets == tuple(tuple(labels[n - 1]) for n in numbers)
