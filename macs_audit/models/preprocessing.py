"""The one preprocessing of images, shared by the ONNX and torch predictors, the views and fine-tuning.

Images travel as uint8 (N, H, W, C) from the sources; `to_unit_float` turns them into float32
(N, C, H, W) in [0, 1] by one rounding rule (times float32(1/255)) on numpy arrays and torch tensors
alike; `resize_and_normalize` then resizes (bilinear with antialiasing, only when the size differs)
and applies the model's mean/std. torch is imported only for a torch input or a resize.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from macs_audit.errors import InputError

# One rounding rule everywhere: x * float32(1/255) (a multiply; x / 255 rounds 126 of 256 levels differently).
UNIT_SCALE = np.float32(1 / 255)


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def to_unit_float(images: Any) -> Any:
    """uint8 (N, H, W, C) -> float32 (N, C, H, W) in [0, 1]; a numpy array or a torch tensor (same device)."""
    if _is_tensor(images):
        return images.permute(0, 3, 1, 2).float().mul_(float(UNIT_SCALE))
    x = np.ascontiguousarray(images.transpose(0, 3, 1, 2), dtype=np.float32)
    x *= UNIT_SCALE  # in place: this runs on every batch
    return x


def unit_float_nchw(images: Any) -> Any:
    """A uint8 (N, C, H, W) tensor -> float32 in [0, 1] by the same rule; float tensors pass through as float32."""
    return images.float() if images.is_floating_point() else images.float().mul_(float(UNIT_SCALE))


def _check_channels(channels: int, mean: Sequence[float]) -> None:
    if channels != len(mean):
        raise InputError(f"images have {channels} channels but the model's mean/std have {len(mean)}")


def resize_and_normalize(x: Any, input_size: Sequence[int], mean: Any, std: Any) -> Any:
    """Resize a float32 NCHW batch to `input_size` (bilinear, antialiased, only when it differs) and
    normalise it. numpy in, numpy out (mean/std as sequences); torch in, torch out (mean/std as
    (1, C, 1, 1) tensors on x's device, or sequences)."""
    size = tuple(int(v) for v in input_size)
    if _is_tensor(x):
        import torch
        import torch.nn.functional as F

        if tuple(x.shape[2:]) != size:
            x = F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)
        if not torch.is_tensor(mean):
            mean = torch.tensor(mean, device=x.device).view(1, -1, 1, 1)
            std = torch.tensor(std, device=x.device).view(1, -1, 1, 1)
        _check_channels(x.shape[1], mean.flatten())
        return (x - mean) / std
    if x.shape[2:] != size:
        import torch
        import torch.nn.functional as F

        x = F.interpolate(torch.from_numpy(x), size=size, mode="bilinear", antialias=True, align_corners=False).numpy()
    _check_channels(x.shape[1], mean)
    mean_arr = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    inv_std = (1 / np.asarray(std, dtype=np.float32)).reshape(1, -1, 1, 1)
    out = np.subtract(x, mean_arr, dtype=np.float32)  # one new array (x may be the caller's), then in place
    out *= inv_std
    return out
