"""The shared corruption operations."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch

from macs_audit.views.corruptions.ops import filter2d_direct, gaussian, to_float, to_uint8, zero_below


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_zero_below_is_where_below(dtype):
    # x where x >= threshold, else 0: values exactly at the threshold are kept, the next value
    # below it is not (as torch.where(x < threshold, 0, x) compares in x's dtype).
    t = torch.tensor(0.69, dtype=dtype)
    x = torch.cat(
        [
            torch.linspace(0, 1, 1001, dtype=dtype),
            t[None],
            torch.nextafter(t, torch.tensor(0.0, dtype=dtype))[None],
            torch.nextafter(t, torch.tensor(1.0, dtype=dtype))[None],
        ]
    )
    expected = torch.where(x < 0.69, torch.zeros_like(x), x)
    assert torch.equal(zero_below(x.clone(), 0.69), expected)


def test_uint8_round_trip_in_grey_levels():
    # 0..255 units: every level comes back (no float noise to floor); values are clipped and
    # truncated, and the layout goes NHWC -> NCHW -> NHWC
    levels = torch.arange(256, dtype=torch.uint8).repeat(3).view(1, 16, 16, 3)
    x = to_float(levels, unit=False)
    assert x.shape == (1, 3, 16, 16) and x.is_contiguous()
    assert torch.equal(to_uint8(x, unit=False), levels)
    assert torch.equal(
        to_uint8(torch.tensor([-3.0, 0.99, 254.7, 300.0]).view(1, 1, 2, 2), unit=False).view(-1),
        torch.tensor([0, 0, 254, 255], dtype=torch.uint8),
    )


# a depthwise convolution, then FFTs (15 taps and more); one channel: shifted windows, then FFTs
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("size", [5, 17])
def test_filter2d_direct_matches_scipy_correlate(size, channels):
    rng = np.random.default_rng(size)
    x = torch.from_numpy(rng.random((2, channels, 50, 41)))
    kernel = rng.random((size, size))  # not symmetric: a flipped kernel would fail
    ours = filter2d_direct(x, tuple(map(tuple, kernel.tolist()))).numpy()
    ref = [[ndi.correlate(x[i, c].numpy(), kernel, mode="mirror") for c in range(channels)] for i in range(2)]
    # float64 sums of up to 289 products in another order (or by FFT): under n eps sum|w x| = 289 x 2^-53 x 289
    # = 9e-12; 1e-9 leaves 100x
    assert np.abs(ours - np.array(ref)).max() < 1e-9
    if channels == 1:  # (N, H, W) planes, and a strided view (the spatter mask's layout)
        strided = x[:, 0].transpose(1, 2).contiguous().transpose(1, 2)
        planes = filter2d_direct(strided, tuple(map(tuple, kernel.tolist())))
        assert np.abs(planes.numpy() - np.array(ref)[:, 0]).max() < 1e-9
        zeros = ((0.0,) * size,) * size
        assert not filter2d_direct(x, zeros).any()


@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("mode", ["nearest", "reflect", "mirror"])
def test_gaussian_on_larger_images_matches_scipy(mode, channels):
    # above 32x32 the filter runs as depthwise convolutions of the padded planes (one channel:
    # as shifted windows)
    x = torch.from_numpy(np.random.default_rng(2).random((2, channels, 100, 90)))
    for sigma in (1.0, 2.5):
        ours = gaussian(x, sigma, mode, 3.0).numpy()
        ref = [
            [ndi.gaussian_filter(x[i, c].numpy(), sigma, mode=mode, truncate=3.0) for c in range(channels)]
            for i in range(2)
        ]
        # float64, weights summing to 1 on values in [0, 1]: another order of <= 2 x 17 taps differs by under
        # 34 x 2^-53 = 4e-15 (an FFT by about log2(n) eps); 1e-12 leaves over 100x
        assert np.abs(ours - np.array(ref)).max() < 1e-12, (mode, sigma)


def test_to_uint8_of_channels_last_planes():
    x = torch.rand(2, 3, 7, 5) * 300 - 20
    ours = to_uint8(x.contiguous(memory_format=torch.channels_last), unit=False)
    assert ours.is_contiguous() and torch.equal(ours, to_uint8(x.clone(), unit=False))
