"""Test images and the reference check shared by the corruption tests."""

from __future__ import annotations

import numpy as np
import scipy.ndimage as ndi
import torch

from macs_audit.views.corruptions.apply import corrupt
from macs_audit.views.corruptions.table import CIFAR

# The corruptions that draw nothing: the same bytes for every seed, batch split and device chunking.
DETERMINISTIC = {
    "brightness",
    "contrast",
    "saturate",
    "pixelate",
    "jpeg_compression",
    "defocus_blur",
    "gaussian_blur",
    "zoom_blur",
}
# Monotone in mean |corrupted - clean| by their parameters (section 3 of the reference facts).
# Not monotone: glass_blur (sigma drops at severity 4), snow (severity 3 raises the threshold),
# elastic_transform (the affine jitter shrinks while alpha grows), spatter (water -> mud at 4),
# saturate (1-2 desaturate, 3-5 oversaturate), frost (tested with its own measure).
MONOTONE = (
    "gaussian_noise",
    "shot_noise",
    "impulse_noise",
    "speckle_noise",
    "defocus_blur",
    "motion_blur",
    "zoom_blur",
    "gaussian_blur",
    "fog",
    "brightness",
    "contrast",
    "pixelate",
    "jpeg_compression",
)


def sample_images(n: int = 6, seed: int = 0, size: int = 32) -> torch.Tensor:
    """Smooth random colour images with a little texture, plus grey, black, white and
    two-equal-maximum pixels (the HSV edge cases)."""
    rng = np.random.default_rng(seed)
    low = rng.random((n, 5, 5, 3))
    smooth = ndi.zoom(low, (1, size / 5, size / 5, 1), order=1)[:, :size, :size]
    img = np.clip(smooth + rng.normal(0, 0.05, smooth.shape), 0, 1)
    img = (img * 255).astype(np.uint8)
    img[:, 0, 0] = 0
    img[:, 0, 1] = 255
    img[:, 1, :4] = rng.integers(0, 256, (n, 4, 1))  # grey pixels
    img[:, 2, :4, 1] = img[:, 2, :4, 0]  # R == G
    return torch.from_numpy(img)


# float64 rounding: the references and saturate compute each value in at most ~10 float64 operations on numbers
# in [0, 1], each correctly rounded (relative error <= 2^-53), then x 255: a build that rounds any one operation
# differently (an FMA contraction, another operation order) moves the value by under 10 x 2^-53 x 255 < 3e-13
# grey levels. The truncating cast can only differ where the exact value lies that close to an integer: within
# TIE (3e-13 with a 3000x margin for the bound's looseness) of one, either neighbouring level is right.
TIE = 1e-9


def float64_ties(values: np.ndarray) -> np.ndarray:
    """Where a float64 result before the truncating cast sits within TIE of an integer (an exact-integer
    result in exact arithmetic, floored on rounding noise)."""
    return np.abs(values - np.round(values)) <= TIE


def assert_equal_but_at_float64_ties(ours: np.ndarray, reference: np.ndarray, what=None) -> None:
    """``ours`` (uint8) equals the float64 ``reference``'s truncating cast, except at float64 ties (see TIE),
    where it may be the level above or below the tie's integer."""
    ours = ours.astype(np.int64)
    floor = reference.astype(np.uint8).astype(np.int64)
    ties = float64_ties(reference)
    near = np.round(reference).astype(np.int64)
    ok = (ours == floor) | (ties & ((ours == near) | (ours == near - 1)))
    assert ok.all(), (what, int((~ok).sum()), float(np.abs(ours - floor).max()))


def check_against_reference(name: str, reference, exact: bool) -> None:
    """``corrupt`` against an independent computation of the reference algorithm, one image at a
    time, at every severity: if ``exact`` (float64 computed in the reference's order), equal but at
    float64 ties (``assert_equal_but_at_float64_ties``), else within 1 grey level, rarely and
    without bias."""
    x = sample_images(4, seed=5)
    for s in range(1, 6):
        ours = corrupt(x, name, s, seed=0).numpy().astype(int)
        values = np.stack([reference(img, CIFAR.parameters[name][s - 1]) for img in x.numpy()])
        ref = values.astype(np.uint8).astype(int)  # the reference's truncating cast
        diff = ours - ref
        if exact:
            assert_equal_but_at_float64_ties(ours, np.asarray(values, dtype=np.float64), (name, s))
        assert np.abs(diff).max() <= 1, (name, s, np.abs(diff).max())
        # Off-by-one values are results that are integers in exact arithmetic (brightness's
        # V + 51/255, the 1/9 box of defocus severity 5), floored on float32 noise here and on
        # float64 noise in the reference; they must stay rare and unbiased.
        assert (diff != 0).mean() < 0.15, (name, s, (diff != 0).mean())
        assert abs(diff.mean()) < 0.05, (name, s, diff.mean())
