"""WebDataset shards written by webdataset's own writer, read as a source: the same images, labels and order as
the same photographs in a folder, decoded by the same pipeline; their faults one line each."""

import io
import tarfile

import numpy as np
import pytest
from fixtures.shift_trees import write_folder_and_shards
from PIL import Image

from macs_audit.data.loading import DataSpec, load_data
from macs_audit.data.shards import expand, index_shards, is_shard_spec
from macs_audit.errors import InputError, UsageError
from macs_audit.models.config import ModelConfig

wds = pytest.importorskip("webdataset")


def test_shards_read_as_the_same_folder(tmp_path):
    folder, spec = write_folder_and_shards(tmp_path)
    assert is_shard_spec(spec) and len(expand(spec)) == 3
    shards, _ = load_data(DataSpec(spec), (32, 32), crop_pct=0.875)
    images, _ = load_data(DataSpec(folder), (32, 32), crop_pct=0.875)
    assert shards.format == "shards" and len(shards) == len(images) == 12
    assert shards.labels.tolist() == images.labels.tolist() and shards.class_names == images.class_names
    every = np.arange(12)
    assert np.array_equal(shards.images(every), images.images(every))  # the same bytes, the same pipeline
    subset, _ = load_data(DataSpec(spec, limit=6, seed=3), (24, 40))
    alike, _ = load_data(DataSpec(folder, limit=6, seed=3), (24, 40))
    assert np.array_equal(subset.images(np.arange(6)), alike.images(np.arange(6)))


def test_the_index_holds_offsets_not_pixels(tmp_path):
    _, spec = write_folder_and_shards(tmp_path)
    index = index_shards(expand(spec))
    assert index.shard.tolist() == [0] * 5 + [1] * 5 + [2] * 2
    assert index.offset.dtype == np.int64 and (index.size > 0).all()


def test_brace_ranges_expand_zero_padded():
    assert [p.name for p in expand("a-{08..11}.tar")] == ["a-08.tar", "a-09.tar", "a-10.tar", "a-11.tar"]
    with pytest.raises(UsageError, match="names no shard"):
        expand("a-{5..1}.tar")


def _tar(path, members: dict[str, bytes]):
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def test_shard_faults_are_one_line(tmp_path):
    image = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(image, format="PNG")
    _tar(tmp_path / "nolabel.tar", {"a.png": image.getvalue()})
    with pytest.raises(InputError, match="sample 'a' has no .cls label"):
        index_shards([tmp_path / "nolabel.tar"])
    _tar(tmp_path / "noimage.tar", {"a.cls": b"1"})
    with pytest.raises(InputError, match="sample 'a' has no image"):
        index_shards([tmp_path / "noimage.tar"])
    _tar(tmp_path / "badlabel.tar", {"a.png": image.getvalue(), "a.cls": b"cat"})
    with pytest.raises(InputError, match="holds 'cat', not a class index"):
        index_shards([tmp_path / "badlabel.tar"])
    (tmp_path / "gz.tar").write_bytes(b"\x1f\x8b" + b"0" * 600)
    with pytest.raises(InputError, match="is not an uncompressed tar shard"):
        index_shards([tmp_path / "gz.tar"])
    with pytest.raises(InputError, match="shard not found"):
        index_shards([tmp_path / "gone-000.tar"])


def test_a_classes_file_beside_the_shards_names_them_as_the_folder_is_named(tmp_path):
    """WordNet ids in classes.txt (line i names label i): the shard set maps by WordNet id as the same images in
    folders named by those ids do."""
    from fixtures.shift_trees import subset_classes

    from macs_audit.data.label_space import load_mapped_sets

    folder, spec = write_folder_and_shards(tmp_path)
    wnids = subset_classes("imagenet_a", 3)  # sorted: the folder's label order
    for label, wnid in enumerate(wnids):
        (folder / str(label)).rename(folder / wnid)
    assert load_data(DataSpec(spec))[0].class_names == ["0", "1", "2"]  # without the file: numbers
    (tmp_path / "classes.txt").write_text("\n".join(wnids) + "\n")
    shards, _ = load_data(DataSpec(spec), (32, 32))
    assert shards.class_names == wnids
    by_folder, by_shards = load_mapped_sets([("f", folder), ("s", spec)], 1000, ModelConfig(input_size=(32, 32)))
    assert by_shards.space.mapped_by == by_folder.space.mapped_by == "WordNet ids (timm's imagenet_synsets.txt)"
    assert by_shards.space.outputs.tolist() == by_folder.space.outputs.tolist()


def test_a_classes_file_must_name_every_label_once(tmp_path):
    _, spec = write_folder_and_shards(tmp_path)
    (tmp_path / "classes.txt").write_text("a\nb\n")
    with pytest.raises(InputError, match="names 2 classes but the shards' labels go up to 2"):
        load_data(DataSpec(spec))
    (tmp_path / "classes.txt").write_text("a\nb\na\n")
    with pytest.raises(InputError, match="class name 'a' appears twice; classes need distinct names"):
        load_data(DataSpec(spec))


def test_shards_and_shift_sets_crop_with_the_models_crop_offset(tmp_path):
    """A model whose centre crop floors an odd margin (transformers' image processors): the shards and a
    --shift-data set get the folder's pixels under that rule, which differ from the rounded crop's."""
    from macs_audit.data.label_space import load_mapped_sets

    folder, spec = write_folder_and_shards(tmp_path)
    every = np.arange(12)
    crop = {"crop_pct": 0.875, "crop_offset": "floor"}
    floored = load_data(DataSpec(folder), (32, 32), **crop)[0].images(every)
    rounded = load_data(DataSpec(folder), (32, 32), crop_pct=0.875)[0].images(every)
    assert not np.array_equal(floored, rounded)  # some image has an odd margin
    shards, info = load_data(DataSpec(spec), (32, 32), **crop)
    assert np.array_equal(shards.images(every), floored) and "floored" in info["pipeline"]
    for path in (folder, spec):
        (mapped,) = load_mapped_sets([("s", path)], 3, ModelConfig(input_size=(32, 32), **crop))
        assert np.array_equal(mapped.source.images(every), floored), path
