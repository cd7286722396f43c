"""Every loader against files written in the real format."""

import pickle

import numpy as np
import pytest
from conftest import tiny_images

from macs_audit.data.sources import load_source
from macs_audit.data.splits import stratified_subset
from macs_audit.errors import InputError, UsageError


def write_cifar10_dir(root, n_per_batch=20, seed=0):
    """The official cifar-10-batches-py layout: pickled dicts with bytes keys, rows of 3072 bytes (RGB planes)."""
    root.mkdir()
    rng = np.random.default_rng(seed)
    names = [b"airplane", b"automobile", b"bird", b"cat", b"deer", b"dog", b"frog", b"horse", b"ship", b"truck"]
    with open(root / "batches.meta", "wb") as fh:
        pickle.dump({b"num_cases_per_batch": n_per_batch, b"label_names": names, b"num_vis": 3072}, fh, protocol=2)
    batches = {}
    for name in ["data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5", "test_batch"]:
        data = rng.integers(0, 256, size=(n_per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, n_per_batch)]
        batches[name] = (data, labels)
        with open(root / name, "wb") as fh:
            pickle.dump(
                {
                    b"batch_label": name.encode(),
                    b"labels": labels,
                    b"data": data,
                    b"filenames": [b"x.png"] * n_per_batch,
                },
                fh,
                protocol=2,
            )
    return batches


def test_builtin_cifar10_test_set():
    source = load_source(None)
    assert len(source) == 10_000
    assert source.class_names[0] == "airplane" and source.num_classes == 10
    assert np.bincount(source.labels).tolist() == [1000] * 10
    images = source.images(np.array([0, 9999]))
    assert images.shape == (2, 32, 32, 3) and images.dtype == np.uint8


def test_npz_source_nhwc_and_nchw(tmp_path):
    x, y = tiny_images(12)
    np.savez(tmp_path / "a.npz", x=x, y=y)
    np.savez(tmp_path / "b.npz", x=x.transpose(0, 3, 1, 2), y=y, class_names=np.array([f"c{i}" for i in range(10)]))
    a, b = load_source(tmp_path / "a.npz"), load_source(tmp_path / "b.npz")
    assert (a.images(np.arange(12)) == x).all() and (b.images(np.arange(12)) == x).all()
    assert b.class_names[3] == "c3" and a.class_names[0] == "airplane"


@pytest.mark.parametrize(
    "key, names",
    [
        ("class_names", np.array([f"c{i}" for i in range(100)])),
        ("fine_names", np.array([f"c{i}" for i in range(100)])),  # CIFAR-100's usual key
        ("fine_label_names", np.array([f"c{i}".encode() for i in range(100)])),  # bytes, as CIFAR's pickles hold
        ("label_names", np.array([f"c{i}" for i in range(100)])),
        ("classes", np.array([f"c{i}" for i in range(100)])),
    ],
)
def test_npz_class_names_under_the_common_keys(tmp_path, key, names):
    x, _ = tiny_images(200)
    np.savez(tmp_path / "c100.npz", x=x, y=np.arange(200) % 100, **{key: names})
    source = load_source(tmp_path / "c100.npz")
    assert source.num_classes == 100 and source.class_names[:3] == ["c0", "c1", "c2"]


def test_npz_class_names_key_order_and_numbers_that_are_not_names(tmp_path):
    x, y = tiny_images(20)
    named = {
        "label_names": np.array([f"l{i}" for i in range(10)]),
        "class_names": np.array([f"c{i}" for i in range(10)]),
    }
    np.savez(tmp_path / "both.npz", x=x, y=y, **named)
    assert load_source(tmp_path / "both.npz").class_names[0] == "c0"  # ours first
    np.savez(tmp_path / "numbers.npz", x=x, y=y, classes=np.arange(10))  # indices, not names
    assert load_source(tmp_path / "numbers.npz").class_names[0] == "airplane"


@pytest.mark.parametrize(
    "arrays,message",
    [
        (dict(x=np.zeros((2, 4, 4, 3), np.uint8)), "needs arrays 'x'"),
        (dict(x=np.zeros((2, 4, 4, 3), np.float32), y=np.zeros(2, np.int64)), "uint8"),
        (dict(x=np.zeros((0, 4, 4, 3), np.uint8), y=np.zeros(0, np.int64)), "empty"),
        (dict(x=np.zeros((2, 4, 4, 3), np.uint8), y=np.array([0, -1])), "out of range"),
        (dict(x=np.zeros((2, 4, 4, 3), np.uint8), y=np.array([0, 1, 2])), "one label per image"),
    ],
)
def test_npz_bad_files(tmp_path, arrays, message):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(InputError, match=message):
        load_source(tmp_path / "bad.npz")


def test_cifar10_batches_directory(tmp_path):
    batches = write_cifar10_dir(tmp_path / "cifar-10-batches-py")
    test = load_source(tmp_path / "cifar-10-batches-py")
    data, labels = batches["test_batch"]
    assert len(test) == 20 and test.labels.tolist() == labels
    img = test.images(np.array([3]))[0]
    # Row layout: 1024 red, 1024 green, 1024 blue, each row-major 32x32.
    assert img[5, 7, 0] == data[3, 5 * 32 + 7] and img[5, 7, 2] == data[3, 2048 + 5 * 32 + 7]
    train = load_source(tmp_path / "cifar-10-batches-py", split="train")
    assert len(train) == 100 and train.class_names[9] == "truck"


def test_cifar100_directory(tmp_path):
    root = tmp_path / "cifar-100-python"
    root.mkdir()
    fine = [f"class{i}".encode() for i in range(100)]
    with open(root / "meta", "wb") as fh:
        pickle.dump({b"fine_label_names": fine, b"coarse_label_names": [b"c"] * 20}, fh, protocol=2)
    data = np.arange(5 * 3072, dtype=np.int64).astype(np.uint8).reshape(5, 3072)
    with open(root / "test", "wb") as fh:
        pickle.dump(
            {
                b"filenames": [b"f"] * 5,
                b"batch_label": b"testing",
                b"fine_labels": [0, 99, 5, 5, 7],
                b"coarse_labels": [0, 1, 2, 3, 4],
                b"data": data,
            },
            fh,
            protocol=2,
        )
    source = load_source(root)
    assert source.num_classes == 100 and source.labels.tolist() == [0, 99, 5, 5, 7]
    assert source.class_names[99] == "class99"


def test_cifar_pickle_with_code_is_refused(tmp_path):
    write_cifar10_dir(tmp_path / "c")

    class Evil:
        def __reduce__(self):
            import os

            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    with open(tmp_path / "c" / "test_batch", "wb") as fh:
        pickle.dump({b"data": Evil(), b"labels": []}, fh, protocol=2)
    with pytest.raises(InputError, match="refusing"):
        load_source(tmp_path / "c")
    assert not (tmp_path / "pwned").exists()


def test_imagefolder(tmp_path):
    from PIL import Image

    x, y = tiny_images(6)
    for i in range(6):
        d = tmp_path / "folder" / ["cat", "dog"][i % 2]
        d.mkdir(parents=True, exist_ok=True)
        Image.fromarray(x[i]).save(d / f"{i}.png")
    Image.fromarray(np.zeros((40, 50, 3), np.uint8)).save(tmp_path / "folder" / "dog" / "big.png")
    source = load_source(tmp_path / "folder", image_size=(32, 32))
    assert source.class_names == ["cat", "dog"] and len(source) == 7
    assert (source.labels == [0, 0, 0, 1, 1, 1, 1]).all()
    imgs = source.images(np.arange(7))
    assert imgs.shape == (7, 32, 32, 3)
    assert (imgs[0] == x[0]).all()  # cat/0.png, lossless PNG at the native size


def test_data_errors(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_source(tmp_path / "missing.npz")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no images"):
        load_source(tmp_path / "empty")
    (tmp_path / "x.csv").write_text("1,2")
    with pytest.raises(UsageError, match="unknown data file"):
        load_source(tmp_path / "x.csv")


def test_stratified_subset():
    labels = np.repeat(np.arange(10), [100, 100, 100, 100, 100, 100, 100, 100, 100, 10])
    pos = stratified_subset(labels, 91, seed=0)
    counts = np.bincount(labels[pos], minlength=10)
    assert len(pos) == 91 and counts[:9].tolist() == [10] * 9 and counts[9] == 1
    assert (pos == stratified_subset(labels, 91, seed=0)).all()
    assert not (pos == stratified_subset(labels, 91, seed=1)).all()
    assert len(stratified_subset(labels, 5000)) == len(labels)


def test_image_folders_resize_the_shorter_side_then_centre_crop_as_torchvision_does(tmp_path):
    """With crop_pct, an image folder is read as timm/torchvision evaluate ImageNet: Resize(floor(224 /
    0.875) = 256, bicubic) on the shorter side, then CenterCrop(224); the report says which pipeline ran.
    The resize is the one preprocessing's (torch's antialiased uint8 kernel): torchvision's on a uint8 tensor
    to the bit, its PIL path to 2 grey levels (Pillow rounds its fixed-point filter weights otherwise)."""
    import torch
    from PIL import Image
    from torchvision import transforms
    from torchvision.transforms import v2

    from macs_audit.data.loading import DataSpec, load_data

    rng = np.random.default_rng(0)
    for name, size in (("wide", (300, 200)), ("tall", (181, 333))):
        (tmp_path / "a").mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)).save(
            tmp_path / "a" / f"{name}.png"
        )
    source, info = load_data(DataSpec(tmp_path), (224, 224), crop_pct=0.875)
    reference = transforms.Compose(
        [transforms.Resize(256, interpolation=transforms.InterpolationMode.BICUBIC), transforms.CenterCrop(224)]
    )
    on_tensors = v2.Compose([v2.Resize(256, interpolation=v2.InterpolationMode.BICUBIC), v2.CenterCrop(224)])
    images = source.images(np.arange(2))
    for row, name in enumerate(("tall", "wide")):  # files sorted by name
        with Image.open(tmp_path / "a" / f"{name}.png") as im:
            rgb = im.convert("RGB")
        tensor = torch.from_numpy(np.array(rgb)).permute(2, 0, 1)
        assert np.array_equal(images[row], on_tensors(tensor).permute(1, 2, 0).numpy())
        by_pil = np.asarray(reference(rgb)).astype(np.int16)
        assert np.abs(images[row] - by_pil).max() <= 2
    assert info["pipeline"] == "shorter side resized to 256 (bicubic), centre crop 224x224 (crop_pct 0.875)"
    _, whole = load_data(DataSpec(tmp_path), (224, 224))
    assert whole["pipeline"] == "resized to 224x224 (bilinear, aspect not kept)"
