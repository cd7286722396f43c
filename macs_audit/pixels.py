"""uint8 pixels as float32 in [0, 1]: the one rounding rule (times float32(1/255)), on numpy arrays and torch
tensors alike. The views produce their images by it and the models' preprocessing and fine-tuning read it
from here, so that a view needs nothing of the models. torch is never imported: a tensor is recognised by
its type's module."""

from __future__ import annotations

from typing import Any

import numpy as np

# One rounding rule everywhere: x * float32(1/255) (a multiply; x / 255 rounds 126 of 256 levels differently).
UNIT_SCALE = np.float32(1 / 255)


def is_tensor(x: Any) -> bool:
    """Whether `x` is a torch tensor (without importing torch)."""
    return type(x).__module__.startswith("torch")


def to_unit_float(images: Any) -> Any:
    """uint8 (N, H, W, C) -> float32 (N, C, H, W) in [0, 1]; a numpy array or a torch tensor (same device)."""
    if is_tensor(images):
        return images.permute(0, 3, 1, 2).float().mul_(float(UNIT_SCALE))
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32)
    x *= UNIT_SCALE  # in place: this runs on every batch
    return x


def unit_float_nchw(images: Any) -> Any:
    """A uint8 (N, C, H, W) tensor -> float32 in [0, 1] by the same rule; float tensors pass through as float32."""
    return images.float() if images.is_floating_point() else images.float().mul_(float(UNIT_SCALE))
