"""Spatter's OpenCV chain (Canny, chamfer distance transform, equalizeHist) against OpenCV."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from macs_audit.views.corruptions.ops import gaussian
from macs_audit.views.corruptions.spatter import _water_mask, canny, chamfer_distance, equalize_hist


@pytest.mark.parametrize(("n", "size"), [(40, 32), (6, 96)])  # matrix filters, then convolutions
def test_spatter_opencv_chain_against_cv2(n, size):
    cv2 = pytest.importorskip("cv2")  # benchmark-only dependency; skipped where absent
    gen = torch.Generator().manual_seed(0)
    liquid = torch.randn(n, 1, size, size, generator=gen) * 0.3 + 0.65
    liquid = gaussian(liquid, 1.0)
    liquid = torch.where(liquid < 0.69, torch.zeros_like(liquid), liquid)
    liquid8 = liquid.clamp(0, 1).mul(255).floor()
    edges = canny(liquid8, 50, 150)
    dist = chamfer_distance(edges, 20.0)
    for i in range(liquid8.shape[0]):
        u8 = liquid8[i, 0].numpy().astype(np.uint8)
        ref_edges = cv2.Canny(u8, 50, 150)
        assert ((ref_edges > 0) == edges[i, 0].numpy()).all()
        ref_dist = np.minimum(cv2.distanceTransform(255 - ref_edges, cv2.DIST_L2, 5), 20)
        assert np.abs(ref_dist - dist[i, 0].numpy()).max() < 1e-3
        d8 = np.floor(cv2.blur(ref_dist, (3, 3))).astype(np.uint8)
        ours = equalize_hist(torch.from_numpy(d8.astype(np.float32))[None, None])
        assert (ours[0, 0].numpy() == cv2.equalizeHist(d8)).all()


def test_chamfer_distance_steps_and_cap():
    # one edge pixel: the 5x5 mask's steps are 1 (axial), 1.4 (diagonal) and 2.1969 (knight),
    # in OpenCV's 16-bit fixed point; farther away the distance is capped
    edges = torch.zeros(1, 1, 16, 16, dtype=torch.bool)
    edges[0, 0, 8, 8] = True
    d = chamfer_distance(edges, cap=3.0)[0, 0]
    assert d[8, 8] == 0 and d[8, 11] == pytest.approx(3.0) and d[5, 8] == pytest.approx(3.0)
    assert d[9, 9] == pytest.approx(1.4, abs=1e-4) and d[9, 10] == pytest.approx(2.1969, abs=1e-4)
    assert d[0, 0] == 3.0 and d[15, 15] == 3.0


def test_canny_and_equalize_hist_on_flat_images():
    flat = torch.full((2, 1, 16, 16), 90.0)
    assert not canny(flat, 50, 150).any()
    assert torch.equal(equalize_hist(flat), flat)  # a single level maps to itself


def test_empty_liquid_gives_no_water():
    # the reference divides 0 by 0 here (NaN); no liquid means no spatter
    mask = _water_mask(torch.zeros(2, 1, 32, 32), 0.5)
    assert torch.equal(mask, torch.zeros_like(mask))
