"""The one preprocessing of images, shared by the ONNX and torch predictors, fine-tuning and the image
folders.

Images travel as uint8 (N, H, W, C) from the sources; `to_unit_float` (macs_audit/pixels.py, which the
views share) turns them into float32 (N, C, H, W) in [0, 1] by one rounding rule (times float32(1/255)) on
numpy arrays and torch tensors alike; `resize_and_normalize` then resizes and applies the model's mean/std.

Every resize is `resize`: torch's interpolation (half-pixel centres) named by the model's `interpolation`
(bilinear, bicubic, antialiased as Pillow resizes, or -no-antialias; nearest), only when the size differs; a
float batch is resized in float, a uint8 one in uint8 (rounded after each pass, as Pillow does). Image
folders' files, of any size, are brought to the model's input size by the same rule when they are read
(`fit_image`: whole, or the shorter side and a centre crop with `crop_pct`), so that they batch and the
views see them at the model's size; arrays are resized in the predictor by the same rule and interpolation.
Without an interpolation declared: bilinear for whole images, bicubic for a crop_pct pipeline (timm's).
torch is imported only for a torch input or a resize.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from macs_audit.errors import InputError
from macs_audit.pixels import is_tensor

# The interpolations of `resize`: bilinear and bicubic antialiased (as Pillow and the image processors resize),
# their -no-antialias forms (torch's tensor default), and nearest (Pillow's nearest: torch's "nearest-exact").
INTERPOLATIONS = ("bilinear", "bicubic", "nearest", "bilinear-no-antialias", "bicubic-no-antialias")
WHOLE_DEFAULT, CROP_DEFAULT = "bilinear", "bicubic"  # without a declared interpolation
# How a centre crop's offset rounds an odd margin's half: torchvision's CenterCrop rounds, transformers floors.
CROP_OFFSETS = ("round", "floor")
# Pillow's resampling filters by number (Hugging Face image processors' `resample`) -> our names.
PIL_RESAMPLE = {0: "nearest", 2: "bilinear", 3: "bicubic"}


def _torch_mode(interpolation: str) -> tuple[str, bool]:
    """(torch's mode, antialias) of one of INTERPOLATIONS."""
    if interpolation not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}")
    if interpolation == "nearest":
        return "nearest-exact", False
    mode, _, rest = interpolation.partition("-")
    return mode, not rest


def _check_channels(channels: int, mean: Sequence[float]) -> None:
    if channels != len(mean):
        raise InputError(f"images have {channels} channels but the model's mean/std have {len(mean)}")


def resize(x: Any, size: Sequence[int], interpolation: str = "bilinear") -> Any:
    """An NCHW batch (a torch tensor, or a numpy array: numpy in, numpy out) at `size` (height, width) by the
    one resize rule: torch's `interpolation` (one of INTERPOLATIONS), align_corners False. The same object
    when it is at that size already; a uint8 batch stays uint8."""
    size = (int(size[0]), int(size[1]))
    mode, antialias = _torch_mode(interpolation)
    if tuple(x.shape[2:]) == size:
        return x
    import torch
    import torch.nn.functional as F

    tensor = x if is_tensor(x) else torch.from_numpy(np.require(x, requirements=("C", "W")))
    if mode == "nearest-exact":
        out = F.interpolate(tensor, size=size, mode=mode)
    else:
        out = F.interpolate(tensor, size=size, mode=mode, antialias=antialias, align_corners=False)
    return out if is_tensor(x) else out.numpy()


def crop_size(size: Sequence[int], crop_pct: float) -> int:
    """The shorter side an image is resized to before its centre `size` crop: floor(min(h, w) / crop_pct)."""
    return math.floor(min(size) / crop_pct)


def fit_image(
    image: np.ndarray,
    size: Sequence[int],
    crop_pct: float | None = None,
    interpolation: str | None = None,
    crop_offset: str = "round",
) -> np.ndarray:
    """One uint8 image (H, W, C) of any size as a uint8 image of `size` (h, w), by `resize` with `interpolation`
    (default bilinear whole, bicubic with a crop): resized whole (aspect not kept), or with `crop_pct` as timm
    and torchvision evaluate ImageNet: the shorter side resized to `crop_size` (aspect kept, the longer side
    truncated), then the centre crop, its offset an odd margin's half rounded (`crop_offset` "round": torchvision's
    CenterCrop, which timm and OpenCLIP use) or floored ("floor": transformers' image processors)."""
    h, w = int(size[0]), int(size[1])
    batch = image.transpose(2, 0, 1)[None]  # (1, C, H, W), a view
    if crop_pct is None:
        return resize(batch, (h, w), interpolation or WHOLE_DEFAULT)[0].transpose(1, 2, 0)
    short = crop_size((h, w), crop_pct)
    height, width = image.shape[:2]
    if width <= height:
        scaled = (int(short * height / width), short)
    else:
        scaled = (short, int(short * width / height))
    batch = resize(batch, scaled, interpolation or CROP_DEFAULT)
    if crop_offset not in CROP_OFFSETS:
        raise ValueError(f"crop_offset must be one of {', '.join(CROP_OFFSETS)}, got {crop_offset!r}")
    if crop_offset == "floor":
        top, left = (scaled[0] - h) // 2, (scaled[1] - w) // 2
    else:
        top, left = int(round((scaled[0] - h) / 2.0)), int(round((scaled[1] - w) / 2.0))
    return batch[0, :, top : top + h, left : left + w].transpose(1, 2, 0)


def fit_description(
    size: Sequence[int],
    crop_pct: float | None,
    interpolation: str | None = None,
    sources: dict[str, str] | None = None,
    crop_offset: str = "round",
) -> str:
    """How `fit_image` sizes images, as the report says it; with `sources` (a ModelConfig's), where each
    value came from ("default" where nobody set it)."""
    h, w = int(size[0]), int(size[1])

    def where(key: str) -> str:
        return "" if sources is None else f" from {sources.get(key, 'default')}"

    if crop_pct is None:
        how = interpolation or WHOLE_DEFAULT
        return f"resized to {h}x{w}{where('input_size')} ({how}{where('interpolation')}, aspect not kept)"
    short = crop_size((h, w), crop_pct)
    how = interpolation or CROP_DEFAULT
    return (
        f"shorter side resized to {short} ({how}{where('interpolation')}), centre crop {h}x{w}{where('input_size')} "
        f"(crop_pct {crop_pct:g}{where('crop_pct')}{', offset floored as transformers' * (crop_offset == 'floor')})"
    )


def batch_description(
    image_size: Sequence[int], size: Sequence[int], interpolation: str | None, sources: dict[str, str] | None = None
) -> str:
    """How `resize_and_normalize` sizes arrays of `image_size` for a model of `size`, as the report says it (with
    where the size and interpolation came from, given a ModelConfig's `sources`)."""

    def where(key: str) -> str:
        return "" if sources is None else f" from {sources.get(key, 'default')}"

    (h0, w0), (h, w) = (int(v) for v in image_size), (int(v) for v in size)
    how = interpolation or WHOLE_DEFAULT
    return f"arrays of {h0}x{w0} resized to {h}x{w}{where('input_size')} ({how}{where('interpolation')}, whole)"


def resize_and_normalize(
    x: Any, input_size: Sequence[int], mean: Any, std: Any, interpolation: str | None = None
) -> Any:
    """Resize a float32 NCHW batch to `input_size` (`resize` with `interpolation`, default bilinear) and
    normalise it. numpy in, numpy out (mean/std as sequences); torch in, torch out (mean/std as (1, C, 1, 1)
    tensors on x's device, or sequences)."""
    x = resize(x, input_size, interpolation or WHOLE_DEFAULT)
    if is_tensor(x):
        import torch

        if not torch.is_tensor(mean):
            mean = torch.tensor(mean, device=x.device).view(1, -1, 1, 1)
            std = torch.tensor(std, device=x.device).view(1, -1, 1, 1)
        _check_channels(x.shape[1], mean.flatten())
        return (x - mean) / std
    _check_channels(x.shape[1], mean)
    mean_arr = np.asarray(mean, dtype=np.float32).reshape(1, -1, 1, 1)
    inv_std = (1 / np.asarray(std, dtype=np.float32)).reshape(1, -1, 1, 1)
    out = np.subtract(x, mean_arr, dtype=np.float32)  # one new array (x may be the caller's), then in place
    out *= inv_std
    return out
