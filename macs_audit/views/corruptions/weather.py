"""Weather corruptions: snow, frost (with its textures, procedural or a user's) and fog."""

from __future__ import annotations

import functools
import math
import os

import numpy as np
import torch
import torch.nn.functional as F

from macs_audit.errors import InputError
from macs_audit.images import IMAGE_SUFFIXES, open_image
from macs_audit.views.corruptions.ops import (
    clipped_zoom,
    gaussian,
    imagemagick_motion_blur,
    to_float,
    to_uint8,
    to_uint8_same_layout,
    zero_below,
)
from macs_audit.views.corruptions.randomness import uniform, uniform16
from macs_audit.views.corruptions.table import CIFAR, ParameterSet, parameter_set

FROST_SEED = 20190108  # fixed seed of the procedural frost textures
_FROST_REFERENCE_NAMES = ("frost1.png", "frost2.png", "frost3.png", "frost4.jpg", "frost5.jpg")


def snow(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    loc, scale, zoom, threshold, radius, sigma, blend = param
    x = to_float(img)
    n, _, h, w = x.shape
    layer = torch.randn((n, 1, h, w), generator=gen, device=x.device).mul_(scale).add_(loc)
    layer = clipped_zoom(layer, zoom)
    layer = zero_below(layer, threshold)
    layer = layer.clamp_(0, 1).mul_(255).floor_()  # uint8 'L' image
    angles = uniform((n,), -135.0, -45.0, gen, x.device)
    flakes = imagemagick_motion_blur(layer.view(n, h, w, 1), radius, sigma, angles).view(n, 1, h, w) / 255.0
    r, g, b = x[:, 0:1], x[:, 1:2], x[:, 2:3]
    grey = 0.299 * r + 0.587 * g + 0.114 * b  # cv2 RGB2GRAY
    # blend x + (1 - blend) max(x, 1.5 grey + 0.5), then + snow + its 180-degree rotation, in
    # place (the same operations in the same order; fewer fresh 12 MB buffers)
    lifted = torch.maximum(x, grey.mul_(1.5).add_(0.5)).mul_(1 - blend)
    x = x.mul_(blend).add_(lifted)
    return to_uint8(x.add_(flakes).add_(flakes.flip(-1, -2)))


def frost(
    img: torch.Tensor, param, gen: torch.Generator, pset: ParameterSet, frost_textures: str | None
) -> torch.Tensor:
    """clip(w_img x + w_frost crop) with a random crop of a random texture per image, the textures
    at the set's sizes."""
    w_img, w_frost = param
    n, h, w, _ = img.shape
    directory = None if frost_textures is None else os.path.abspath(os.fspath(frost_textures))
    textures, sizes = _frost_stack(directory, pset, h, w, str(img.device))
    k = len(sizes)
    dev = img.device
    idx = torch.randint(0, k, (n,), generator=gen, device=dev)
    th = sizes[idx, 0]
    tw = sizes[idx, 1]
    # randint(0, H - h) and randint(0, W - w): exclusive upper bounds
    r0 = (torch.rand(n, generator=gen, device=dev) * (th - h)).long().clamp_(max=th - h - 1)
    c0 = (torch.rand(n, generator=gen, device=dev) * (tw - w)).long().clamp_(max=tw - w - 1)
    crop = _frost_crops(textures, idx, r0, c0, h, w)  # (N, h, w, 3) uint8
    # The float32 blend read from a table of all 256 x 256 (image level, texture level) pairs
    # (64 KB): on the CPU, piece by piece, two cheap integer passes and a gather in the core's
    # cache instead of float conversions of 12 MB buffers (3x faster at 224 px); a GPU in one piece.
    table = _frost_blend_table(float(w_img), float(w_frost), str(dev))
    flat, texture = img.reshape(-1), crop.reshape(-1)
    piece = _BLEND_PIECE if dev.type == "cpu" else flat.numel()
    out = torch.empty_like(flat)
    index = torch.empty(min(piece, flat.numel()), dtype=torch.int32, device=dev)
    for start in range(0, flat.numel(), piece):
        part = index[: min(piece, flat.numel() - start)]
        part.copy_(flat[start : start + len(part)]).bitwise_left_shift_(8).add_(texture[start : start + len(part)])
        torch.index_select(table, 0, part, out=out[start : start + len(part)])
    return out.view(img.shape)


_BLEND_PIECE = 1 << 17  # elements per piece of frost's table blend on the CPU: its int32 index stays in cache


@functools.lru_cache(maxsize=None)
def _frost_blend_table(w_img: float, w_frost: float, device: str) -> torch.Tensor:
    """uint8 (256 * 256,) on ``device``: cell 256 x + t holds frost's blend of image level x and
    texture level t, clip(x w_img + t w_frost) truncated, in float32."""
    levels = torch.arange(256, dtype=torch.float32)
    blend = (levels * w_img)[:, None] + (levels * w_frost)[None, :]
    return to_uint8_same_layout(blend.clamp_(0, 255)).reshape(-1).to(device)


def _frost_crops(
    textures: torch.Tensor, idx: torch.Tensor, r0: torch.Tensor, c0: torch.Tensor, h: int, w: int
) -> torch.Tensor:
    """The (h, w) window at (r0, c0) of texture idx, per image: on the CPU one slice copy each
    (whole rows of memory; a pixel gather costs 5x more at 224 px), elsewhere one gather."""
    if textures.device.type == "cpu":
        return torch.stack(
            [textures[i, r : r + h, c : c + w] for i, r, c in zip(idx.tolist(), r0.tolist(), c0.tolist(), strict=True)]
        )
    rows = r0[:, None, None] + torch.arange(h, device=textures.device)[None, :, None]
    cols = c0[:, None, None] + torch.arange(w, device=textures.device)[None, None, :]
    return textures[idx[:, None, None], rows, cols]


def _plasma(n: int, size: int, decay: float, gen: torch.Generator, device) -> torch.Tensor:
    """Batched diamond-square plasma fractal on a torus, min-max normalised to [0, 1].

    Each level holds the corner grid (g x g) as one contiguous array and builds the next one
    (2g x 2g) by interleaving the corners with the new centre, row and column points, rather than
    writing strided slices of the full map. Above 32x32 the wibble comes from 16-bit uniforms
    (several times cheaper; up to 32x32 torch.rand keeps the CIFAR bytes)."""
    draw = uniform if size <= 32 else uniform16
    corners = torch.zeros((n, 1, 1), device=device)
    wibble = 100.0

    def wibbled(total):
        return total / 4 + wibble * draw(total.shape, -wibble, wibble, gen, device)

    while corners.shape[1] < size:
        square = corners + corners.roll(-1, 1)
        square = square + square.roll(-1, 2)
        centres = wibbled(square)
        # points between horizontal corner pairs: left/right corners + centres above/below
        row_pts = wibbled(corners + corners.roll(-1, 2) + centres + centres.roll(1, 1))
        # points between vertical corner pairs: upper/lower corners + centres left/right
        col_pts = wibbled(corners + corners.roll(-1, 1) + centres + centres.roll(1, 2))
        g = corners.shape[1]
        upper = torch.stack([corners, row_pts], dim=3)  # rows 2i: corner, row point
        lower = torch.stack([col_pts, centres], dim=3)  # rows 2i + 1: column point, centre
        corners = torch.stack([upper, lower], dim=2).reshape(n, 2 * g, 2 * g)
        wibble /= decay
    m = corners - corners.amin(dim=(1, 2), keepdim=True)
    return m / m.amax(dim=(1, 2), keepdim=True)


def fog(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    strength, decay = param
    x = to_float(img)
    n, _, h, w = x.shape
    size = max(32, 1 << (max(h, w) - 1).bit_length())
    max_val = x.amax(dim=(1, 2, 3), keepdim=True)
    layer = _plasma(n, size, decay, gen, x.device)[:, None, :h, :w]
    x = x.add_(strength * layer)  # in place: no fresh 12 MB buffers (page faults on CPU)
    return to_uint8(x.mul_(max_val).div_(max_val + strength))


# --------------------------------------------------------------------------------------------
# Frost textures
# --------------------------------------------------------------------------------------------
def frost_texture_info(frost_textures: str | None, corruption_set: str = "cifar") -> str:
    """What the report should record about the frost textures used with a parameter set."""
    pset = parameter_set(corruption_set)
    if frost_textures is None:
        sizes = ", ".join(f"{w}x{h}" for h, w in pset.frost_sizes)
        factor = pset.frost_scale / CIFAR.frost_scale
        enlarged = "" if factor == 1 else f", drawn at 1/{factor:g} of that and enlarged bicubically"
        return f"procedural (seed {FROST_SEED}; {len(pset.frost_sizes)} textures, W x H {sizes}{enlarged})"
    path = os.path.abspath(os.fspath(frost_textures))
    resize = "" if pset.frost_scale == 1 else f", resized by {pset.frost_scale}"
    return f"{path}: {', '.join(_frost_files(path))}{resize}"


def _frost_files(directory: str) -> list[str]:
    """The frost image files of a user directory, in the order they are indexed."""
    if not os.path.isdir(directory):
        raise InputError(
            f"frost texture directory {directory} does not exist or is not a "
            "directory; pass a directory of frost images"
        )
    names = sorted(f for f in os.listdir(directory) if f.lower().endswith(IMAGE_SUFFIXES) and not f.startswith("."))
    if all(ref in names for ref in _FROST_REFERENCE_NAMES):
        return list(_FROST_REFERENCE_NAMES)  # the reference picks frost1..5 (never frost6)
    if not names:
        raise InputError(f"frost texture directory {directory} holds no image files ({', '.join(IMAGE_SUFFIXES)})")
    return names


@functools.lru_cache(maxsize=8)
def load_user_frost(directory: str, scale: float = CIFAR.frost_scale) -> tuple[np.ndarray, ...]:
    """User frost images as RGB uint8 arrays, resized by ``scale`` as the reference resizes its
    photographs (bilinear, half-pixel centres like cv2.INTER_LINEAR without its fixed-point
    rounding; no resize at scale 1)."""
    textures = []
    for name in _frost_files(directory):
        path = os.path.join(directory, name)
        rgb = np.asarray(open_image(path, "frost texture"))
        h, w = rgb.shape[:2]
        if scale == 1:
            textures.append(rgb.copy())
            continue
        size = (max(1, int(round(h * scale))), max(1, int(round(w * scale))))
        t = torch.from_numpy(rgb.copy()).permute(2, 0, 1)[None].float()
        t = F.interpolate(t, size=size, mode="bilinear", align_corners=False, antialias=False)
        textures.append(t[0].permute(1, 2, 0).add_(0.5).floor_().clamp_(0, 255).to(torch.uint8).numpy())
    return tuple(textures)


def _smooth_noise(gen: torch.Generator, h: int, w: int, cells: tuple[int, ...], falloff: float) -> torch.Tensor:
    """Sum of bicubically upsampled uniform grids (value noise), min-max normalised."""
    out = torch.zeros(1, 1, h, w, dtype=torch.float64)
    for octave, n in enumerate(cells):
        grid = torch.rand(1, 1, n + 1, n * w // h + 2, generator=gen, dtype=torch.float64)
        out += F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False) * falloff**octave
    return (out - out.min()) / (out.max() - out.min())


def _line_kernel(angle: float, length: int) -> np.ndarray:
    """Anti-aliased line segment through the centre of a square kernel, fading to its ends."""
    r = length // 2
    yy, xx = np.mgrid[-r : r + 1, -r : r + 1].astype(np.float64)
    across = np.abs(-np.sin(angle) * xx + np.cos(angle) * yy)
    along = np.abs(np.cos(angle) * xx + np.sin(angle) * yy)
    return np.clip(1.0 - across, 0, 1) * np.clip(1.0 - along / (r + 1), 0, 1)


@functools.lru_cache(maxsize=16)
def procedural_frost(index: int, h: int, w: int) -> np.ndarray:
    """A frost-like RGB uint8 texture (h, w, 3), deterministic for (index, h, w).

    Ice on a window pane: a cloudy density field (where the frost is thick), feathery crystals
    (needles seeded by the density, aligned with a smooth orientation field, with fainter side
    branches at +-60 degrees) and a milky glow around them, tinted blue-white. Generated on the
    CPU from a fixed seed, so every device and run sees the same texture.
    """
    gen = torch.Generator().manual_seed(FROST_SEED + index)
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
    glow = gaussian(crystals, 1.5)
    grain = torch.rand(1, 1, h, w, generator=gen, dtype=torch.float64)
    v = 0.30 + 0.30 * density + 0.55 * glow * (0.5 + density) + 0.45 * crystals + 0.05 * grain
    v = v.clamp(0, 1)[0, 0]
    tint = torch.tensor([0.85, 0.93, 1.0], dtype=torch.float64)
    return (v[..., None] * tint * 255.0).floor().to(torch.uint8).numpy()


@functools.lru_cache(maxsize=16)
def set_frost(index: int, h: int, w: int, scale: float) -> np.ndarray:
    """Procedural texture ``index`` at (h, w) for a set that resizes its photographs by ``scale``:
    drawn with the detail of photographs resized by CIFAR's 0.2 (the sizes the textures are
    designed at) and enlarged bicubically by scale / 0.2, so a set that keeps its photographs
    larger sees the same frost larger, as it sees the reference's photographs."""
    factor = CIFAR.frost_scale / scale
    base = (max(1, int(round(h * factor))), max(1, int(round(w * factor))))
    texture = procedural_frost(index, *base)
    if base == (h, w):
        return texture
    t = torch.from_numpy(texture).permute(2, 0, 1)[None].float()
    t = F.interpolate(t, size=(h, w), mode="bicubic", align_corners=False)
    return t[0].permute(1, 2, 0).round_().clamp_(0, 255).to(torch.uint8).numpy()


@functools.lru_cache(maxsize=8)
def _frost_stack(
    directory: str | None, pset: ParameterSet, h: int, w: int, device: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """All textures as one zero-padded uint8 tensor (K, Hmax, Wmax, 3) plus their (K, 2) sizes,
    on ``device``; kept for the next batch (building it took a fifth of frost's time at 224 px)."""
    if directory is None:
        sizes = [(max(th, h + 1), max(tw, w + 1)) for th, tw in pset.frost_sizes]
        textures = [set_frost(i, th, tw, pset.frost_scale) for i, (th, tw) in enumerate(sizes)]
    else:
        textures = list(load_user_frost(directory, pset.frost_scale))
        names = _frost_files(directory)
        for name, t in zip(names, textures, strict=True):
            if t.shape[0] < h + 1 or t.shape[1] < w + 1:
                raise InputError(
                    f"frost texture {name} is {t.shape[1]}x{t.shape[0]} after the {pset.frost_scale} resize, "
                    f"smaller than the {w + 1}x{h + 1} needed for {w}x{h} images; use larger images"
                )
    hmax = max(t.shape[0] for t in textures)
    wmax = max(t.shape[1] for t in textures)
    stack = torch.zeros((len(textures), hmax, wmax, 3), dtype=torch.uint8)
    for i, t in enumerate(textures):
        stack[i, : t.shape[0], : t.shape[1]] = torch.from_numpy(t)
    sizes_t = torch.tensor([t.shape[:2] for t in textures], dtype=torch.long)
    return stack.to(device), sizes_t.to(device)
