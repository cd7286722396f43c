"""The shared corruption operations."""

from __future__ import annotations

import pytest
import torch

from macs_audit.views.corruptions.ops import to_float, to_uint8, zero_below


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
