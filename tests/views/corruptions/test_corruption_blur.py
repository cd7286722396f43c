"""Blur corruptions against independent numpy / SciPy computations of the reference algorithms
(written from the reference description, not from the module)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from corruption_helpers import check_against_reference, sample_images

from macs_audit.views.corruptions.apply import corrupt
from macs_audit.views.corruptions.ops import imagemagick_motion_blur
from macs_audit.views.corruptions.table import CIFAR


def _ref_gaussian_blur(img, sigma):
    x = ndi.gaussian_filter(img / 255.0, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)
    return np.clip(x, 0, 1) * 255


def _ref_defocus(img, c):
    radius, alias_blur = c
    grid = np.arange(-8, 9)
    xx, yy = np.meshgrid(grid, grid)
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-((np.arange(3) - 1) ** 2) / (2 * alias_blur**2))  # getGaussianKernel(3, s)
    g /= g.sum()
    kernel = ndi.correlate(disk, np.outer(g, g), mode="mirror")  # GaussianBlur (3, 3)
    x = img / 255.0
    out = np.stack([ndi.correlate(x[..., ch], kernel, mode="mirror") for ch in range(3)], -1)
    return np.clip(out, 0, 1) * 255  # filter2D, BORDER_REFLECT_101 = scipy 'mirror'


def _ref_clipped_zoom(x, z):
    n = x.shape[0]
    ch = int(np.ceil(n / z))
    top = (n - ch) // 2
    out = ndi.zoom(x[top : top + ch, top : top + ch], (z, z, 1), order=1)
    trim = (out.shape[0] - n) // 2
    return out[trim : trim + n, trim : trim + n]


def _ref_zoom_blur(img, c):
    factors = np.arange(*c)
    x = (img / 255.0).astype(np.float32)
    acc = np.zeros_like(x)
    for z in factors:
        acc += _ref_clipped_zoom(x, z)
    return np.clip((x + acc) / (len(factors) + 1), 0, 1) * 255


REFERENCES = {"gaussian_blur": _ref_gaussian_blur, "defocus_blur": _ref_defocus, "zoom_blur": _ref_zoom_blur}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_reference_algorithm(name):
    check_against_reference(name, REFERENCES[name], exact=False)


def test_glass_blur_severity1_is_a_local_copy():
    # sigma 0.05 has a Gaussian radius of 0: only the shuffle acts. Each pixel (h, w) with
    # h, w >= 2 copies one of (h, w), (h-1, w), (h, w-1), (h-1, w-1); rows/cols 0-1 stay.
    x = sample_images(4, seed=6).numpy().astype(int)
    out = corrupt(torch.from_numpy(x.astype(np.uint8)), "glass_blur", 1, seed=0).numpy()
    assert (out[:, :2] == x[:, :2]).all() and (out[:, :, :2] == x[:, :, :2]).all()
    inner = out[:, 2:, 2:]
    candidates = [x[:, 2 + dy : 32 + dy, 2 + dx : 32 + dx] for dy in (-1, 0) for dx in (-1, 0)]
    match = np.zeros(inner.shape[:3], dtype=bool)
    for cand in candidates:
        match |= (cand == inner).all(-1)
    assert match.all()
    moved = (inner != x[:, 2:, 2:]).any(-1).mean()
    assert 0.5 < moved < 0.9  # 3/4 of the offsets move, minus equal neighbours


def _ref_motion_blur(img, radius, sigma, angle):
    """ImageMagick MotionBlurImage on one float image (H, W, C), written out per tap."""
    h, w = img.shape[:2]
    width = 2 * math.ceil(radius) + 1
    k = np.exp(-(np.arange(width) ** 2) / (2 * sigma**2))
    k /= k.sum()
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]
    out = np.zeros(img.shape)
    for i in range(width):
        ox = math.ceil(i * math.cos(math.radians(angle)) - 0.5)
        oy = math.ceil(i * math.sin(math.radians(angle)) - 0.5)
        out += k[i] * img[np.clip(rows + oy, 0, h - 1), np.clip(cols + ox, 0, w - 1)]
    return np.floor(out + 0.5)


@pytest.mark.parametrize("size", [32, 48])  # gathers up to 32x32, shifted windows above (CPU)
def test_motion_blur_kernel_matches_imagemagick_description(size):
    x = sample_images(5, seed=7, size=size)
    angles = torch.tensor([-45.0, -10.3, 0.0, 33.3, 135.0], dtype=torch.float64)
    for radius, sigma in CIFAR.parameters["motion_blur"] + ((14, 12), (20, 15)):
        ours = imagemagick_motion_blur(x.float(), radius, sigma, angles).numpy()
        for i, angle in enumerate(angles.tolist()):
            ref = _ref_motion_blur(x[i].numpy().astype(np.float64), radius, sigma, angle)
            assert np.abs(ours[i] - ref).max() <= 1
