"""Tests of macs_audit.data.npy_layout: the released CIFAR-C layout, written and read back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from macs_audit.data import npy_layout
from macs_audit.data.npy_layout import read_cifar_c, write_cifar_c
from macs_audit.errors import InputError, UsageError
from macs_audit.views.corruptions.apply import corrupt

N = 10  # images per severity


def _clean(n=N, size=8, seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n, size, size, 3), dtype=np.uint8)


def _fake(name, severity, n=N, size=8):
    """Deterministic stand-in for corrupted images: distinct per (name, severity, index)."""
    base = _clean(n, size, seed=sum(map(ord, name)))
    return (base.astype(int) + severity * 7).astype(np.uint8)


def _batches(name, severity, batch=4):
    images = _fake(name, severity)
    for start in range(0, N, batch):
        yield images[start : start + batch]


def test_round_trip(tmp_path):
    labels = np.arange(N) % 10
    calls = []
    written = write_cifar_c(
        tmp_path, _batches, labels, ["fog", "snow"], progress=lambda d, done, total: calls.append((d, done, total))
    )
    assert [p.name for p in written] == ["labels.npy", "fog.npy", "snow.npy"]
    # Each severity is a stage of its own N images (a count of the whole grid read as N x 10 per severity).
    assert calls[-1] == ("snow severity 5", N, N)
    assert calls[0] == ("fog severity 1", 4, N)
    assert {total for _, _, total in calls} == {N}
    stages = [f"{c} severity {s}" for c in ("fog", "snow") for s in range(1, 6)]
    assert [d for d, done, _ in calls if done == N] == stages

    raw = np.load(tmp_path / "fog.npy")  # the released layout, severity-major
    assert raw.dtype == np.uint8 and raw.shape == (5 * N, 8, 8, 3)
    for s in range(1, 6):
        assert np.array_equal(raw[(s - 1) * N : s * N], _fake("fog", s))
    raw_labels = np.load(tmp_path / "labels.npy")
    assert raw_labels.dtype == np.uint8 and np.array_equal(raw_labels, np.tile(labels, 5))
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left

    d = read_cifar_c(tmp_path)
    assert d.corruptions == ("snow", "fog")  # reference order
    assert d.num_per_severity == N and d.image_shape == (8, 8, 3)
    assert d.labels.dtype == np.int64 and np.array_equal(d.labels, labels)
    for name in ("fog", "snow"):
        for s in range(1, 6):
            view = d.images(name, s)
            assert isinstance(view, np.memmap) and not view.flags.writeable
            assert np.array_equal(view, _fake(name, s))
    assert d.images("fog", 2).base is d.images("fog", 4).base  # one memmap per file


def test_round_trip_with_real_corruptions_and_tensors(tmp_path):
    clean = torch.from_numpy(_clean(N, 32, seed=3))
    labels = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3])

    def images_fn(name, severity):
        for start in range(0, N, 6):  # tensors, batch size not dividing N
            yield corrupt(clean[start : start + 6], name, severity, seed=start)

    write_cifar_c(tmp_path, images_fn, labels, ["gaussian_noise", "contrast"])
    d = read_cifar_c(tmp_path)
    for s in range(1, 6):
        expected = torch.cat([corrupt(clean[i : i + 6], "gaussian_noise", s, seed=i) for i in range(0, N, 6)]).numpy()
        assert np.array_equal(d.images("gaussian_noise", s), expected)


def test_large_labels_are_int64(tmp_path):
    labels = np.array([0, 999] * (N // 2))
    write_cifar_c(tmp_path, _batches, labels, ["fog"])
    assert np.load(tmp_path / "labels.npy").dtype == np.int64
    assert np.array_equal(read_cifar_c(tmp_path).labels, labels)


def test_write_errors_leave_no_partial_file(tmp_path):
    labels = np.zeros(N, dtype=np.int64)

    def short(name, severity):
        yield _fake(name, severity)[: N - 1]

    with pytest.raises(InputError, match="expected 10"):
        write_cifar_c(tmp_path, short, labels, ["fog"])
    assert not (tmp_path / "fog.npy").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    def too_many(name, severity):
        yield _fake(name, severity)
        yield _fake(name, severity)[:1]

    with pytest.raises(InputError, match="more than"):
        write_cifar_c(tmp_path, too_many, labels, ["fog"])

    def wrong_dtype(name, severity):
        yield _fake(name, severity).astype(np.float32)

    with pytest.raises(InputError, match="uint8"):
        write_cifar_c(tmp_path, wrong_dtype, labels, ["fog"])

    def boom(name, severity):
        yield _fake(name, severity)[:4]
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        write_cifar_c(tmp_path, boom, labels, ["fog"])
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]

    with pytest.raises(UsageError, match="unknown corruption"):
        write_cifar_c(tmp_path, _batches, labels, ["fogg"])
    with pytest.raises(InputError, match="labels"):
        write_cifar_c(tmp_path, _batches, np.array([-1, 2]), ["fog"])


def test_overwrite_is_atomic(tmp_path):
    labels = np.zeros(N, dtype=np.int64)
    write_cifar_c(tmp_path, _batches, labels, ["fog"])
    before = np.load(tmp_path / "fog.npy")

    def fails_late(name, severity):
        if severity == 5:
            raise RuntimeError("crash")
        yield from _batches(name, severity)

    with pytest.raises(RuntimeError):
        write_cifar_c(tmp_path, fails_late, labels, ["fog"])
    assert np.array_equal(np.load(tmp_path / "fog.npy"), before)  # the old file survives


def _write_layout(path, labels, **arrays):
    path.mkdir(exist_ok=True)
    if labels is not None:
        np.save(path / "labels.npy", labels)
    for name, array in arrays.items():
        np.save(path / f"{name}.npy", array)
    return path


def _labels_blocks_differ(d, labels, good):
    bad = labels.copy()
    bad[-1] += 1
    _write_layout(d, bad, fog=good)


def _truncated(d, labels, good):
    _write_layout(d, labels, fog=good)
    data = (d / "fog.npy").read_bytes()
    (d / "fog.npy").write_bytes(data[:-100])


def _not_npy(d, labels, good):
    _write_layout(d, labels)
    (d / "fog.npy").write_bytes(b"not a numpy file at all")


# Each bad layout, written into a folder from the good labels and images (N images a severity, 8 x 8 RGB).
BAD_LAYOUTS = {
    "missing_dir": lambda d, labels, good: None,
    "no_labels": lambda d, labels, good: _write_layout(d, None, fog=good),
    "labels_2d": lambda d, labels, good: _write_layout(d, labels.reshape(5, N), fog=good),
    "labels_float": lambda d, labels, good: _write_layout(d, labels.astype(np.float32), fog=good),
    "labels_not_multiple": lambda d, labels, good: _write_layout(d, labels[:-1], fog=good),
    "labels_blocks_differ": _labels_blocks_differ,
    "no_corruptions": lambda d, labels, good: _write_layout(d, labels, other=good),
    "wrong_rows": lambda d, labels, good: _write_layout(d, labels, fog=good[:-1]),
    "wrong_dtype": lambda d, labels, good: _write_layout(d, labels, fog=good.astype(np.int16)),
    "grey_images": lambda d, labels, good: _write_layout(d, labels, fog=good[..., :1]),
    "mixed_sizes": lambda d, labels, good: _write_layout(
        d, labels, fog=good, snow=np.zeros((5 * N, 16, 16, 3), np.uint8)
    ),
    "truncated": _truncated,
    "not_npy": _not_npy,
}


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing_dir", "does not exist"),
        ("no_labels", "no labels.npy"),
        ("labels_2d", "1-D integer"),
        ("labels_float", "1-D integer"),
        ("labels_not_multiple", "multiple of 5"),
        ("labels_blocks_differ", "same 10 labels"),
        ("no_corruptions", "no corruption files"),
        ("wrong_rows", "uint8 of shape"),
        ("wrong_dtype", "uint8 of shape"),
        ("grey_images", "uint8 of shape"),
        ("mixed_sizes", "other files"),
        ("truncated", "truncated"),
        ("not_npy", "cannot read"),
    ],
)
def test_bad_layouts(tmp_path, case, message):
    labels = np.tile(np.arange(N) % 10, 5).astype(np.uint8)
    good = np.zeros((5 * N, 8, 8, 3), np.uint8)
    d = tmp_path / "c"
    BAD_LAYOUTS[case](d, labels, good)
    with pytest.raises(InputError, match=message) as info:
        read_cifar_c(d)
    assert "\n" not in str(info.value)


def test_images_errors(tmp_path):
    write_cifar_c(tmp_path, _batches, np.zeros(N, dtype=np.int64), ["fog"])
    d = read_cifar_c(tmp_path)
    with pytest.raises(UsageError):
        d.images("fog", 0)
    with pytest.raises(UsageError):
        d.images("smog", 1)
    with pytest.raises(InputError, match="no snow.npy"):
        d.images("snow", 1)
    assert "1 corruptions, 10 images per severity" in repr(d)
    d.close()


def test_unknown_npy_files_are_ignored(tmp_path):
    write_cifar_c(tmp_path, _batches, np.zeros(N, dtype=np.int64), ["fog"])
    np.save(tmp_path / "notes.npy", np.arange(3))
    assert read_cifar_c(tmp_path).corruptions == ("fog",)
    assert npy_layout.NUM_SEVERITIES == 5
