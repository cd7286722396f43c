"""The 19 CIFAR-10-C corruptions as batched torch code.

Every corruption takes a batch of uint8 images (N, H, W, 3) on any device and returns a uint8
batch of the same shape on the same device. The work is tensor code over the whole batch (no
Python loop over images or pixels); JPEG's codec is ``macs_audit.views.corruptions.jpeg``.
Separable linear filters are small border-aware matrices applied as matrix products (much faster
on CPU than shifted adds or single-channel convolutions at 32x32).
All parameters are the ones of the CIFAR generator ``make_cifar_c.py`` (Hendrycks & Dietterich,
2019) and live in one table, ``_TABLE`` below; the algorithms follow the descriptions in
``docs/corruptions.md`` (written from the reference facts, no reference source copied).

Randomness is explicit: ``corrupt(images, name, severity, seed)`` draws from a ``torch.Generator``
seeded with ``seed`` and created on the images' device, never from global state. On CPU the same
seed and batch give the same bytes. The draws are per batch, so a data set processed in batches is
reproducible for a given batch size; use ``batch_seed(seed, name, severity, start)`` to derive
each batch's seed. Released CIFAR-10-C came from an unseeded global numpy stream, so only
distributional (not bit-exact) reproduction of it is possible for the random corruptions.

Quantisation follows the reference: values are clipped to [0, 1] (or [0, 255]), scaled to 0..255
and truncated (floor) to uint8. ``motion_blur`` rounds to nearest, as ImageMagick does inside its
PNG round trip; ``pixelate`` and ``jpeg_compression`` produce 8-bit values the way Pillow does.

Departures from the reference
-----------------------------
(The table in docs/corruptions.md gives every corruption's status.)

- Arithmetic is float32 (the reference mostly uses float64). Results that are integers in exact
  arithmetic (defocus severity 5's 1/9 box) are floored on rounding noise in both, so the
  deterministic corruptions agree with the reference within 1 grey level. Where such ties are
  systematic, the reference's float64 values are reproduced: brightness's maximum channel
  (a table) and saturate (scikit-image's float64 HSV operations, bit-identical).
- Random streams are torch's (the release came from an unseeded numpy stream: only the
  distributions can match). gaussian, shot and speckle noise draw from 2^16-entry quantile
  tables (each outcome's probability exact to 2^-16; see "Noise" below). impulse_noise draws
  one 16-bit uniform per element for skimage's two per-element masks (same joint distribution).
- glass_blur: the reference pixel loop is a gather from the pre-pass image (its "swap" copies
  and reads only unvisited pixels), done as one gather per pass.
- motion_blur, snow: ImageMagick's MotionBlurImage kernel (one-sided Gaussian taps, ceil offsets,
  edge replication) as a batched gather in float, rounded to nearest; ImageMagick rounds through
  its 16-bit quantum and a PNG round trip, so rare .5 ties can differ by 1. No ImageMagick/Wand.
- frost: the reference photographs are not shipped (undocumented provenance). By default five
  procedural textures are synthesised from a fixed seed (cloudy density, feathery needle
  crystals along a smooth orientation field, milky glow, blue-white tint) at the sizes the
  reference images have after their 0.2 resize (120x180, 63x112, 63x112, 70x105, 99x132, rows x
  cols), so frost statistics differ from released CIFAR-10-C. ``frost_textures=DIR`` uses your
  images (frost1.png .. frost5.jpg if all present, as the reference picks them, else every image
  in DIR), resized by 0.2 bilinearly (half-pixel centres like cv2.INTER_LINEAR, without its
  fixed-point rounding). Textures must be at least (H+1)x(W+1) after the resize.
- fog: the plasma map side is the next power of two >= max(H, W), at least 32 (32 for CIFAR).
- elastic_transform: warpAffine and map_coordinates(order=1, mode='reflect') as grid_sample
  (SciPy >= 1.6 boundary semantics; OpenCV versions that quantise warp positions to 1/32 pixel
  differ slightly). Parameters are fractions of the image size (x 32 for CIFAR).
- spatter: the OpenCV chain (Canny, 5x5 chamfer distance transform, equalizeHist, emboss, box
  blurs) re-implemented in torch from OpenCV's definitions (exact against OpenCV 5.0 in the
  tests). The liquid layer saturates to 0..255 before its uint8 cast (the reference's cast of
  values above 1 is platform dependent) and an empty layer gives no spatter (NaN in the
  reference).
- jpeg_compression: libjpeg-turbo's integer codec as Pillow runs it (``macs_audit.views.corruptions.jpeg``),
  bit-identical to Pillow, for sides that are multiples of 16; other sizes go through Pillow
  one image at a time (on the CPU).
- pixelate: Pillow's BOX resize reproduced exactly (point-sampled box, 22-bit fixed point,
  uint8 rounding between passes) as uint8 gathers and rounded pair averages.
- Other image sizes than 32x32 are accepted; the parameters stay the CIFAR ones.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import math
import os
from typing import TYPE_CHECKING, Any

from macs_audit.errors import InputError, UsageError

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import torch

# --------------------------------------------------------------------------------------------
# The one table: name -> (family, benchmark corruption?, parameters for severities 1..5).
# Order is the reference's loop order. Parameters are make_cifar_c.py's (32x32 CIFAR).
# --------------------------------------------------------------------------------------------
_TABLE: dict[str, tuple[str, bool, tuple[Any, ...]]] = {
    # sigma of additive Normal noise
    "gaussian_noise": ("noise", True, (0.04, 0.06, 0.08, 0.09, 0.10)),
    # photon scale c: Poisson(x * c) / c
    "shot_noise": ("noise", True, (500, 250, 100, 75, 50)),
    # salt-and-pepper amount (per element)
    "impulse_noise": ("noise", True, (0.01, 0.02, 0.03, 0.05, 0.07)),
    # (disk radius, alias blur sigma)
    "defocus_blur": ("blur", True, ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1))),
    # (gaussian sigma, max delta, iterations)
    "glass_blur": ("blur", True, ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2))),
    # ImageMagick (radius, sigma); angle ~ U(-45, 45) degrees per image
    "motion_blur": ("blur", True, ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5))),
    # zoom factors np.arange(1, stop, 0.01): 7, 12, 16, 21, 26 factors
    "zoom_blur": ("blur", True, ((1, 1.06, 0.01), (1, 1.11, 0.01), (1, 1.16, 0.01), (1, 1.21, 0.01), (1, 1.26, 0.01))),
    # (loc, scale, zoom, threshold, blur radius, blur sigma, blend)
    "snow": ("weather", True, (
        (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
        (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
        (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
        (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
        (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
    )),
    # (image weight, frost weight), in 0..255 space
    "frost": ("weather", True, ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45))),
    # (strength, wibble decay) of the plasma fractal
    "fog": ("weather", True, ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75))),
    # added to HSV value
    "brightness": ("weather", True, (0.05, 0.1, 0.15, 0.2, 0.3)),
    # contrast factor around the per-channel mean
    "contrast": ("digital", True, (0.75, 0.5, 0.4, 0.3, 0.15)),
    # (alpha, sigma, affine max) as fractions of the image size (x 32 for CIFAR)
    "elastic_transform": ("digital", True, (
        (0, 0, 0.08), (0.05, 0.2, 0.07), (0.08, 0.06, 0.06), (0.1, 0.04, 0.05), (0.1, 0.03, 0.03),
    )),
    # intermediate size factor: int(32 * c) = 30, 28, 27, 24, 20
    "pixelate": ("digital", True, (0.95, 0.9, 0.85, 0.75, 0.65)),
    # Pillow JPEG quality
    "jpeg_compression": ("digital", True, (80, 65, 58, 50, 40)),
    # sigma of multiplicative Normal noise
    "speckle_noise": ("noise", False, (0.06, 0.10, 0.12, 0.16, 0.20)),
    # skimage gaussian sigma
    "gaussian_blur": ("blur", False, (0.4, 0.6, 0.7, 0.8, 1.0)),
    # (loc, scale, sigma, threshold, intensity | mud sigma, mode 0 water | 1 mud)
    "spatter": ("weather", False, (
        (0.62, 0.1, 0.7, 0.7, 0.5, 0),
        (0.65, 0.1, 0.8, 0.7, 0.5, 0),
        (0.65, 0.3, 1, 0.69, 0.5, 0),
        (0.65, 0.1, 0.7, 0.69, 0.6, 1),
        (0.65, 0.1, 0.5, 0.68, 0.6, 1),
    )),
    # (saturation multiplier, addend)
    "saturate": ("digital", False, ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2))),
}

CORRUPTIONS: tuple[str, ...] = tuple(_TABLE)
BENCHMARK_CORRUPTIONS: tuple[str, ...] = tuple(n for n, (_, bench, _) in _TABLE.items() if bench)
EXTRA_CORRUPTIONS: tuple[str, ...] = tuple(n for n, (_, bench, _) in _TABLE.items() if not bench)
FAMILIES: dict[str, str] = {n: fam for n, (fam, _, _) in _TABLE.items()}
PARAMS: dict[str, tuple[Any, ...]] = {n: p for n, (_, _, p) in _TABLE.items()}
SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)

_FROST_SEED = 20190108  # fixed seed of the procedural frost textures
# (rows, cols) of the reference frost images after their 0.2 resize: frost1 .. frost5
_FROST_SIZES = ((120, 180), (63, 112), (63, 112), (70, 105), (99, 132))
_FROST_REFERENCE_NAMES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")
_IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp")


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------
def corrupt(images: "torch.Tensor", name: str, severity: int, seed: int,
            frost_textures: str | None = None) -> "torch.Tensor":
    """Apply corruption ``name`` at ``severity`` (1-5) to uint8 images (N, H, W, 3).

    Returns a new uint8 tensor of the same shape on the same device. ``seed`` seeds a
    ``torch.Generator`` on the images' device; deterministic corruptions ignore it.
    ``frost_textures`` (frost only) is a directory of frost images; None uses the built-in
    procedural textures.
    """
    import torch

    if name not in _TABLE:
        raise UsageError(f"unknown corruption {name!r}; choose one of: {', '.join(CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= 5:
        raise UsageError(f"corruption severity must be an integer 1-5, got {severity!r}")
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4 \
            or images.shape[-1] != 3:
        got = (f"{images.dtype} tensor of shape {tuple(images.shape)}"
               if isinstance(images, torch.Tensor) else type(images).__name__)
        raise InputError(f"corruptions need a uint8 tensor of shape (N, H, W, 3), got {got}")
    if images.shape[1] < 4 or images.shape[2] < 4:
        raise InputError(f"corruptions need images of at least 4x4 pixels, got "
                         f"{images.shape[1]}x{images.shape[2]}")
    if images.shape[0] == 0:
        return images.clone()
    gen = torch.Generator(device=images.device)
    gen.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
    param = PARAMS[name][severity - 1]
    with _ieee_float32_products():
        if name == "frost":
            out = _frost(images, param, gen, frost_textures)
        else:
            out = _FUNCTIONS[name](images, param, gen)
    return out.contiguous()


@contextlib.contextmanager
def _ieee_float32_products():
    """IEEE float32 matrix products for the duration of a corruption, whatever a user set for
    their model (TF32 on GPUs, bf16 on CPUs with AMX): the filters would otherwise change the
    output (thresholded layers such as snow's by whole grey levels) and the same seed would not
    give the same bytes. The setting is restored through the API it was made with."""
    import torch

    try:
        legacy = torch.get_float32_matmul_precision()
    except RuntimeError:  # set through the per-backend API: use that one
        legacy = None
    if legacy == "highest":
        yield
        return
    if legacy is not None:
        torch.set_float32_matmul_precision("highest")
        try:
            yield
        finally:
            torch.set_float32_matmul_precision(legacy)
        return
    backends = [getattr(getattr(torch.backends, name, None), "matmul", None) for name in ("mkldnn", "cuda")]
    saved = [(b, b.fp32_precision) for b in backends
             if getattr(b, "fp32_precision", None) not in (None, "none", "ieee")]
    for backend, _ in saved:
        backend.fp32_precision = "ieee"
    try:
        yield
    finally:
        for backend, value in saved:
            backend.fp32_precision = value


def batch_seed(seed: int, name: str, severity: int, start: int) -> int:
    """Stable 63-bit seed for the batch of (corruption, severity) that starts at image ``start``."""
    key = f"macs-audit/corruptions/{int(seed)}/{name}/{int(severity)}/{int(start)}".encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


def frost_texture_info(frost_textures: str | None) -> str:
    """What the report should record about the frost textures used."""
    if frost_textures is None:
        sizes = ", ".join(f"{w}x{h}" for h, w in _FROST_SIZES)
        return (f"procedural (seed {_FROST_SEED}; {len(_FROST_SIZES)} textures, "
                f"W x H {sizes})")
    path = os.path.abspath(os.fspath(frost_textures))
    return f"{path}: {', '.join(_frost_files(path))}"


# --------------------------------------------------------------------------------------------
# Shared helpers
# --------------------------------------------------------------------------------------------
def _to_float(images, unit: bool = True):
    """uint8 (N, H, W, C) -> contiguous float32 planes (N, C, H, W), in [0, 1] if ``unit``
    else in 0..255 (linear filters commute with the scale, saving two passes)."""
    import torch

    x = images.permute(0, 3, 1, 2).to(torch.float32, memory_format=torch.contiguous_format)
    return x.div_(255.0) if unit else x


def _to_uint8(x, unit: bool = True):
    """float planes (N, C, H, W) in [0, 1] (or 0..255 if not ``unit``) -> clip -> 0..255 ->
    truncate -> contiguous uint8 (N, H, W, C). Overwrites x."""
    import torch

    x = x.clamp_(0.0, 1.0).mul_(255.0) if unit else x.clamp_(0.0, 255.0)
    n, c, h, w = x.shape
    levels = _to_uint8_same_layout(x).reshape(n, c, h * w)  # the cast truncates
    out = torch.empty((n, h, w, c), dtype=torch.uint8, device=x.device)
    pixels = out.view(n, h * w, c)
    for i in range(c):  # plane by plane: on CPU about 2x faster than one permuted copy
        pixels[:, :, i] = levels[:, i]
    return out


# Pointwise corruptions work in the images' own (N, H, W, C) layout: no permutes.
def _unit(images):
    """uint8 (N, H, W, C) -> float32 (N, H, W, C) in [0, 1]."""
    return images.float().div_(255.0)


def _quantise(x):
    """float in [0, 1], any layout -> clip -> x 255 -> truncate -> uint8, same layout."""
    return _to_uint8_same_layout(x.clamp_(0.0, 1.0).mul_(255.0))


def _to_uint8_same_layout(x):
    """Truncating float -> uint8 cast without a layout change. Through int16: torch's direct
    float -> uint8 conversion is not vectorised on CPU (about 4x slower)."""
    import torch

    return x.to(torch.int16).to(torch.uint8)


def _zero_below(x, threshold: float):
    """x where x >= threshold, else 0, in place. torch.where and masked_fill run a branch per
    value on CPU (mispredicted on image data, about 30x slower); F.threshold is vectorised. It
    keeps x > t, so t is the value just below ``threshold`` in x's dtype (in which the
    comparison x < threshold is made)."""
    import torch
    import torch.nn.functional as F

    at = torch.tensor(threshold, dtype=x.dtype)
    below = torch.nextafter(at, torch.tensor(-math.inf, dtype=x.dtype))
    return F.threshold_(x, below.item(), 0.0)


def _pad_index(n: int, r: int, mode: str) -> "np.ndarray":
    """Source indices of positions -r .. n-1+r of a length-n axis under a border mode.

    nearest: edge replication (aaa|abc|ccc); reflect: half-sample symmetric (cba|abc|cba),
    scipy 'reflect'; mirror: whole-sample symmetric (dcb|abcd|cba), scipy 'mirror' = OpenCV
    BORDER_REFLECT_101.
    """
    import numpy as np

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
    import numpy as np

    if sigma <= 0:
        return (1.0,)
    radius = int(truncate * sigma + 0.5)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    k = np.exp(-0.5 * x * x / (sigma * sigma))
    return tuple((k / k.sum()).tolist())


@functools.lru_cache(maxsize=None)
def _filter_matrix(n: int, kernel: tuple[float, ...], mode: str) -> "np.ndarray":
    """(n, n) matrix M such that M @ v correlates v with ``kernel`` (centred) under a border
    mode. A 1-D filter of a 32-pixel axis is one small matrix product: far faster on CPU
    than shifted adds or a single-channel convolution."""
    import numpy as np

    r = len(kernel) // 2
    src = _pad_index(n, r, mode)
    m = np.zeros((n, n), dtype=np.float64)
    for t, k in enumerate(kernel):
        np.add.at(m, (np.arange(n), src[t:t + n]), k)
    return m


def _separable(x, mh: "np.ndarray", mw: "np.ndarray"):
    """mh @ x @ mw.T over the last two axes (rows, then columns) of float x."""
    import torch

    th = torch.as_tensor(mh, dtype=x.dtype, device=x.device)
    tw = torch.as_tensor(mw.T.copy(), dtype=x.dtype, device=x.device)
    return th @ x @ tw


def _gaussian(x, sigma: float, mode: str = "nearest", truncate: float = 4.0):
    """skimage/scipy gaussian filter over the last two axes of x (each plane separately)."""
    k = _gaussian_kernel(float(sigma), float(truncate))
    if len(k) == 1:
        return x
    h, w = x.shape[-2:]
    return _separable(x, _filter_matrix(h, k, mode), _filter_matrix(w, k, mode))


@functools.lru_cache(maxsize=None)
def _separable_terms(kernel: tuple[tuple[float, ...], ...]):
    """A 2-D kernel as an exact sum of separable (column kernel, row kernel) terms (SVD)."""
    import numpy as np

    u, s, vt = np.linalg.svd(np.asarray(kernel, dtype=np.float64))
    return tuple((tuple((u[:, i] * s[i]).tolist()), tuple(vt[i].tolist()))
                 for i in np.flatnonzero(s > s[0] * 1e-12))


def _filter2d(x, kernel: tuple[tuple[float, ...], ...], mode: str):
    """cv2.filter2D-style correlation with an odd square kernel over the last two axes, as a
    sum of separable matrix products (the defocus kernels have rank 1 or 2)."""
    h, w = x.shape[-2:]
    out = None
    for col, row in _separable_terms(kernel):
        term = _separable(x, _filter_matrix(h, col, mode), _filter_matrix(w, row, mode))
        out = term if out is None else out.add_(term)
    return out


def _box3(x, mode: str = "mirror"):
    """cv2.blur(ksize=(3, 3)) with its default BORDER_REFLECT_101, in float."""
    k = (1.0 / 3.0,) * 3
    h, w = x.shape[-2:]
    return _separable(x, _filter_matrix(h, k, mode), _filter_matrix(w, k, mode))


@functools.lru_cache(maxsize=None)
def _clipped_zoom_matrix(n: int, z: float) -> "np.ndarray":
    """(n, n) matrix of the reference's clipped zoom along one axis.

    Centred crop of ch = ceil(n / z), scipy.ndimage.zoom order 1 (grid_mode False: corners
    aligned, step (ch - 1) / (out - 1)) to out = round(ch * z), centre trim back to n.
    """
    import numpy as np

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


def _clipped_zoom(x, z: float):
    """The reference's clipped_zoom on (N, C, H, W), as two small matrix products."""
    h, w = x.shape[-2:]
    return _separable(x, _clipped_zoom_matrix(h, float(z)), _clipped_zoom_matrix(w, float(z)))


def _motion_blur(x, radius: float, sigma: float, angles_deg):
    """ImageMagick MotionBlurImage on float (N, H, W, C) values 0..255, rounded to nearest.

    width = 2 ceil(radius) + 1 one-sided taps with weights exp(-i^2 / (2 sigma^2)) (normalised),
    tap i reads (x + ceil(i cos(a) - 0.5), y + ceil(i sin(a) - 0.5)) with edge replication.
    ``angles_deg`` holds one angle per image. Trailing taps whose combined weight is below
    float32 resolution (2^-24, under float32's own accumulation error) are skipped: at sigma 1
    only 6 of the 13 taps carry weight. Each tap is one row gather of whole pixels.
    """
    import numpy as np
    import torch

    n, h, w, c = x.shape
    width = 2 * int(math.ceil(radius)) + 1
    i = np.arange(width, dtype=np.float64)
    k = np.exp(-(i * i) / (2.0 * sigma * sigma))
    k /= k.sum()
    tail = np.cumsum(k[::-1])[::-1]  # tail[t] = sum of k[t:]
    width = int(np.count_nonzero(tail >= 2.0 ** -24))
    k = k.tolist()
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
        r = (rows[None, :] + oy[:, t:t + 1]).clamp_(0, h - 1).mul_(w).add_(first_pixel[:, :, 0])  # (N, H)
        q = (cols[None, :] + ox[:, t:t + 1]).clamp_(0, w - 1)  # (N, W)
        torch.add(r[:, :, None], q[:, None, :], out=source)
        torch.index_select(pixels, 0, source.view(-1), out=gathered)
        out.add_(gathered, alpha=k[t])
    return out.add_(0.5).floor_().clamp_(0, 255).view(n, h, w, c)


@functools.lru_cache(maxsize=None)
def _brightness_lut(c: float) -> tuple[float, ...]:
    """The reference's float64 floor(clip(k/255 + c, 0, 1) * 255) for each grey level k: an
    exact integer in exact arithmetic whenever 255 c is one (c = 0.2), where float64 rounding
    decides the floor (18 of the 256 levels land one below)."""
    import numpy as np

    v = np.clip(np.arange(256) / 255.0 + c, 0, 1)
    return tuple((v * 255).astype(np.uint8).astype(np.float32).tolist())


def _uniform(shape, low: float, high: float, gen, device):
    import torch

    return torch.rand(shape, generator=gen, device=device).mul_(high - low).add_(low)


# --------------------------------------------------------------------------------------------
# Noise
#
# torch's normal and Poisson samplers cost 4-200 ns a value on one CPU core, more than the rest
# of a noise corruption. The result is an 8-bit image, so each corruption needs only the
# distribution of a small integer (or a float multiplier) per element: it is drawn by inverse
# transform from a 2^16-entry quantile table indexed by 16 random bits (four per 64-bit draw,
# about 1 ns a value). Every outcome's probability is then exact to 2^-16 (the table's cells
# are quantile midpoints), and the normal is capped at |z| <= 4.33 (the outermost midpoints).
# --------------------------------------------------------------------------------------------
_TABLE_BITS = 16


class _RandomWords:
    """Random 16-bit words (int16) from a corruption's generator, four from each 64-bit draw.

    On the CPU they come from numpy's SFC64, seeded by one draw of ``gen``: per bit it is about
    2.4x faster than torch's mt19937 there, which was the noise corruptions' largest cost.
    Elsewhere they come from ``gen`` on its device. The table cell of a word w is
    u = w + 2^15 (0..65535), uniform; users read it in the cheapest equivalent way."""

    def __init__(self, gen, device):
        import numpy as np
        import torch

        self.gen, self.device = gen, torch.device(device)
        self._sfc64 = None
        if self.device.type == "cpu":
            seed = torch.empty(1, dtype=torch.int64).random_(0, None, generator=gen)
            self._sfc64 = np.random.SFC64(int(seed))

    def draw(self, count: int, buffers: "_Buffers | None" = None):
        """``count`` words as an int16 tensor (GPU draws land in ``buffers`` if given)."""
        import numpy as np
        import torch

        size = (count + 3) // 4
        if self._sfc64 is not None:
            return torch.from_numpy(self._sfc64.random_raw(size).view(np.int16))[:count]
        words = (buffers.get("words", size, torch.int64) if buffers
                 else torch.empty(size, dtype=torch.int64, device=self.device))
        words.random_(-(1 << 63), None, generator=self.gen)  # the full 64-bit range
        return words.view(torch.int16)[:count]


def _raw_index(bits, out):
    """The int32 gather index of 16-bit words, written into ``out``: their unsigned value,
    which reads a table stored by ``_by_raw_word`` (one conversion, no add)."""
    import torch

    try:
        return out.copy_(bits.view(torch.uint16))
    except (RuntimeError, TypeError):  # a backend without uint16 conversions (e.g. MPS)
        return out.copy_(bits).bitwise_and_(0xFFFF)


class _Buffers:
    """Temporaries reused by every piece of a piecewise loop: a fresh multi-megabyte buffer
    per piece costs page faults on CPU (up to 2x on the noise corruptions)."""

    def __init__(self, device):
        self.device, self._store = device, {}

    def get(self, name: str, count: int, dtype) -> "torch.Tensor":
        import torch

        buffer = self._store.get(name)
        if buffer is None or buffer.numel() < count:
            buffer = self._store[name] = torch.empty(count, dtype=dtype, device=self.device)
        return buffer[:count]


def _by_raw_word(table):
    """A cell-indexed table (rows of 2^16 cells) reordered so that a word's unsigned value
    reads cell u = w + 2^15 (unsigned value = u XOR 2^15: a half-turn of each row)."""
    cells = 1 << _TABLE_BITS
    return table.view(-1, cells).roll(cells // 2, dims=1).reshape(-1)


def _uniform16(shape, low: float, high: float, gen, device):
    """Uniform on [low, high) at 16-bit resolution (cell midpoints), for noise fields that are
    smoothed afterwards: several times cheaper than torch.rand on a CPU core."""
    import torch

    cells = _RandomWords(gen, device).draw(math.prod(shape)).to(torch.float32).add_(32768.5)
    return cells.mul_((high - low) / (1 << _TABLE_BITS)).add_(low).view(shape)


@functools.lru_cache(maxsize=None)
def _on_device(build, param, device: str) -> "torch.Tensor":
    """A cell-indexed table built on the CPU, stored for raw-word indexing and cached on
    ``device`` (a GPU keeps its copy)."""
    return _by_raw_word(build(param)).to(device)


@functools.lru_cache(maxsize=None)
def _normal_quantiles() -> "torch.Tensor":
    """float64 standard-normal quantiles at the midpoints (i + 1/2) / 2^16 of the table cells."""
    import torch

    cells = 1 << _TABLE_BITS
    return torch.special.ndtri((torch.arange(cells, dtype=torch.float64) + 0.5) / cells)


@functools.lru_cache(maxsize=None)
def _gaussian_offsets(sigma: float) -> "torch.Tensor":
    """floor(255 sigma z) per table cell, int16: the grey-level offset of gaussian_noise
    (floor(k + t) = k + floor(t) for an integer grey level k)."""
    import torch

    return torch.floor(_normal_quantiles() * (255.0 * sigma)).clamp_(-512, 512).to(torch.int16)


@functools.lru_cache(maxsize=None)
def _speckle_multipliers(sigma: float) -> "torch.Tensor":
    """1 + sigma z per table cell in 16-bit fixed point (int32): speckle maps grey level k to
    (k m) >> 16 = k + floor(k sigma z), within 255 / 2^17 of the exact product."""
    import torch

    return torch.round(_normal_quantiles() * (sigma * (1 << 16))).to(torch.int32).add_(1 << 16)


@functools.lru_cache(maxsize=None)
def _shot_table(scale: float) -> "torch.Tensor":
    """(256 x 2^16) uint8: the output grey level of shot_noise for input level k and table cell
    u, floor(clip(P / scale, 0, 1) * 255) with P the Poisson(k / 255 * scale) quantile at u's
    midpoint. Built in float64 numpy with the reference's operations (16 MB, once per scale)."""
    import numpy as np
    import torch

    cells = 1 << _TABLE_BITS
    top = int(math.ceil(scale))  # P >= scale gives 255: the support needed stops there
    counts = np.arange(top + 1, dtype=np.float64)
    levels = np.clip(counts / scale, 0, 1) * 255
    outputs = levels.astype(np.uint8)
    table = np.empty((256, cells), dtype=np.uint8)
    for k in range(256):
        lam = k / 255.0 * scale
        if lam > 700:  # exp(-lam) underflows; not reached by the CIFAR scales (<= 500)
            raise ValueError(f"shot noise scale {scale} too large for the table sampler")
        pmf = np.empty(top + 1)
        pmf[0] = math.exp(-lam)
        pmf[1:] = lam / counts[1:]
        pmf = np.cumprod(pmf)
        # cells u whose midpoint (u + 1/2) / cells lies below CDF(P) and above CDF(P - 1)
        edges = np.ceil(np.cumsum(pmf) * cells - 0.5).clip(0, cells).astype(np.int64)
        edges[-1] = cells  # the rest of the mass (P >= scale) maps to 255 as well
        table[k] = np.repeat(outputs, np.diff(edges, prepend=0))
    return torch.from_numpy(table.reshape(-1))


# Elements per piece on the CPU: the temporaries (a few hundred KB) stay in the core's cache and
# are reused by the allocator, instead of fresh multi-megabyte buffers (page faults) per batch.
_NOISE_PIECE = 1 << 17


def _elementwise_noise(img, gen, apply):
    """out = apply(values, bits, buffers) over the flattened batch, piece by piece on the CPU
    (one piece on a GPU): ``values`` uint8 elements, ``bits`` their random 16-bit words
    (``_RandomWords``), ``buffers`` temporaries reused by every piece."""
    import torch

    flat = img.reshape(-1)
    piece = flat.numel() if img.device.type != "cpu" else _NOISE_PIECE
    out = torch.empty_like(flat)
    buffers = _Buffers(img.device)
    words = _RandomWords(gen, img.device)
    for start in range(0, flat.numel(), piece):
        values = flat[start:start + piece]
        bits = words.draw(values.numel(), buffers)
        out[start:start + piece] = apply(values, bits, buffers)
    return out.view(img.shape)


def _gaussian_noise(img, sigma, gen):
    import torch

    offsets = _on_device(_gaussian_offsets, float(sigma), str(img.device))

    def apply(values, bits, buffers):
        index = _raw_index(bits, buffers.get("index", len(bits), torch.int32))
        picked = torch.index_select(offsets, 0, index, out=buffers.get("offsets", len(bits), offsets.dtype))
        return picked.add_(values).clamp_(0, 255)

    return _elementwise_noise(img, gen, apply)


def _shot_noise(img, scale, gen):
    import torch

    table = _on_device(_shot_table, float(scale), str(img.device))

    def apply(values, bits, buffers):  # row k of the (256 x 2^16) table, by raw word (half-turned)
        index = _raw_index(bits, buffers.get("index", len(bits), torch.int32))
        index.add_(values, alpha=1 << _TABLE_BITS)
        return torch.index_select(table, 0, index, out=buffers.get("levels", len(bits), table.dtype))

    return _elementwise_noise(img, gen, apply)


def _impulse_noise(img, amount, gen):
    """Each element flips with probability ``amount``; a flipped element is salt (255) or
    pepper (0) with probability 1/2. One 16-bit uniform u per element: flip = u < amount,
    salt = u < amount / 2 (the joint distribution of skimage's two independent masks, each
    probability exact to 2^-16 like the other noise tables), applied with byte masks."""
    import torch

    # thresholds on u = w + 2^15, compared on the signed word w itself (int16: a threshold of
    # 2^15, amount ~ 1, would wrap, so it is compared as "no word keeps its value")
    flip_below = int(round(amount * (1 << _TABLE_BITS))) - (1 << 15)
    salt_below = int(round(amount * (1 << (_TABLE_BITS - 1)))) - (1 << 15)

    def apply(values, bits, buffers):
        kept = bits >= flip_below if flip_below < (1 << 15) else torch.zeros_like(bits, dtype=torch.bool)
        keep = kept.to(torch.uint8).mul_(255)
        salt = (bits < salt_below).to(torch.uint8).mul_(255)
        return values.bitwise_and(keep).bitwise_or_(salt)

    return _elementwise_noise(img, gen, apply)


def _speckle_noise(img, sigma, gen):
    """x (1 + sigma z) = k + floor(k sigma z) for grey level k, sigma z from the quantile table."""
    import torch

    multipliers = _on_device(_speckle_multipliers, float(sigma), str(img.device))

    def apply(values, bits, buffers):
        index = _raw_index(bits, buffers.get("index", len(bits), torch.int32))
        m = torch.index_select(multipliers, 0, index, out=buffers.get("factors", len(bits), torch.int32))
        levels = buffers.get("levels", len(bits), torch.int32).copy_(values)  # int32 * int32 is vectorised
        return m.mul_(levels).bitwise_right_shift_(16).clamp_(0, 255)

    return _elementwise_noise(img, gen, apply)


# --------------------------------------------------------------------------------------------
# Blur
# --------------------------------------------------------------------------------------------
def _gaussian_blur(img, sigma, gen):
    return _to_uint8(_gaussian(_to_float(img, unit=False), sigma), unit=False)


def _glass_blur(img, param, gen):
    import torch

    sigma, delta, iterations = param
    x = _gaussian(_to_float(img, unit=False), sigma)  # 0..255 units throughout
    x = x.clamp(0, 255).floor_()  # np.uint8(gaussian(x) * 255): truncation
    n, c, h, w = x.shape
    # One pass: pixels (h, w), h and w in [delta + 1, size - delta], copy (h + dy, w + dx) with
    # dx, dy in [-delta, delta). For delta = 1 (all CIFAR severities) the sources are up/left
    # and not yet visited by the reference's reversed raster loop: a gather from the pre-pass
    # image.
    rows = torch.arange(h, device=x.device).view(1, h, 1)
    cols = torch.arange(w, device=x.device).view(1, 1, w)
    inner = torch.zeros(h, w, dtype=torch.bool, device=x.device)
    inner[delta + 1:h - delta + 1, delta + 1:w - delta + 1] = True
    for _ in range(iterations):
        d = torch.randint(-delta, delta, (n, 2, h, w), generator=gen, device=x.device)
        d = d * inner  # border pixels stay put
        src = ((rows + d[:, 1]).clamp_(0, h - 1) * w + (cols + d[:, 0]).clamp_(0, w - 1))
        idx = src.reshape(n, 1, h * w).expand(n, c, h * w)
        x = x.reshape(n, c, h * w).gather(2, idx).reshape(n, c, h, w)
    return _to_uint8(_gaussian(x, sigma), unit=False)


@functools.lru_cache(maxsize=None)
def _defocus_kernel(radius: float, alias_blur: float) -> tuple[tuple[float, ...], ...]:
    """The reference disk: 17x17 aliased disk of ``radius`` normalised to sum 1, smoothed by
    cv2.GaussianBlur(ksize (3, 3), sigma alias_blur) = getGaussianKernel(3, sigma) in both
    directions, cropped to its non-zero support."""
    import numpy as np

    grid = np.arange(-8, 9)
    xx, yy = np.meshgrid(grid, grid)
    disk = (xx ** 2 + yy ** 2 <= radius ** 2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-((np.arange(3) - 1.0) ** 2) / (2.0 * alias_blur ** 2))
    g /= g.sum()
    k = np.apply_along_axis(lambda r: np.convolve(r, g, mode="same"), 0, disk)
    k = np.apply_along_axis(lambda r: np.convolve(r, g, mode="same"), 1, k)
    nz_r = np.flatnonzero(k.any(axis=1))
    nz_c = np.flatnonzero(k.any(axis=0))
    half = max(8 - nz_r[0], nz_r[-1] - 8, 8 - nz_c[0], nz_c[-1] - 8)
    return tuple(map(tuple, k[8 - half:9 + half, 8 - half:9 + half].tolist()))


def _defocus_blur(img, param, gen):
    x = _to_float(img, unit=False)
    return _to_uint8(_filter2d(x, _defocus_kernel(*param), "mirror"), unit=False)


def _motion_blur_c(img, param, gen):
    import torch

    radius, sigma = param
    angles = _uniform((img.shape[0],), -45.0, 45.0, gen, img.device)
    return _to_uint8_same_layout(_motion_blur(img.float(), radius, sigma, angles))


@functools.lru_cache(maxsize=None)
def _zoom_factors(start: float, stop: float, step: float) -> tuple[float, ...]:
    import numpy as np

    return tuple(np.arange(start, stop, step).tolist())


@functools.lru_cache(maxsize=8)
def _zoom_blur_operator(h: int, w: int, param: tuple[float, float, float]) -> "np.ndarray":
    """zoom_blur is linear: (x + sum_z Zh_z x Zw_z^T) / (len + 1). As one (HW, HW) matrix
    (transposed, float32) it is a single dense product, ~10x faster than the loop at 32x32."""
    import numpy as np

    factors = _zoom_factors(*param)
    k = np.eye(h * w)
    for z in factors:
        k += np.kron(_clipped_zoom_matrix(h, z), _clipped_zoom_matrix(w, z))
    return np.ascontiguousarray((k / (len(factors) + 1)).T, dtype=np.float32)


def _zoom_blur(img, param, gen):
    import torch

    x = _to_float(img, unit=False)
    n, c, h, w = x.shape
    if h * w <= 4096:
        op = torch.as_tensor(_zoom_blur_operator(h, w, param), device=x.device)
        return _to_uint8((x.reshape(n, c, h * w) @ op).reshape(n, c, h, w), unit=False)
    factors = _zoom_factors(*param)
    acc = x.clone()
    for z in factors:
        acc += _clipped_zoom(x, z)
    return _to_uint8(acc.div_(len(factors) + 1), unit=False)


# --------------------------------------------------------------------------------------------
# Weather
# --------------------------------------------------------------------------------------------
def _snow(img, param, gen):
    import torch

    loc, scale, zoom, threshold, radius, sigma, blend = param
    x = _to_float(img)
    n, _, h, w = x.shape
    layer = torch.randn((n, 1, h, w), generator=gen, device=x.device).mul_(scale).add_(loc)
    layer = _clipped_zoom(layer, zoom)
    layer = _zero_below(layer, threshold)
    layer = layer.clamp_(0, 1).mul_(255).floor_()  # uint8 'L' image
    angles = _uniform((n,), -135.0, -45.0, gen, x.device)
    snow = _motion_blur(layer.view(n, h, w, 1), radius, sigma, angles).view(n, 1, h, w) / 255.0
    r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    grey = 0.299 * r + 0.587 * g + 0.114 * b  # cv2 RGB2GRAY
    # blend x + (1 - blend) max(x, 1.5 grey + 0.5), then + snow + its 180-degree rotation, in
    # place (the same operations in the same order; fewer fresh 12 MB buffers)
    lifted = torch.maximum(x, grey.mul_(1.5).add_(0.5)).mul_(1 - blend)
    x = x.mul_(blend).add_(lifted)
    return _to_uint8(x.add_(snow).add_(snow.flip(-1, -2)))


def _frost(img, param, gen, frost_textures):
    import torch

    w_img, w_frost = param
    n, h, w, _ = img.shape
    textures, sizes = _frost_stack(frost_textures, h, w, img.device)
    k = len(sizes)
    dev = img.device
    idx = torch.randint(0, k, (n,), generator=gen, device=dev)
    th = sizes[idx, 0]
    tw = sizes[idx, 1]
    # randint(0, H - h) and randint(0, W - w): exclusive upper bounds
    r0 = (torch.rand(n, generator=gen, device=dev) * (th - h)).long().clamp_(max=th - h - 1)
    c0 = (torch.rand(n, generator=gen, device=dev) * (tw - w)).long().clamp_(max=tw - w - 1)
    rows = r0[:, None, None] + torch.arange(h, device=dev)[None, :, None]
    cols = c0[:, None, None] + torch.arange(w, device=dev)[None, None, :]
    crop = textures[idx[:, None, None], rows, cols]  # (N, h, w, 3) float 0..255
    out = img.float().mul_(w_img).add_(crop.mul_(w_frost))  # in place: fewer fresh buffers
    return _to_uint8_same_layout(out.clamp_(0, 255))


def _plasma(n: int, size: int, decay: float, gen, device):
    """Batched diamond-square plasma fractal on a torus, min-max normalised to [0, 1]."""
    import torch

    m = torch.zeros((n, size, size), device=device)
    step, wibble = size, 100.0

    def wibbled(total, shape):
        noise = _uniform(shape, -wibble, wibble, gen, device)
        return total / 4 + wibble * noise

    while step >= 2:
        half = step // 2
        corners = m[:, ::step, ::step]
        g = corners.shape[1]
        square = corners + corners.roll(-1, 1)
        square = square + square.roll(-1, 2)
        m[:, half::step, half::step] = wibbled(square, (n, g, g))
        centres = m[:, half::step, half::step]
        # points between horizontal corner pairs: left/right corners + centres above/below
        row_pts = corners + corners.roll(-1, 2) + centres + centres.roll(1, 1)
        m[:, ::step, half::step] = wibbled(row_pts, (n, g, g))
        # points between vertical corner pairs: upper/lower corners + centres left/right
        col_pts = corners + corners.roll(-1, 1) + centres + centres.roll(1, 2)
        m[:, half::step, ::step] = wibbled(col_pts, (n, g, g))
        step //= 2
        wibble /= decay
    m = m - m.amin(dim=(1, 2), keepdim=True)
    return m / m.amax(dim=(1, 2), keepdim=True)


def _fog(img, param, gen):
    strength, decay = param
    x = _to_float(img)
    n, _, h, w = x.shape
    size = max(32, 1 << (max(h, w) - 1).bit_length())
    max_val = x.amax(dim=(1, 2, 3), keepdim=True)
    fog = _plasma(n, size, decay, gen, x.device)[:, None, :h, :w]
    x = x.add_(strength * fog)  # in place: no fresh 12 MB buffers (page faults on CPU)
    return _to_uint8(x.mul_(max_val).div_(max_val + strength))


def _brightness(img, c, gen):
    """scikit-image HSV with V <- clip(V + c). With hue and saturation fixed every channel
    scales with V: out = x V'/V. Channels equal to V (all of them for grey pixels) become V'
    itself, taken from the reference's float64 values; the others agree with scikit-image
    except on rare float ties (under 0.4% of values, 1 grey level, checked against 0.26)."""
    import torch

    x = img.float()  # 0..255, (N, H, W, 3)
    v = x.amax(dim=-1, keepdim=True)
    is_max = x == v
    lut = torch.tensor(_brightness_lut(float(c)), device=img.device)
    # in place (no fresh 12 MB buffers); 0/0 only where x == v, which takes the table's value
    scaled = x.mul_((v + 255.0 * c).clamp_(max=255.0) / v)
    return _to_uint8_same_layout(torch.where(is_max, lut[v.long()], scaled, out=scaled))


def _spatter(img, param, gen):
    import torch

    loc, scale, sigma, threshold, intensity, mode = param
    x = _to_float(img)
    n, _, h, w = x.shape
    liquid = torch.randn((n, 1, h, w), generator=gen, device=x.device).mul_(scale).add_(loc)
    liquid = _gaussian(liquid, sigma)
    liquid = _zero_below(liquid, threshold)
    # the blends below work in place, channel by channel: a (N, 1) layer broadcast over the
    # (N, 3) image would cost fresh 12 MB buffers (page faults on CPU)
    if mode == 0:  # water
        colour = torch.tensor([175, 238, 238], device=x.device) / 255.0
        m = _water_mask(liquid, intensity)[:, 0]
        for c in range(3):
            x[:, c].add_(m * colour[c])
        return _to_uint8(x)
    # mud
    m = _gaussian((liquid > threshold).float(), intensity)
    m = _zero_below(m, 0.8)[:, 0]
    colour = torch.tensor([63, 42, 20], device=x.device) / 255.0
    kept = 1 - m
    for c in range(3):
        x[:, c].mul_(kept).add_(m * colour[c])
    return _to_uint8(x)


def _water_mask(liquid, intensity):
    """Spatter's water layer: uint8 liquid -> Canny(50, 150) -> inverted -> 5x5 chamfer L2
    distance -> truncate 20 -> 3x3 blur -> uint8 -> equalizeHist -> emboss (8-bit) -> 3x3 blur
    (8-bit) -> times the liquid, each image divided by its max, times ``intensity``."""
    import torch

    liquid8 = liquid.clamp(0, 1).mul_(255).floor_()
    dist = _chamfer_distance(_canny(liquid8, 50, 150), cap=20.0)
    dist = _box3(dist).floor_()  # float blur, then astype(uint8)
    dist = _equalize_hist(dist)
    emboss = ((-2.0, -1.0, 0.0), (-1.0, 1.0, 1.0), (0.0, 1.0, 2.0))
    dist = _filter2d(dist, emboss, "mirror").round_().clamp_(0, 255)  # integer sums: exact
    dist = _box3(dist).round_()  # uint8 blur rounds to nearest
    m = liquid8 * dist
    peak = m.amax(dim=(1, 2, 3), keepdim=True)
    # m >= 0: where the peak is 0, m is all 0 and 0 / 1e-12 leaves it so (no where needed)
    return m.div_(peak.clamp(min=1e-12)).mul_(intensity)


def _canny(img, low: float, high: float):
    """cv2.Canny (below) in chunks of images on the CPU: its many full-size temporaries then
    stay in cache (about 1.3x faster)."""
    import torch

    if img.device.type != "cpu" or len(img) <= _CANNY_CHUNK:
        return _canny_images(img, low, high)
    return torch.cat([_canny_images(img[i:i + _CANNY_CHUNK], low, high)
                      for i in range(0, len(img), _CANNY_CHUNK)])


_CANNY_CHUNK = 128


def _canny_images(img, low: float, high: float):
    """cv2.Canny(img, low, high) (aperture 3, L1 gradient) on (N, 1, H, W) values 0..255.

    Returns a bool edge map (N, 1, H, W). Sobel with replicated borders; OpenCV's non-maximum
    suppression (sector tests in 15-bit fixed point, '>' before and '>=' after along the
    gradient, both '>' on diagonals, magnitude 0 outside the image); hysteresis as repeated
    3x3 dilation of the strong edges inside the candidates (8-connectivity).
    """
    import torch
    import torch.nn.functional as F

    x = img[:, 0]
    h, w = x.shape[-2:]
    # Sobel sums are integers below 1024: float32 then rounding is exact. Below, every product
    # stays under 2^31, so int32 is exact too.
    dx = _filter2d(x, ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0)), "nearest")
    dy = _filter2d(x, ((-1.0, -2.0, -1.0), (0.0, 0.0, 0.0), (1.0, 2.0, 1.0)), "nearest")
    dx = dx.round_().to(torch.int32)
    dy = dy.round_().to(torch.int32)
    ax, ay = dx.abs(), dy.abs()
    mag = ax + ay
    mp = F.pad(mag, (1, 1, 1, 1))

    def at(di, dj):
        return mp[:, 1 + di:1 + di + h, 1 + dj:1 + dj + w]

    tg22 = ax * 13573  # int(tan(22.5 deg) * 2^15 + 0.5)
    ay = ay * 32768
    horizontal = ay < tg22
    vertical = ~horizontal & (ay > tg22 + ax * 65536)
    diagonal = ~(horizontal | vertical)
    same_sign = (dx < 0) == (dy < 0)
    diag_ok = (same_sign & (mag > at(-1, -1)) & (mag > at(1, 1))) \
        | (~same_sign & (mag > at(-1, 1)) & (mag > at(1, -1)))
    is_max = (horizontal & (mag > at(0, -1)) & (mag >= at(0, 1))) \
        | (vertical & (mag > at(-1, 0)) & (mag >= at(1, 0))) | (diagonal & diag_ok)
    candidate = (mag > math.floor(low)) & is_max
    edges = candidate & (mag > math.floor(high))
    for _ in range(h * w):
        p = F.pad(edges.to(torch.uint8), (1, 1, 1, 1)).bool()
        grown = p[:, :, :-2] | p[:, :, 1:-1] | p[:, :, 2:]
        grown = (grown[:, :-2] | grown[:, 1:-1] | grown[:, 2:]) & candidate
        if torch.equal(grown, edges):
            break
        edges = grown
    return edges[:, None]


def _chamfer_distance(edges, cap: float):
    """cv2.distanceTransform(255 - edges, DIST_L2, 5), capped at ``cap``: distance to the
    nearest edge pixel under the 5x5 chamfer metric (steps 1, 1.4, 2.1969, in OpenCV's 16-bit
    fixed point). OpenCV's two raster passes, vectorised over images and columns: each row
    takes the causal mask's contributions from the two rows before it, then the in-row
    recursion d[j] = min(d[j], d[j-1] + a) is a*j + cummin(d[k] - a*k).

    The scans run on a (H, W + 4, N) layout, images innermost: a row and its shifted
    neighbours are then contiguous blocks, and the two columns of padding on each side hold
    the out-of-image value. Every value is an integer below 2^24, exact in float32, so taking
    a minimum before adding a common step cost is the same as after."""
    import torch

    a, b, c = 65536.0, 91750.0, 143976.0  # round(65536 * (1, 1.4, 2.1969))
    big = cap * 65536.0
    n, _, h, w = edges.shape
    d = torch.full((h, w + 4, n), big, dtype=torch.float32, device=edges.device)
    inside = d[:, 2:w + 2]
    inside.copy_(edges[:, 0].permute(1, 2, 0)).neg_().add_(1).mul_(big)  # 0 on edges, big elsewhere
    ramp = (torch.arange(w, dtype=torch.float32, device=d.device) * a)[:, None]

    def scan(d):
        for i in range(h):
            row = d[i, 2:w + 2]
            if i >= 1:
                prev = d[i - 1]  # columns j - 2 .. j + 2 of the row above: prev[j .. j + 4]
                row = torch.minimum(row, prev[2:w + 2] + a)
                row = torch.minimum(row, torch.minimum(prev[1:w + 1], prev[3:w + 3]).add_(b))
                row = torch.minimum(row, torch.minimum(prev[0:w], prev[4:w + 4]).add_(c))
            if i >= 2:
                prev2 = d[i - 2]
                row = torch.minimum(row, torch.minimum(prev2[1:w + 1], prev2[3:w + 3]).add_(c))
            d[i, 2:w + 2] = torch.cummin(row - ramp, dim=0).values.add_(ramp)
        return d

    def mirrored(d):  # d.flip(0, 1), as the (H (W + 4)) rows of N values in reverse order
        rows = d.view(h * (w + 4), n)
        reverse = torch.arange(len(rows) - 1, -1, -1, device=d.device)
        return rows.index_select(0, reverse).view(h, w + 4, n)  # whole rows: block copies

    d = scan(d)  # forward: top-left to bottom-right
    d = mirrored(scan(mirrored(d)))  # backward: the mirrored mask
    return d[:, 2:w + 2].clamp_(max=big).div_(65536.0).permute(2, 0, 1)[:, None]


def _equalize_hist(x):
    """cv2.equalizeHist per image on (N, 1, H, W) integer values 0..255 (float)."""
    import torch

    n = x.shape[0]
    levels = x.reshape(n, -1).to(torch.int32, copy=True)
    total = levels.shape[1]
    # one histogram for the batch: level v of image i counts in bin 256 i + v
    keys = levels.add_((torch.arange(n, dtype=torch.int32, device=x.device) * 256)[:, None]).view(-1)
    hist = torch.bincount(keys, minlength=256 * n).view(n, 256)
    first = (hist > 0).long().argmax(dim=1, keepdim=True)
    h0 = hist.gather(1, first)
    cdf = hist.cumsum(1)
    denom = (total - h0).clamp(min=1).float()
    lut = ((cdf - h0).float() * (255.0 / denom)).round_().clamp_(0, 255)
    lut = torch.where(h0 == total, torch.arange(256, device=x.device).float().expand(n, 256), lut)
    return lut.view(-1).index_select(0, keys).view(x.shape)


# --------------------------------------------------------------------------------------------
# Digital
# --------------------------------------------------------------------------------------------
def _contrast(img, c, gen):
    """(x - m) c + m with m the mean of each image and channel, as c x + (1 - c) m."""
    import torch

    n, h, w, channels = img.shape
    if img.device.type != "cpu":  # one fused pass; a GPU reduces and broadcasts fast
        x = img.float()
        means = x.view(n, h * w, channels).mean(1).view(n, 1, 1, channels)
        return _to_uint8_same_layout(torch.add(means * (1 - c), x, alpha=c).clamp_(0, 255))
    # On the CPU a reduction and a broadcast over a 3-wide axis are slow: the channel sums are
    # one product with a 0/1 matrix and c x + (1 - c) m a second product that writes the
    # result, piecewise so the temporaries stay in cache. The sums are integers below 2^24 up
    # to 256x256 pixels: exact in float32, like torch.mean's (corrupt() keeps the products
    # IEEE float32 whatever the user's matmul precision).
    pick = torch.eye(channels).repeat(h * w, 1)  # (h w channels, channels)
    spread = pick.t() * ((1 - c) / (h * w))  # channel sums -> (1 - c) m at every position
    piece = max(1, _CONTRAST_PIECE // (h * w * channels))
    out = torch.empty_like(img)
    for start in range(0, n, piece):
        x = img[start:start + piece].reshape(-1, h * w * channels).float()  # 0..255
        y = torch.addmm(x, torch.mm(x, pick), spread, beta=c)
        out[start:start + piece] = _to_uint8_same_layout(y.clamp_(0, 255)).view(-1, h, w, channels)
    return out


_CONTRAST_PIECE = 1 << 18  # elements


def _elastic_transform(img, param, gen):
    """(1) cv2.warpAffine by a random affine map of three jittered anchor points, then (2)
    scipy map_coordinates at (row + dy, col + dx) with Gaussian-smoothed uniform noise fields."""
    import torch

    # grid_sample reads a channels-last batch as fast as a contiguous one: no transposing copy
    x = _unit(img).permute(0, 3, 1, 2)
    n, _, h, w = x.shape
    alpha, sigma, affine = (p * min(h, w) for p in param)  # x IMSIZE = 32 for CIFAR
    dev = x.device
    cx, cy, s = w // 2, h // 2, min(h, w) // 3
    src = torch.tensor([[cx + s, cy + s], [cx + s, cy - s], [cx - s, cy - s]],
                       dtype=torch.float64, device=dev)  # (x, y) anchor points
    dst = src + _uniform((n, 3, 2), -affine, affine, gen, dev).double()
    # warpAffine samples the source at M^-1(dst pixel): solve T with [dst_k, 1] @ T = src_k
    ones = torch.ones((n, 3, 1), dtype=torch.float64, device=dev)
    x = _warp_affine(x, torch.linalg.solve(torch.cat([dst, ones], dim=2), src.expand(n, 3, 2)))
    if alpha > 0:  # severity 1 has alpha 0: affine only
        noise = _uniform16((n, 2, h, w), -1.0, 1.0, gen, dev)  # dx field, then dy field
        disp = _gaussian(noise, sigma, mode="reflect", truncate=3.0)
        x = _displace(x, disp, alpha)
    return _to_uint8(x)


def _warp_affine(x, t):
    """cv2.warpAffine(INTER_LINEAR, BORDER_REFLECT_101) given the inverse map: output pixel
    (col, row) samples the source at [col, row, 1] @ t[n], t of shape (N, 3, 2), (x, y) order.
    grid_sample's reflection about the first and last pixel centres (align_corners) is
    REFLECT_101 for bilinear taps. The map to grid_sample's [-1, 1] coordinates is folded into
    t. The grid is separable, (col t0 + row t1 + t2 - 1) per coordinate: a per-image column
    term plus a per-image row term, one broadcast sum (a batched product of 1024 x 3 by 3 x 2
    per image costs several times more)."""
    import torch
    import torch.nn.functional as F

    n, _, h, w = x.shape
    t = t.double() * torch.tensor([2.0 / (w - 1), 2.0 / (h - 1)], dtype=torch.float64, device=x.device)
    t = t.transpose(1, 2)  # (N, 2 coordinates, 3 coefficients)
    cols = torch.arange(w, dtype=torch.float64, device=x.device) * t[:, :, 0:1]  # (N, 2, W)
    rows = torch.arange(h, dtype=torch.float64, device=x.device) * t[:, :, 1:2]  # (N, 2, H)
    rows = rows.add_(t[:, :, 2:3] - 1).to(x.dtype)
    grid = torch.add(rows.unsqueeze(3), cols.to(x.dtype).unsqueeze(2))  # (N, 2, H, W)
    return F.grid_sample(x, grid.permute(0, 2, 3, 1), mode="bilinear", padding_mode="reflection",
                         align_corners=True)


def _displace(x, disp, alpha: float):
    """scipy.ndimage.map_coordinates(order=1, mode='reflect') of every channel at
    (row + alpha dy, col + alpha dx), disp of shape (N, 2, H, W) holding (dx, dy). SciPy's
    'reflect' is half-sample symmetric: grid_sample's reflection about the image edges (no
    align_corners) followed by clamping to the pixel centres. Overwrites disp."""
    import torch
    import torch.nn.functional as F

    h, w = x.shape[-2:]
    # grid = (2 (pos + alpha d) + 1) / size - 1 per coordinate plane, handed to grid_sample as
    # a (N, H, W, 2) view (it reads the strided grid as fast as a contiguous one)
    cols = torch.arange(w, dtype=x.dtype, device=x.device).mul_(2).add_(1).div_(w).sub_(1)
    rows = torch.arange(h, dtype=x.dtype, device=x.device).mul_(2).add_(1).div_(h).sub_(1)
    disp[:, 0].mul_(2 * alpha / w).add_(cols)
    disp[:, 1].mul_(2 * alpha / h).add_(rows.unsqueeze(1))
    return F.grid_sample(x, disp.permute(0, 2, 3, 1), mode="bilinear", padding_mode="reflection",
                         align_corners=False)


@functools.lru_cache(maxsize=None)
def _pil_box_members(in_size: int, out_size: int) -> "np.ndarray":
    """Pillow's BOX resampling of one axis as an (out, in) 0/1 membership matrix.

    Pillow's box filter is point-sampled: output i averages, with equal weights, the inputs
    whose centres fall in its box [i, i + 1) * in / out (for upscaling: the one nearest input).
    """
    import numpy as np

    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 0.5 * filterscale
    member = np.zeros((out_size, in_size), dtype=np.float32)
    for i in range(out_size):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        pos = (np.arange(lo, hi) - center + 0.5) / filterscale
        member[i, lo:hi] = (pos > -0.5) & (pos <= 0.5)
    return member


@functools.lru_cache(maxsize=None)
def _pixelate_pairs(size: int, c: float) -> tuple["np.ndarray", "np.ndarray"]:
    """Pixelate along one axis as a rounded pair average: for each output position, the first
    and last input of the box it is copied back from.

    Down to int(size c) and back with c in (1/2, 1] (all CIFAR severities), each box averages one
    or two inputs and every upscaled output copies one box. Pillow stores a one-input weight as
    2^22 and a two-input weight as 2^21 (22-bit fixed point), so a pass is (a + b + 1) >> 1 with
    b = a for one input, exactly; the copy-back commutes with the other axis's pass."""
    down = int(size * c)
    if not size <= 2 * down <= 2 * size:
        raise ValueError(f"pixelate factor {c} at size {size} is outside [1/2, 1]")
    member = _pil_box_members(size, down)  # boxes of one or two pixels: width size / down <= 2
    up_member = _pil_box_members(down, size)  # upscaling: one box per pixel
    up = up_member.argmax(axis=1)
    first = member.argmax(axis=1)
    last = member.shape[1] - 1 - member[:, ::-1].argmax(axis=1)
    return first[up], last[up]


def _round_up_mean(a, b, out=None):
    """(a + b + 1) >> 1 on uint8 without widening: (a | b) - ((a ^ b) >> 1), into ``out`` if
    given."""
    import torch

    return torch.bitwise_or(a, b, out=out).sub_((a ^ b).bitwise_right_shift_(1))


def _pixelate(img, c, gen):
    """PIL resize(BOX) to int(size * c), then resize(BOX) back (Pillow: horizontal pass, then
    vertical, uint8 after each), as uint8 gathers and rounded averages."""
    if img.device.type == "cpu":
        return _pixelate_cpu(img, float(c))
    return _pixelate_gathered(img, float(c))


def _pixelate_gathered(img, c: float):
    """``_pixelate`` as two gathers and a rounded mean per axis (fast on GPUs)."""
    import torch

    n, h, w, _ = img.shape
    ca, cb = (torch.as_tensor(i, device=img.device) for i in _pixelate_pairs(w, c))
    ra, rb = (torch.as_tensor(i, device=img.device) for i in _pixelate_pairs(h, c))
    x = _round_up_mean(img.index_select(2, ca), img.index_select(2, cb))
    return _round_up_mean(x.index_select(1, ra), x.index_select(1, rb))


# Pixels per chunk of the CPU pixelate (128 CIFAR images): its two working buffers (1.5 MB)
# stay in cache.
_PIXELATE_CHUNK_PIXELS = 128 * 32 * 32


def _pixelate_cpu(img, c: float):
    """``_pixelate`` with one gather per axis, for the CPU, where torch gathers 3-byte pixels one
    memcpy at a time (9 ms per 1,000 CIFAR images per gather). Each pass first appends the rounded
    mean of every value and its right (or lower) neighbour, computed on the flat bytes, then
    picks each output from the originals or the means: columns with numpy's take on a 3-byte
    item view (3 ms), rows with index_select on whole rows. Same bytes as the generic path."""
    import numpy as np
    import torch

    n, h, w, _ = img.shape
    row_bytes = 3 * w
    chunk = max(1, _PIXELATE_CHUNK_PIXELS // (h * w))
    out = torch.empty_like(img)
    pixels = torch.empty(2 * min(chunk, n) * h * row_bytes, dtype=torch.uint8)
    columns = torch.empty_like(pixels)
    for start in range(0, n, chunk):
        part = img[start:start + chunk]
        m, size = part.shape[0], part.numel()
        pixels[:size].view(part.shape).copy_(part)
        _append_neighbour_means(pixels, size, 3)
        np.take(pixels[:2 * size].numpy().view("V3"), _pixelate_sources(m * h, w, c),
                out=columns[:size].numpy().view("V3"), mode="clip")
        _append_neighbour_means(columns, size, row_bytes)
        torch.index_select(columns[:2 * size].view(2 * m * h, row_bytes), 0,
                           torch.from_numpy(_pixelate_sources(m, h, c)),
                           out=out[start:start + m].view(m * h, row_bytes))
    return out


def _append_neighbour_means(buffer, size: int, step: int):
    """buffer[size + i] = _round_up_mean(buffer[i], buffer[i + step]) for i < size - step, the
    means of the first ``size`` values and their neighbours ``step`` on (the last ``step``
    places, without a neighbour, are left unset and never read)."""
    _round_up_mean(buffer[:size - step], buffer[step:size], out=buffer[size:2 * size - step])


@functools.lru_cache(maxsize=32)
def _pixelate_sources(lines: int, size: int, c: float) -> "np.ndarray":
    """For ``lines`` lines of ``size`` inputs followed by the ``lines`` lines of their means
    (place i of a means line: the mean of inputs i and i + 1), the flat index of each output's
    source: a line's outputs take their own line's inputs or means."""
    import numpy as np

    first, last = _pixelate_pairs(size, c)
    src = np.where(last > first, lines * size + first, first)  # a mean: a whole block further on
    return (np.arange(lines)[:, None] * size + src).reshape(-1)


def _jpeg_compression(img, quality, gen):
    """Pillow JPEG encode at ``quality`` (other settings default) and decode: the batched
    tensor codec of ``macs_audit.views.corruptions.jpeg`` (bit-identical) when the sides are multiples of 16,
    else Pillow itself, one image at a time."""
    import io

    import numpy as np
    import torch
    from PIL import Image

    from macs_audit.views.corruptions import jpeg

    if jpeg.supports(img.shape[1], img.shape[2]):
        return jpeg.roundtrip(img, quality)
    arr = img.cpu().numpy()
    out = np.empty_like(arr)
    for i in range(arr.shape[0]):
        buf = io.BytesIO()
        Image.fromarray(arr[i]).save(buf, format="JPEG", quality=quality)
        buf.seek(0)
        with Image.open(buf) as decoded:
            out[i] = np.asarray(decoded if decoded.mode == "RGB" else decoded.convert("RGB"))
    return torch.from_numpy(out).to(img.device)


def _saturate(img, param, gen):
    """scikit-image rgb2hsv, S <- clip(S mult + add), hsv2rgb: the same float64 values, so the
    result is bit-identical to scikit-image's (checked against 0.26 on every tie pattern and 1.5
    M random pixels). Many outputs here are exact integers in exact arithmetic (e.g.
    V - 1.5 (V - x) at severity 3), where only the float64 rounding decides the floor; a cheaper
    algebraic form gets 8% of values 1 grey level brighter."""
    import torch

    # Chunks of pixels keep the float64 temporaries in the core's cache (about 2x faster on CPU);
    # a GPU takes the batch at once (chunks there only add kernel launches).
    pixels = img.reshape(-1, 3)
    out = torch.empty_like(pixels)
    chunk = _SATURATE_CHUNK if img.device.type == "cpu" else max(len(pixels), 1)
    scale = torch.eye(3, dtype=torch.float64, device=img.device).mul_(255.0)
    for start in range(0, len(pixels), chunk):
        rgb = _saturate_planes(pixels[start:start + chunk], param)
        # x 255 and back to (P, 3) in one product with 255 I (x 255 + 0 + 0: the same
        # values), which reads the planes far faster than a transposing copy
        out[start:start + chunk] = torch.mm(rgb.t(), scale).to(torch.int16)  # truncates
    return out.view(img.shape)


_SATURATE_CHUNK = 1 << 15


# Per channel (r, g, b), (start, end): K's rising ramp is h6 - start, its falling ramp end - h6.
# K is the clamped minimum of the two for r (a plateau between them), the clamped maximum for
# g and b (a valley).
_HUE_RAMPS = ((1.0, 5.0), (3.0, 1.0), (5.0, 3.0))


def _saturate_planes(pixels, param):
    """(P, 3) uint8 -> (3, P) float64 planes of the result in [0, 1] (before x 255).

    Every value is computed as scikit-image computes it, or by an operation that rounds the same
    real number once (so gives the same float64). No torch.where: on CPU it runs a branch per
    value, mispredicted on image data; selections are lerps with 0/1 weights (exact for finite
    ends) and min / max / clamp."""
    import torch

    mult, add = param
    # Divisions by one-element tensors, not Python numbers: CUDA turns x / number into
    # x * (1 / number), which rounds differently (k / 255 for 24 of the 256 levels k).
    x = pixels.t().to(torch.float64, memory_format=torch.contiguous_format)
    x = x.div_(_constant(255.0, x))
    r, g, b = x
    v = torch.maximum(torch.maximum(r, g), b)
    delta = v - torch.minimum(torch.minimum(r, g), b)
    # Grey pixels (delta 0) get s = h = 0 in scikit-image. Here they are the NaNs of 0 / 0 (in
    # s where v = 0 too; in numerator / delta the numerator is 0 there), and only they: delta
    # <= v and |numerator| <= delta. nan_to_num sets exactly those to 0.
    s = torch.div(delta, v).nan_to_num_(0.0)
    # The last maximal channel sets the hue: numerator and offset of r, overridden by g's where
    # g is maximal, by b's where b is.
    b_max = torch.eq(b, v, out=torch.empty_like(v))
    g_max = torch.eq(g, v, out=torch.empty_like(v))
    numerator = torch.lerp(torch.lerp(g - b, b - r, g_max), r - g, b_max)
    offset = torch.lerp(g_max.mul_(2.0), _constant(4.0, v), b_max)
    h = numerator.div_(delta).add_(offset).div_(_constant(6.0, v))  # offset + y: the same sum
    # h % 1 for h in [-1/6, 5/6]: numpy's remainder adds 1 to a negative h, adding 0 is exact
    h = h.add_(torch.lt(h, 0, out=b_max)).nan_to_num_(0.0)
    s = s.mul_(mult).add_(add).clamp_(0, 1)
    h6 = h.mul_(6.0)
    # hsv2rgb picks, per hue sector i = floor(h6) with f = h6 - i, each channel among v,
    # p = v (1 - s), q = v (1 - f s) (odd sectors) and t = v (1 - (1 - f) s) (even): v (1 - K s)
    # with K = 0, 1, f or 1 - f. K per channel is a clamped hue ramp, whose rising part h6 - i
    # is f and falling part (i + 1) - h6 is 1 - f, each one rounding of the same real number.
    # Sector 6 (h6 rounding up to 6.0) acts as sector 0 with f = 0, as "% 6" makes it.
    up, down = torch.empty_like(x), torch.empty_like(x)
    neg_h6 = h6.neg()
    for c, (start, end) in enumerate(_HUE_RAMPS):  # by rows: broadcast columns are slow on CPU
        torch.sub(h6, start, out=up[c])
        torch.add(neg_h6, end, out=down[c])
    k = torch.maximum(up, down)  # g: t, v, v, q, p, p; b: p, p, t, v, v, q
    torch.minimum(up[0], down[0], out=k[0])  # r: v, q, p, p, t, v
    # v (1 - K s) as v (1 + K (-s)), in [0, 1]: K = 0 gives v and K = 1 gives p exactly
    return k.clamp_(0, 1).mul_(s.neg_()).add_(1).mul_(v)


def _constant(value: float, like):
    """A one-element tensor that broadcasts against ``like``."""
    import torch

    return torch.full((1,), value, dtype=like.dtype, device=like.device)


# --------------------------------------------------------------------------------------------
# Frost textures
# --------------------------------------------------------------------------------------------
def _frost_files(directory: str) -> list[str]:
    """The frost image files of a user directory, in the order they are indexed."""
    if not os.path.isdir(directory):
        raise InputError(f"frost texture directory {directory} does not exist or is not a "
                         "directory; pass a directory of frost images")
    names = sorted(f for f in os.listdir(directory)
                   if f.lower().endswith(_IMAGE_SUFFIXES) and not f.startswith("."))
    if all(ref in names for ref in _FROST_REFERENCE_NAMES):
        return list(_FROST_REFERENCE_NAMES)  # the reference picks frost1..5 (never frost6)
    if not names:
        raise InputError(f"frost texture directory {directory} holds no image files "
                         f"({', '.join(_IMAGE_SUFFIXES)})")
    return names


@functools.lru_cache(maxsize=8)
def _load_user_frost(directory: str) -> tuple["np.ndarray", ...]:
    """User frost images as RGB uint8 arrays, resized by 0.2 as the CIFAR reference does."""
    import numpy as np
    import torch
    import torch.nn.functional as F
    from PIL import Image

    textures = []
    for name in _frost_files(directory):
        path = os.path.join(directory, name)
        try:
            with Image.open(path) as im:
                rgb = np.asarray(im.convert("RGB"))
        except (OSError, ValueError) as exc:
            raise InputError(f"cannot read frost texture {path}: {exc}") from None
        h, w = rgb.shape[:2]
        size = (max(1, int(round(h * 0.2))), max(1, int(round(w * 0.2))))
        t = torch.from_numpy(rgb.copy()).permute(2, 0, 1)[None].float()
        t = F.interpolate(t, size=size, mode="bilinear", align_corners=False, antialias=False)
        textures.append(t[0].permute(1, 2, 0).add_(0.5).floor_().clamp_(0, 255)
                        .to(torch.uint8).numpy())
    return tuple(textures)


def _smooth_noise(gen, h: int, w: int, cells: tuple[int, ...], falloff: float):
    """Sum of bicubically upsampled uniform grids (value noise), min-max normalised."""
    import torch
    import torch.nn.functional as F

    out = torch.zeros(1, 1, h, w, dtype=torch.float64)
    for octave, n in enumerate(cells):
        grid = torch.rand(1, 1, n + 1, n * w // h + 2, generator=gen, dtype=torch.float64)
        out += F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False) * falloff ** octave
    return (out - out.min()) / (out.max() - out.min())


def _line_kernel(angle: float, length: int) -> "np.ndarray":
    """Anti-aliased line segment through the centre of a square kernel, fading to its ends."""
    import numpy as np

    r = length // 2
    yy, xx = np.mgrid[-r:r + 1, -r:r + 1].astype(np.float64)
    across = np.abs(-np.sin(angle) * xx + np.cos(angle) * yy)
    along = np.abs(np.cos(angle) * xx + np.sin(angle) * yy)
    return np.clip(1.0 - across, 0, 1) * np.clip(1.0 - along / (r + 1), 0, 1)


@functools.lru_cache(maxsize=16)
def _procedural_frost(index: int, h: int, w: int) -> "np.ndarray":
    """A frost-like RGB uint8 texture (h, w, 3), deterministic for (index, h, w).

    Ice on a window pane: a cloudy density field (where the frost is thick), feathery crystals
    (needles seeded by the density, aligned with a smooth orientation field, with fainter side
    branches at +-60 degrees) and a milky glow around them, tinted blue-white. Generated on the
    CPU from a fixed seed, so every device and run sees the same texture.
    """
    import numpy as np
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(_FROST_SEED + index)
    density = _smooth_noise(gen, h, w, (2, 4, 8, 16), 0.55)
    orientation = _smooth_noise(gen, h, w, (2, 3), 0.5) * (2 * math.pi)
    seeds = torch.rand(1, 1, h, w, generator=gen, dtype=torch.float64)
    bins = 8  # orientation bins; each bin's seeds grow a needle and two side branches
    which = torch.floor(torch.remainder(orientation, math.pi) / (math.pi / bins)).long()
    pts = torch.cat([((seeds < 0.06 * density) & (which == b)).double() for b in range(bins)], 1)
    kernels = []
    for b in range(bins):
        angle = (b + 0.5) * math.pi / bins
        for offset, strength, length in ((0.0, 1.0, 9), (math.pi / 3, 0.45, 5), (-math.pi / 3, 0.45, 5)):
            k = np.pad(_line_kernel(angle + offset, length), (9 - length) // 2) * strength
            kernels.append(torch.as_tensor(k))
    weight = torch.stack(kernels)[:, None].float()  # (3 bins, 1, 9, 9); float32 is fast here
    crystals = F.conv2d(pts.repeat_interleave(3, dim=1).float(), weight, padding=4, groups=3 * bins)
    crystals = crystals.amax(dim=1, keepdim=True).clamp(0, 1).double()
    glow = _gaussian(crystals, 1.5)
    grain = torch.rand(1, 1, h, w, generator=gen, dtype=torch.float64)
    v = 0.30 + 0.30 * density + 0.55 * glow * (0.5 + density) + 0.45 * crystals + 0.05 * grain
    v = v.clamp(0, 1)[0, 0]
    tint = torch.tensor([0.85, 0.93, 1.0], dtype=torch.float64)
    return (v[..., None] * tint * 255.0).floor().to(torch.uint8).numpy()


def _frost_stack(frost_textures: str | None, h: int, w: int, device):
    """All textures as one zero-padded float tensor (K, Hmax, Wmax, 3) plus their (K, 2) sizes."""
    import torch

    if frost_textures is None:
        sizes = [(max(th, h + 1), max(tw, w + 1)) for th, tw in _FROST_SIZES]
        textures = [_procedural_frost(i, th, tw) for i, (th, tw) in enumerate(sizes)]
    else:
        directory = os.path.abspath(os.fspath(frost_textures))
        textures = list(_load_user_frost(directory))
        names = _frost_files(directory)
        for name, t in zip(names, textures):
            if t.shape[0] < h + 1 or t.shape[1] < w + 1:
                raise InputError(
                    f"frost texture {name} is {t.shape[1]}x{t.shape[0]} after the 0.2 resize, "
                    f"smaller than the {w + 1}x{h + 1} needed for {w}x{h} images; use larger images")
    hmax = max(t.shape[0] for t in textures)
    wmax = max(t.shape[1] for t in textures)
    stack = torch.zeros((len(textures), hmax, wmax, 3), dtype=torch.float32)
    for i, t in enumerate(textures):
        stack[i, : t.shape[0], : t.shape[1]] = torch.from_numpy(t).float()
    sizes_t = torch.tensor([t.shape[:2] for t in textures], dtype=torch.long)
    return stack.to(device), sizes_t.to(device)


_FUNCTIONS = {
    "gaussian_noise": _gaussian_noise,
    "shot_noise": _shot_noise,
    "impulse_noise": _impulse_noise,
    "defocus_blur": _defocus_blur,
    "glass_blur": _glass_blur,
    "motion_blur": _motion_blur_c,
    "zoom_blur": _zoom_blur,
    "snow": _snow,
    "frost": _frost,
    "fog": _fog,
    "brightness": _brightness,
    "contrast": _contrast,
    "elastic_transform": _elastic_transform,
    "pixelate": _pixelate,
    "jpeg_compression": _jpeg_compression,
    "speckle_noise": _speckle_noise,
    "gaussian_blur": _gaussian_blur,
    "spatter": _spatter,
    "saturate": _saturate,
}
assert tuple(_FUNCTIONS) == CORRUPTIONS
