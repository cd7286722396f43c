"""``corrupt``: one corruption at one severity on a batch, and ``batch_seed``, the seed of each
batch of a data set. Both are the package's entry points; docs/corruptions.md describes them."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import torch

from macs_audit.errors import InputError, UsageError
from macs_audit.seeding import CORRUPTION_BATCHES, derive_seed
from macs_audit.views.corruptions import blur, digital, jpeg, noise, spatter, weather
from macs_audit.views.corruptions.table import CORRUPTIONS, parameter_set

# name -> op(images, severity's parameters, generator), found by name in the family modules, for the names
# of the table; frost and elastic_transform also take the parameter set (frost sizes, elastic length),
# frost its textures too.
_FAMILY_MODULES = (noise, blur, weather, spatter, digital, jpeg)
OPS: dict[str, Callable[..., torch.Tensor]] = {
    name: next(getattr(module, name) for module in _FAMILY_MODULES if hasattr(module, name)) for name in CORRUPTIONS
}


# Pixels per chunk of a CPU corruption on images larger than 32x32 (32 images at 224 px). Part of
# the output contract there: the chunks draw in turn, so a new value changes the seeded bytes of
# larger batches.
_CPU_CHUNK_PIXELS = 32 * 224 * 224


def corrupt(
    images: torch.Tensor,
    name: str,
    severity: int,
    seed: int,
    frost_textures: str | None = None,
    corruption_set: str = "cifar",
) -> torch.Tensor:
    """Apply corruption ``name`` at ``severity`` (1-5) to uint8 images (N, H, W, 3).

    Returns a new uint8 tensor of the same shape on the same device. ``seed`` seeds a
    ``torch.Generator`` on the images' device; deterministic corruptions ignore it.
    ``frost_textures`` (frost only) is a directory of frost images; None uses the built-in
    procedural textures. ``corruption_set`` names the parameter set of the table (cifar,
    tiny-imagenet or imagenet).
    """
    if name not in OPS:
        raise UsageError(f"unknown corruption {name!r}; choose one of: {', '.join(CORRUPTIONS)}")
    if isinstance(severity, bool) or not isinstance(severity, int) or not 1 <= severity <= 5:
        raise UsageError(f"corruption severity must be an integer 1-5, got {severity!r}")
    pset = parameter_set(corruption_set)
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.ndim != 4 or images.shape[-1] != 3:
        got = (
            f"{images.dtype} tensor of shape {tuple(images.shape)}"
            if isinstance(images, torch.Tensor)
            else type(images).__name__
        )
        raise InputError(f"corruptions need a uint8 tensor of shape (N, H, W, 3), got {got}")
    if images.shape[1] < 4 or images.shape[2] < 4:
        raise InputError(f"corruptions need images of at least 4x4 pixels, got {images.shape[1]}x{images.shape[2]}")
    if images.shape[0] == 0:
        return images.clone()
    images = images.contiguous()  # the ops view pixels as flat rows (a strided view would not allow it)
    gen = torch.Generator(device=images.device)
    gen.manual_seed(int(seed) & 0xFFFF_FFFF_FFFF_FFFF)
    param = pset.parameters[name][severity - 1]
    n, h, w, _ = images.shape
    # On the CPU, images larger than 32x32 go through in chunks whose float temporaries stay in
    # the last-level cache (up to 2.7x faster at 224 px than a batch of 128); the chunks draw from
    # the one generator in turn, so the bytes still depend on the seed and the batch only.
    chunk = max(1, _CPU_CHUNK_PIXELS // (h * w)) if images.device.type == "cpu" and h * w > 1024 else n
    with ieee_float32_products():
        if chunk >= n:
            return _apply(images, name, param, gen, pset, frost_textures).contiguous()
        out = torch.empty_like(images, memory_format=torch.contiguous_format)
        for start in range(0, n, chunk):
            out[start : start + chunk] = _apply(images[start : start + chunk], name, param, gen, pset, frost_textures)
    return out


def _apply(images: torch.Tensor, name: str, param, gen: torch.Generator, pset, frost_textures) -> torch.Tensor:
    """One corruption on one batch (or chunk), drawing from ``gen``."""
    if name == "frost":
        return weather.frost(images, param, gen, pset, frost_textures)
    if name == "elastic_transform":
        return digital.elastic_transform(images, param, gen, pset)
    return OPS[name](images, param, gen)


def batch_seed(seed: int, name: str, severity: int, start: int) -> int:
    """Stable 63-bit seed for the batch of (corruption, severity) that starts at image ``start``: the
    corruptions' own rule (seeding.CORRUPTION_BATCHES, not the package's PARTS), because the grids'
    seeded bytes depend on it."""
    return derive_seed(int(seed), name, int(severity), int(start), rule=CORRUPTION_BATCHES)


def corrupt_batch(
    images: Any,
    start: int,
    name: str,
    severity: int,
    seed: int,
    device: str,
    frost_textures: str | None = None,
    corruption_set: str = "cifar",
) -> Any:
    """uint8 (N, H, W, C) images (numpy, or a tensor on any device) at data-set position `start`
    -> the corrupted uint8 (N, H, W, C) tensor on `device`. The one home of the seeding rule: the batch
    at `start` gets batch_seed(seed, name, severity, start), so the bytes depend on the batch size and
    the seed only, not on how batches are spread over processes or whether they are read from files."""
    x = (images if torch.is_tensor(images) else torch.from_numpy(images)).to(device)
    return corrupt(
        x, name, severity, batch_seed(seed, name, severity, start), frost_textures, corruption_set=corruption_set
    )


@contextlib.contextmanager
def ieee_float32_products():
    """IEEE float32 matrix products for the duration of a corruption, whatever a user set for
    their model (TF32 on GPUs, bf16 on CPUs with AMX): the filters would otherwise change the
    output (thresholded layers such as snow's by whole grey levels) and the same seed would not
    give the same bytes. The setting is restored through the API it was made with."""
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
    saved = [
        (b, b.fp32_precision) for b in backends if getattr(b, "fp32_precision", None) not in (None, "none", "ieee")
    ]
    for backend, _ in saved:
        backend.fp32_precision = "ieee"
    try:
        yield
    finally:
        for backend, value in saved:
            backend.fp32_precision = value
