"""The View concept: clean, perturbation and corruption views share one shape and one conversion."""

import numpy as np
import torch

from macs_audit.pixels import to_unit_float
from macs_audit.views import view as views


def _images(n=6, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)


def test_clean_view_is_the_unit_float_conversion():
    images = _images()
    assert views.CLEAN.kind == "clean" and views.CLEAN.name == "clean"
    np.testing.assert_array_equal(views.CLEAN(images, 0), to_unit_float(images))
    np.testing.assert_array_equal(views.CLEAN(torch.from_numpy(images), 0).numpy(), to_unit_float(images))


def test_views_describe_themselves():
    p = views.perturbation("noise", seed=0, device="cpu")
    c = views.corruption("fog", 3, seed=0, device="cpu", frost_textures=None)
    r = views.read_corruption("fog", 3)
    assert (p.name, p.kind, p.corruption) == ("noise", "perturbation", None)
    assert (c.name, c.kind, c.corruption, c.severity) == ("fog@3", "corruption", "fog", 3)
    assert (r.name, r.kind, r.corruption, r.severity) == ("fog@3", "corruption", "fog", 3)


def test_views_keep_numpy_as_numpy_and_tensors_as_tensors():
    images = _images()
    for view in (views.perturbation("noise+blur", 0, "cpu"), views.corruption("gaussian_noise", 2, 0, "cpu", None)):
        out = view(images, 0)
        assert isinstance(out, np.ndarray) and out.shape == (6, 3, 32, 32) and out.dtype == np.float32
        on_device = view(torch.from_numpy(images), 0)
        assert torch.is_tensor(on_device)
        np.testing.assert_array_equal(on_device.numpy(), out)
        assert 0 <= out.min() and out.max() <= 1


def test_a_batch_is_seeded_by_its_position():
    images = _images()
    view = views.perturbation("noise", 0, "cpu")
    assert np.array_equal(view(images, 0), view(images, 0))
    assert not np.array_equal(view(images, 0), view(images, 500))


def test_views_run_where_the_model_runs():
    assert views.view_device("cpu") == "cpu"
    assert views.view_device("cuda:1") == "cuda:1"
