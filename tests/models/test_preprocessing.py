"""The one preprocessing: the same rounding rule on numpy and torch, and resize/normalise on both."""

import numpy as np
import torch

from macs_audit.errors import InputError
from macs_audit.models.preprocessing import UNIT_SCALE, resize_and_normalize, to_unit_float, unit_float_nchw


def test_every_grey_level_maps_by_one_rule_on_numpy_and_torch():
    levels = np.arange(256, dtype=np.uint8).reshape(1, 16, 16, 1).repeat(3, axis=3)
    from_numpy = to_unit_float(levels)
    from_torch = to_unit_float(torch.from_numpy(levels)).numpy()
    from_nchw = unit_float_nchw(torch.from_numpy(levels).permute(0, 3, 1, 2)).numpy()
    assert from_numpy.shape == (1, 3, 16, 16) and from_numpy.dtype == np.float32
    expected = np.arange(256, dtype=np.float32) * UNIT_SCALE
    np.testing.assert_array_equal(from_numpy[0, 0].ravel(), expected)
    np.testing.assert_array_equal(from_torch, from_numpy)
    np.testing.assert_array_equal(from_nchw, from_numpy)
    assert from_numpy.min() == 0 and from_numpy.max() == 1


def test_float_tensors_pass_through_unscaled():
    x = torch.rand(2, 3, 4, 4)
    assert torch.equal(unit_float_nchw(x), x)


def test_normalise_numpy_and_torch_agree_and_resize_only_when_needed():
    rng = np.random.default_rng(0)
    x = rng.random((2, 3, 8, 8), dtype=np.float32)
    mean, std = [0.5, 0.4, 0.3], [0.2, 0.25, 0.3]
    by_numpy = resize_and_normalize(x, (8, 8), mean, std)
    by_torch = resize_and_normalize(torch.from_numpy(x), (8, 8), mean, std).numpy()
    np.testing.assert_allclose(by_numpy, by_torch, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_numpy[:, 1], (x[:, 1] - 0.4) / 0.25, atol=1e-6)
    assert resize_and_normalize(x, (16, 12), mean, std).shape == (2, 3, 16, 12)
    assert tuple(resize_and_normalize(torch.from_numpy(x), (4, 4), mean, std).shape) == (2, 3, 4, 4)


def test_channel_mismatch_is_an_input_error():
    x = np.zeros((1, 1, 8, 8), dtype=np.float32)
    for images in (x, torch.from_numpy(x)):
        try:
            resize_and_normalize(images, (8, 8), [0.5, 0.5, 0.5], [0.2, 0.2, 0.2])
        except InputError as exc:
            assert "1 channels" in str(exc)
        else:
            raise AssertionError("expected an InputError")
