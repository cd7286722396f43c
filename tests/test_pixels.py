"""macs_audit.pixels: uint8 pixels to float32 in [0, 1] by one rounding rule (times float32(1/255)), on numpy
arrays and torch tensors alike, with the layout each caller needs."""

import subprocess
import sys

import numpy as np

from macs_audit.pixels import UNIT_SCALE, is_tensor, to_unit_float, unit_float_nchw


def test_every_grey_level_maps_by_one_rule_on_numpy_and_torch():
    import torch

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


def test_the_rule_is_a_multiply_which_a_division_would_not_give():
    """x * float32(1/255) and x / 255 in float32 differ on 126 of the 256 levels: whoever divides instead (a
    model's own preprocessing, a view) gets other inputs, so every path must take the rule from here."""
    levels = np.arange(256, dtype=np.uint8)
    by_rule = to_unit_float(levels.reshape(1, 16, 16, 1))[0, 0].ravel()
    divided = levels.astype(np.float32) / np.float32(255)
    assert int((by_rule != divided).sum()) == 126
    assert np.all(np.abs(by_rule - divided) <= np.spacing(divided))  # one float32 rounding apart at most


def test_numpy_input_is_left_alone_and_the_result_is_contiguous_nchw():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (2, 5, 7, 3), dtype=np.uint8)
    kept = images.copy()
    x = to_unit_float(images)
    assert x.shape == (2, 3, 5, 7) and x.dtype == np.float32 and x.flags["C_CONTIGUOUS"]
    np.testing.assert_array_equal(images, kept)
    np.testing.assert_array_equal(x[1, 2], images[1, :, :, 2] * UNIT_SCALE)


def test_a_tensor_stays_a_tensor_on_its_device_and_its_input_unchanged():
    import torch

    images = torch.from_numpy(np.random.default_rng(1).integers(0, 256, (2, 4, 6, 3), dtype=np.uint8))
    kept = images.clone()
    x = to_unit_float(images)
    assert is_tensor(x) and x.dtype == torch.float32 and x.device == images.device and tuple(x.shape) == (2, 3, 4, 6)
    assert torch.equal(images, kept)


def test_float_tensors_pass_through_unscaled():
    import torch

    x = torch.rand(2, 3, 4, 4)
    assert torch.equal(unit_float_nchw(x), x)
    half = x.half()
    assert unit_float_nchw(half).dtype == torch.float32  # as float32, not rescaled
    assert torch.equal(unit_float_nchw(half), half.float())


def test_is_tensor_tells_tensors_from_arrays_without_importing_torch():
    """The views use this module without torch: importing it and testing an array must not load torch."""
    code = (
        "import sys, numpy as np\n"
        "from macs_audit.pixels import is_tensor, to_unit_float\n"
        "assert not is_tensor(np.zeros(3)) and not is_tensor([1])\n"
        "to_unit_float(np.zeros((1, 2, 2, 3), np.uint8))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    import torch

    assert is_tensor(torch.zeros(1)) and is_tensor(torch.zeros(1, dtype=torch.uint8))
