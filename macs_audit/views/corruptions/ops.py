"""Operations the corruptions share: uint8 conversions, thresholds, border-aware linear filters as
small matrix products, the reference's clipped zoom, and ImageMagick's motion blur kernel."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch


def to_float(images: torch.Tensor, unit: bool = True) -> torch.Tensor:
    """uint8 (N, H, W, C) -> contiguous float32 planes (N, C, H, W), in [0, 1] if ``unit``
    else in 0..255 (linear filters commute with the scale, saving two passes)."""
    x = images.permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)
    return x.div_(255.0) if unit else x


def to_uint8(x: torch.Tensor, unit: bool = True) -> torch.Tensor:
    """float planes (N, C, H, W) in [0, 1] (or 0..255 if not ``unit``) -> clip -> 0..255 ->
    truncate -> contiguous uint8 (N, H, W, C). Overwrites x."""
    x = x.clamp_(0.0, 1.0).mul_(255.0) if unit else x.clamp_(0.0, 255.0)
    n, c, h, w = x.shape
    levels = to_uint8_same_layout(x).reshape(n, c, h * w)  # the cast truncates
    out = torch.empty((n, h, w, c), dtype=torch.uint8, device=x.device)
    pixels = out.view(n, h * w, c)
    for i in range(c):  # plane by plane: on CPU about 2x faster than one permuted copy
        pixels[:, :, i] = levels[:, i]
    return out


def unit(images: torch.Tensor) -> torch.Tensor:
    """uint8 (N, H, W, C) -> float32 (N, H, W, C) in [0, 1], for pointwise work in the images'
    own layout (no permutes)."""
    return images.float().div_(255.0)


def to_uint8_same_layout(x: torch.Tensor) -> torch.Tensor:
    """Truncating float -> uint8 cast without a layout change. Through int16: torch's direct
    float -> uint8 conversion is not vectorised on CPU (about 4x slower)."""
    return x.to(torch.int16).to(torch.uint8)


def zero_below(x: torch.Tensor, threshold: float) -> torch.Tensor:
    """x where x >= threshold, else 0, in place. torch.where and masked_fill run a branch per
    value on CPU (mispredicted on image data, about 30x slower); threshold_ is vectorised. It
    keeps x > t, so t is the value just below ``threshold`` in x's dtype (in which the
    comparison x < threshold is made)."""
    at = torch.tensor(threshold, dtype=x.dtype)
    below = torch.nextafter(at, torch.tensor(-math.inf, dtype=x.dtype))
    return torch.threshold_(x, below.item(), 0.0)


# --------------------------------------------------------------------------------------------
# Linear filters: a 1-D filter of a 32-pixel axis is one small matrix product, far faster on CPU
# than shifted adds or a single-channel convolution.
# --------------------------------------------------------------------------------------------
def _pad_index(n: int, r: int, mode: str) -> np.ndarray:
    """Source indices of positions -r .. n-1+r of a length-n axis under a border mode.

    nearest: edge replication (aaa|abc|ccc); reflect: half-sample symmetric (cba|abc|cba),
    scipy 'reflect'; mirror: whole-sample symmetric (dcb|abcd|cba), scipy 'mirror' = OpenCV
    BORDER_REFLECT_101.
    """
    i = np.arange(-r, n + r)
    if mode == "nearest":
        return np.clip(i, 0, n - 1)
    if mode == "reflect":
        i = np.mod(i, 2 * n)
        return np.where(i >= n, 2 * n - 1 - i, i)
    if mode == "mirror":
        if n == 1:
            return np.zeros_like(i)
        i = np.mod(i, 2 * n - 2)
        return np.where(i >= n, 2 * n - 2 - i, i)
    raise ValueError(mode)


@functools.lru_cache(maxsize=None)
def _gaussian_kernel(sigma: float, truncate: float) -> tuple[float, ...]:
    """scipy.ndimage.gaussian_filter's 1-D kernel: radius int(truncate * sigma + 0.5)."""
    if sigma <= 0:
        return (1.0,)
    radius = int(truncate * sigma + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    k = np.exp(-0.5 * x * x / (sigma * sigma))
    return tuple((k / k.sum()).tolist())


@functools.lru_cache(maxsize=None)
def _filter_matrix(n: int, kernel: tuple[float, ...], mode: str) -> np.ndarray:
    """(n, n) matrix M such that M @ v correlates v with ``kernel`` (centred) under a border
    mode."""
    r = len(kernel) // 2
    src = _pad_index(n, r, mode)
    m = np.zeros((n, n), dtype=np.float64)
    for t, k in enumerate(kernel):
        np.add.at(m, (np.arange(n), src[t : t + n]), k)
    return m


def _separable(x: torch.Tensor, mh: np.ndarray, mw: np.ndarray) -> torch.Tensor:
    """mh @ x @ mw.T over the last two axes (rows, then columns) of float x."""
    th = torch.as_tensor(mh, dtype=x.dtype, device=x.device)
    tw = torch.as_tensor(mw.T.copy(), dtype=x.dtype, device=x.device)
    return th @ x @ tw


def gaussian(x: torch.Tensor, sigma: float, mode: str = "nearest", truncate: float = 4.0) -> torch.Tensor:
    """skimage/scipy gaussian filter over the last two axes of x (each plane separately)."""
    k = _gaussian_kernel(float(sigma), float(truncate))
    if len(k) == 1:
        return x
    h, w = x.shape[-2:]
    return _separable(x, _filter_matrix(h, k, mode), _filter_matrix(w, k, mode))


@functools.lru_cache(maxsize=None)
def _separable_terms(kernel: tuple[tuple[float, ...], ...]):
    """A 2-D kernel as an exact sum of separable (column kernel, row kernel) terms (SVD)."""
    u, s, vt = np.linalg.svd(np.asarray(kernel, dtype=np.float64))
    return tuple((tuple((u[:, i] * s[i]).tolist()), tuple(vt[i].tolist())) for i in np.flatnonzero(s > s[0] * 1e-12))


def filter2d(x: torch.Tensor, kernel: tuple[tuple[float, ...], ...], mode: str) -> torch.Tensor:
    """cv2.filter2D-style correlation with an odd square kernel over the last two axes, as a
    sum of separable matrix products (the defocus kernels have rank 1 or 2)."""
    h, w = x.shape[-2:]
    out = None
    for col, row in _separable_terms(kernel):
        term = _separable(x, _filter_matrix(h, col, mode), _filter_matrix(w, row, mode))
        out = term if out is None else out.add_(term)
    assert out is not None  # a non-zero kernel has at least one term
    return out


def box3(x: torch.Tensor, mode: str = "mirror") -> torch.Tensor:
    """cv2.blur(ksize=(3, 3)) with its default BORDER_REFLECT_101, in float."""
    k = (1.0 / 3.0,) * 3
    h, w = x.shape[-2:]
    return _separable(x, _filter_matrix(h, k, mode), _filter_matrix(w, k, mode))


@functools.lru_cache(maxsize=None)
def clipped_zoom_matrix(n: int, z: float) -> np.ndarray:
    """(n, n) matrix of the reference's clipped zoom along one axis.

    Centred crop of ch = ceil(n / z), scipy.ndimage.zoom order 1 (grid_mode False: corners
    aligned, step (ch - 1) / (out - 1)) to out = round(ch * z), centre trim back to n.
    """
    ch = int(np.ceil(n / z))
    top = (n - ch) // 2
    out = int(round(ch * z))
    trim = (out - n) // 2
    m = np.zeros((n, n), dtype=np.float64)
    if out == 1 or ch == 1:
        m[:, top] = 1.0
        return m
    step = (ch - 1) / (out - 1)
    for j in range(n):
        pos = (j + trim) * step
        i0 = min(int(np.floor(pos)), ch - 1)
        frac = pos - i0
        m[j, top + i0] += 1.0 - frac
        if frac > 0:
            m[j, top + i0 + 1] += frac
    return m


def clipped_zoom(x: torch.Tensor, z: float) -> torch.Tensor:
    """The reference's clipped_zoom on (N, C, H, W), as two small matrix products."""
    h, w = x.shape[-2:]
    return _separable(x, clipped_zoom_matrix(h, float(z)), clipped_zoom_matrix(w, float(z)))


def imagemagick_motion_blur(x: torch.Tensor, radius: float, sigma: float, angles_deg: torch.Tensor) -> torch.Tensor:
    """ImageMagick MotionBlurImage on float (N, H, W, C) values 0..255, rounded to nearest.

    width = 2 ceil(radius) + 1 one-sided taps with weights exp(-i^2 / (2 sigma^2)) (normalised),
    tap i reads (x + ceil(i cos(a) - 0.5), y + ceil(i sin(a) - 0.5)) with edge replication.
    ``angles_deg`` holds one angle per image. Trailing taps whose combined weight is below
    float32 resolution (2^-24, under float32's own accumulation error) are skipped: at sigma 1
    only 6 of the 13 taps carry weight. Each tap is one row gather of whole pixels.
    """
    n, h, w, c = x.shape
    width = 2 * int(math.ceil(radius)) + 1
    i = np.arange(width, dtype=np.float64)
    weights = np.exp(-(i * i) / (2.0 * sigma * sigma))
    weights /= weights.sum()
    tail = np.cumsum(weights[::-1])[::-1]  # tail[t] = sum of weights[t:]
    width = int(np.count_nonzero(tail >= 2.0**-24))
    k = weights.tolist()
    theta = torch.deg2rad(angles_deg.double())
    taps = torch.arange(width, dtype=torch.float64, device=x.device)
    # int32 offsets and indices (half the memory traffic of int64; N H W < 2^31 per batch)
    ox = torch.ceil(taps[None, :] * torch.cos(theta)[:, None] - 0.5).int()  # (N, width)
    oy = torch.ceil(taps[None, :] * torch.sin(theta)[:, None] - 0.5).int()
    rows = torch.arange(h, dtype=torch.int32, device=x.device)
    cols = torch.arange(w, dtype=torch.int32, device=x.device)
    first_pixel = (torch.arange(n, dtype=torch.int32, device=x.device) * (h * w))[:, None, None]
    # one channel: a flat gather (index_select's fast path); else rows of c values
    pixels = x.reshape(-1) if c == 1 else x.reshape(n * h * w, c)
    out = pixels * k[0]  # tap 0 reads the pixel itself: ceil(0 - 0.5) = 0
    # one index and one gathered buffer reused by every tap (fresh multi-megabyte buffers per
    # tap cost page faults on CPU)
    source = torch.empty((n, h, w), dtype=torch.int32, device=x.device)
    gathered = torch.empty_like(pixels)
    for t in range(1, width):
        r = (rows[None, :] + oy[:, t : t + 1]).clamp_(0, h - 1).mul_(w).add_(first_pixel[:, :, 0])  # (N, H)
        q = (cols[None, :] + ox[:, t : t + 1]).clamp_(0, w - 1)  # (N, W)
        torch.add(r[:, :, None], q[:, None, :], out=source)
        torch.index_select(pixels, 0, source.view(-1), out=gathered)
        out.add_(gathered, alpha=k[t])
    return out.add_(0.5).floor_().clamp_(0, 255).view(n, h, w, c)
