"""Noise corruptions: gaussian, shot, impulse and speckle noise, each element's outcome drawn by
inverse transform from a 2^16-entry quantile table indexed by 16 random bits (cheaper than torch's
samplers; every outcome's probability exact to 2^-16, the normal capped at |z| <= 4.33)."""

from __future__ import annotations

import functools
import math

import numpy as np
import torch

from macs_audit.views.corruptions.randomness import TABLE_BITS, Buffers, RandomWords

# Elements per piece on the CPU: the temporaries (a few hundred KB) stay in the core's cache and
# are reused by the allocator, instead of fresh multi-megabyte buffers (page faults) per batch.
_NOISE_PIECE = 1 << 17


def _raw_index(bits: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """The int32 gather index of 16-bit words, written into ``out``: their unsigned value,
    which reads a table stored by ``_by_raw_word`` (one conversion, no add)."""
    try:
        return out.copy_(bits.view(torch.uint16))
    except (RuntimeError, TypeError):  # a backend without uint16 conversions (e.g. MPS)
        return out.copy_(bits).bitwise_and_(0xFFFF)


def _by_raw_word(table: torch.Tensor) -> torch.Tensor:
    """A cell-indexed table (rows of 2^16 cells) reordered so that a word's unsigned value
    reads cell u = w + 2^15 (unsigned value = u XOR 2^15: a half-turn of each row)."""
    cells = 1 << TABLE_BITS
    return table.view(-1, cells).roll(cells // 2, dims=1).reshape(-1)


@functools.lru_cache(maxsize=None)
def _on_device(build, param, device: str) -> torch.Tensor:
    """A cell-indexed table built on the CPU, stored for raw-word indexing and cached on
    ``device`` (a GPU keeps its copy)."""
    return _by_raw_word(build(param)).to(device)


@functools.lru_cache(maxsize=None)
def _normal_quantiles() -> torch.Tensor:
    """float64 standard-normal quantiles at the midpoints (i + 1/2) / 2^16 of the table cells."""
    cells = 1 << TABLE_BITS
    return torch.special.ndtri((torch.arange(cells, dtype=torch.float64) + 0.5) / cells)


@functools.lru_cache(maxsize=None)
def _gaussian_offsets(sigma: float) -> torch.Tensor:
    """floor(255 sigma z) per table cell, int16: the grey-level offset of gaussian_noise
    (floor(k + t) = k + floor(t) for an integer grey level k)."""
    return torch.floor(_normal_quantiles() * (255.0 * sigma)).clamp_(-512, 512).to(torch.int16)


@functools.lru_cache(maxsize=None)
def _speckle_multipliers(sigma: float) -> torch.Tensor:
    """1 + sigma z per table cell in 16-bit fixed point (int32): speckle maps grey level k to
    (k m) >> 16 = k + floor(k sigma z), within 255 / 2^17 of the exact product."""
    return torch.round(_normal_quantiles() * (sigma * (1 << 16))).to(torch.int32).add_(1 << 16)


@functools.lru_cache(maxsize=None)
def _shot_table(scale: float) -> torch.Tensor:
    """(256 x 2^16) uint8: the output grey level of shot_noise for input level k and table cell
    u, floor(clip(P / scale, 0, 1) * 255) with P the Poisson(k / 255 * scale) quantile at u's
    midpoint. Built in float64 numpy with the reference's operations (16 MB, once per scale)."""
    cells = 1 << TABLE_BITS
    top = int(math.ceil(scale))  # P >= scale gives 255: the support needed stops there
    counts = np.arange(top + 1, dtype=np.float64)
    levels = np.clip(counts / scale, 0, 1) * 255
    outputs = levels.astype(np.uint8)
    table = np.empty((256, cells), dtype=np.uint8)
    for k in range(256):
        lam = k / 255.0 * scale
        if lam > 700:  # exp(-lam) underflows; not reached by the CIFAR scales (<= 500)
            raise ValueError(f"shot noise scale {scale} too large for the table sampler")
        ratios = np.empty(top + 1)  # pmf(0), then pmf(P) / pmf(P - 1)
        ratios[0] = math.exp(-lam)
        ratios[1:] = lam / counts[1:]
        pmf = np.cumprod(ratios)
        # cells u whose midpoint (u + 1/2) / cells lies below CDF(P) and above CDF(P - 1)
        edges = np.ceil(np.cumsum(pmf) * cells - 0.5).clip(0, cells).astype(np.int64)
        edges[-1] = cells  # the rest of the mass (P >= scale) maps to 255 as well
        table[k] = np.repeat(outputs, np.diff(edges, prepend=0))
    return torch.from_numpy(table.reshape(-1))


def _elementwise_noise(img: torch.Tensor, gen: torch.Generator, apply) -> torch.Tensor:
    """out = apply(values, bits, buffers) over the flattened batch, piece by piece on the CPU
    (one piece on a GPU): ``values`` uint8 elements, ``bits`` their random 16-bit words
    (``RandomWords``), ``buffers`` temporaries reused by every piece."""
    flat = img.reshape(-1)
    piece = flat.numel() if img.device.type != "cpu" else _NOISE_PIECE
    out = torch.empty_like(flat)
    buffers = Buffers(img.device)
    words = RandomWords(gen, img.device)
    for start in range(0, flat.numel(), piece):
        values = flat[start : start + piece]
        bits = words.draw(values.numel(), buffers)
        out[start : start + piece] = apply(values, bits, buffers)
    return out.view(img.shape)


def gaussian_noise(img: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    offsets = _on_device(_gaussian_offsets, float(sigma), str(img.device))

    def apply(values, bits, buffers):
        index = _raw_index(bits, buffers.get("index", len(bits), torch.int32))
        picked = torch.index_select(offsets, 0, index, out=buffers.get("offsets", len(bits), offsets.dtype))
        return picked.add_(values).clamp_(0, 255)

    return _elementwise_noise(img, gen, apply)


def shot_noise(img: torch.Tensor, scale: float, gen: torch.Generator) -> torch.Tensor:
    table = _on_device(_shot_table, float(scale), str(img.device))

    def apply(values, bits, buffers):  # row k of the (256 x 2^16) table, by raw word (half-turned)
        index = _raw_index(bits, buffers.get("index", len(bits), torch.int32))
        index.add_(values, alpha=1 << TABLE_BITS)
        return torch.index_select(table, 0, index, out=buffers.get("levels", len(bits), table.dtype))

    return _elementwise_noise(img, gen, apply)


def impulse_noise(img: torch.Tensor, amount: float, gen: torch.Generator) -> torch.Tensor:
    """Each element flips with probability ``amount``; a flipped element is salt (255) or
    pepper (0) with probability 1/2. One 16-bit uniform u per element: flip = u < amount,
    salt = u < amount / 2 (the joint distribution of skimage's two independent masks, each
    probability exact to 2^-16 like the other noise tables), applied with byte masks."""
    # thresholds on u = w + 2^15, compared on the signed word w itself (int16: a threshold of
    # 2^15, amount ~ 1, would wrap, so it is compared as "no word keeps its value")
    flip_below = int(round(amount * (1 << TABLE_BITS))) - (1 << 15)
    salt_below = int(round(amount * (1 << (TABLE_BITS - 1)))) - (1 << 15)

    def apply(values, bits, buffers):
        # byte masks without conversions: a bool's byte is 0 or 1, and uint8 negation maps 1 to 255
        keep = buffers.get("keep", len(bits), torch.bool)
        if flip_below < (1 << 15):
            _compare(np.greater_equal, torch.ge, bits, flip_below, keep)
        else:
            keep.zero_()
        salt = _compare(np.less, torch.lt, bits, salt_below, buffers.get("salt", len(bits), torch.bool))
        keep, salt = keep.view(torch.uint8).neg_(), salt.view(torch.uint8).neg_()
        return keep.bitwise_and_(values).bitwise_or_(salt)

    return _elementwise_noise(img, gen, apply)


def _compare(numpy_op, torch_op, words: torch.Tensor, threshold: int, out: torch.Tensor) -> torch.Tensor:
    """words (int16) compared with threshold into the bool tensor ``out``; on the CPU by numpy,
    whose comparisons are vectorised (7x faster than torch's there)."""
    if words.device.type == "cpu":
        numpy_op(words.numpy(), np.int16(threshold), out=out.numpy())
        return out
    return torch_op(words, threshold, out=out)


def speckle_noise(img: torch.Tensor, sigma: float, gen: torch.Generator) -> torch.Tensor:
    """x (1 + sigma z) = k + floor(k sigma z) for grey level k, sigma z from the quantile table."""
    multipliers = _on_device(_speckle_multipliers, float(sigma), str(img.device))

    def apply(values, bits, buffers):
        index = _raw_index(bits, buffers.get("index", len(bits), torch.int32))
        m = torch.index_select(multipliers, 0, index, out=buffers.get("factors", len(bits), torch.int32))
        levels = buffers.get("levels", len(bits), torch.int32).copy_(values)  # int32 * int32 is vectorised
        return m.mul_(levels).bitwise_right_shift_(16).clamp_(0, 255)

    return _elementwise_noise(img, gen, apply)
