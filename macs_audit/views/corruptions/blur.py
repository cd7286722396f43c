"""Blur corruptions: gaussian, glass, defocus, motion and zoom blur."""

from __future__ import annotations

import functools

import numpy as np
import torch

from macs_audit.views.corruptions.ops import (
    clipped_zoom,
    clipped_zoom_matrix,
    filter2d,
    gaussian,
    imagemagick_motion_blur,
    to_float,
    to_uint8,
    to_uint8_same_layout,
)
from macs_audit.views.corruptions.randomness import uniform


def gaussian_blur(img: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    return to_uint8(gaussian(to_float(img, unit=False), sigma), unit=False)


def glass_blur(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    sigma, delta, iterations = param
    x = gaussian(to_float(img, unit=False), sigma)  # 0..255 units throughout
    x = x.clamp(0, 255).floor_()  # np.uint8(gaussian(x) * 255): truncation
    n, c, h, w = x.shape
    # One pass of the reference visits pixels (r, q), r and q from size - delta down to delta + 1
    # (rows, then columns, descending), and copies the current value at (r + dy, q + dx) into them,
    # dx and dy in [-delta, delta). A source not yet visited still holds its pre-pass value; one
    # visited earlier in the pass (below, or to the right in the same row: only when delta >= 2)
    # holds its output. So each output is the pre-pass value at the end of a chain of sources.
    for _ in range(iterations):
        d = torch.randint(-delta, delta, (n, 2, h, w), generator=gen, device=x.device)
        idx = glass_sources(d, delta).reshape(n, 1, h * w).expand(n, c, h * w)
        x = x.reshape(n, c, h * w).gather(2, idx).reshape(n, c, h, w)
    return to_uint8(gaussian(x, sigma), unit=False)


def glass_sources(d: torch.Tensor, delta: int) -> torch.Tensor:
    """The flat index of the pre-pass pixel each output of one glass pass takes, given the
    offsets d (N, 2, H, W) = (dx, dy) drawn for every pixel (used inside the visited region)."""
    n, _, h, w = d.shape
    rows = torch.arange(h, device=d.device).view(1, h, 1)
    cols = torch.arange(w, device=d.device).view(1, 1, w)
    inner = torch.zeros(h, w, dtype=torch.bool, device=d.device)
    inner[delta + 1 : h - delta + 1, delta + 1 : w - delta + 1] = True
    d = d * inner  # border pixels stay put
    src_r = (rows + d[:, 1]).clamp_(0, h - 1)
    src_c = (cols + d[:, 0]).clamp_(0, w - 1)
    src = src_r * w + src_c
    if delta == 1:  # every source is up/left: not visited yet (all CIFAR severities)
        return src
    # visited earlier: an inner source below, or to the right in the same row
    earlier = inner[src_r, src_c] & ((d[:, 1] > 0) | ((d[:, 1] == 0) & (d[:, 0] > 0)))
    own = torch.arange(h * w, device=src.device).view(1, h * w).expand(n, h * w)
    flat_src = src.reshape(n, h * w)
    # next pixel of the chain: the source where it was visited earlier, else the pixel itself
    nxt = torch.where(earlier.reshape(n, h * w), flat_src, own)
    while True:
        jumped = nxt.gather(1, nxt)
        if torch.equal(jumped, nxt):
            break
        nxt = jumped
    # the chain's last pixel reads its source's pre-pass value
    return flat_src.gather(1, nxt).view(n, h, w)


@functools.lru_cache(maxsize=None)
def _defocus_kernel(radius: float, alias_blur: float) -> tuple[tuple[float, ...], ...]:
    """The reference disk: the aliased disk of ``radius`` on a 17x17 grid (radius <= 8) or a
    (2 radius + 1) grid with 5x5 smoothing (larger radii), normalised to sum 1, smoothed by
    cv2.GaussianBlur (getGaussianKernel(ksize, alias_blur) both ways, BORDER_REFLECT_101 at the
    grid's edge), cropped to its non-zero support."""
    half, ksize = (8, 3) if radius <= 8 else (int(radius), 5)
    grid = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(grid, grid)
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-((np.arange(ksize) - ksize // 2) ** 2) / (2.0 * alias_blur**2))
    g /= g.sum()
    k = np.pad(disk, ksize // 2, mode="reflect")  # numpy's 'reflect' is BORDER_REFLECT_101
    k = np.apply_along_axis(lambda r: np.convolve(r, g, mode="valid"), 0, k)
    k = np.apply_along_axis(lambda r: np.convolve(r, g, mode="valid"), 1, k)
    nz_r = np.flatnonzero(k.any(axis=1))
    nz_c = np.flatnonzero(k.any(axis=0))
    r = max(half - nz_r[0], nz_r[-1] - half, half - nz_c[0], nz_c[-1] - half)
    return tuple(map(tuple, k[half - r : half + r + 1, half - r : half + r + 1].tolist()))


def defocus_blur(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    # channels-last planes: the layout the convolutions on larger images are fastest on
    x = img.float().permute(0, 3, 1, 2) if img.shape[1] * img.shape[2] > 1024 else to_float(img, unit=False)
    return to_uint8(filter2d(x, _defocus_kernel(*param), "mirror"), unit=False)


def motion_blur(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    """ImageMagick's motion blur at one angle ~ U(-45, 45) per image."""
    radius, sigma = param
    angles = uniform((img.shape[0],), -45.0, 45.0, gen, img.device)
    return to_uint8_same_layout(imagemagick_motion_blur(img.float(), radius, sigma, angles))


@functools.lru_cache(maxsize=None)
def _zoom_factors(start: float, stop: float, step: float) -> tuple[float, ...]:
    return tuple(np.arange(start, stop, step).tolist())


@functools.lru_cache(maxsize=8)
def _zoom_blur_operator(h: int, w: int, param: tuple[float, float, float]) -> np.ndarray:
    """zoom_blur is linear: (x + sum_z Zh_z x Zw_z^T) / (len + 1). As one (HW, HW) matrix
    (transposed, float32) it is a single dense product, ~10x faster than the loop at 32x32."""
    factors = _zoom_factors(*param)
    k = np.eye(h * w)
    for z in factors:
        k += np.kron(clipped_zoom_matrix(h, z), clipped_zoom_matrix(w, z))
    return np.ascontiguousarray((k / (len(factors) + 1)).T, dtype=np.float32)


def zoom_blur(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    n, h, w, c = img.shape
    if h * w <= 1024:  # up to 32x32: the operator is 4 MB; larger ones cost more than the loop
        x = to_float(img, unit=False)
        op = torch.as_tensor(_zoom_blur_operator(h, w, param), device=x.device)
        return to_uint8((x.reshape(n, c, h * w) @ op).reshape(n, c, h, w), unit=False)
    factors = _zoom_factors(*param)
    x = img.float().permute(0, 3, 1, 2)  # channels-last planes: interpolation is fastest on them
    acc = x.clone()
    for z in factors:
        acc += clipped_zoom(x, z)
    return to_uint8(acc.div_(len(factors) + 1), unit=False)
