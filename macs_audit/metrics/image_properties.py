"""Per-image properties for slicing an audit by what its images look like: brightness, contrast, sharpness and
colourfulness of every scored image, and for image folders each file's original size and aspect ratio.

All four are computed on the images the predictor receives: float32 (N, C, H, W) in [0, 1], C = 1 or 3, before
the predictor's own normalisation, in float64 (float32 sums over a 224x224 image lose digits).

- luma Y = 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601); a one-channel image is its own luma.
- brightness = the mean of Y over the image.
- contrast = RMS contrast: the population standard deviation of Y.
- sharpness = the variance of the discrete Laplacian of Y (4-neighbour kernel [[0,1,0],[1,-4,1],[0,1,0]],
  borders reflected as OpenCV's default BORDER_REFLECT_101, scipy.ndimage's mode "mirror"): the "variance of
  the Laplacian" focus measure (Pech-Pacheco et al. 2000).
- colourfulness = Hasler & Suesstrunk (2003) M3: with rg = R - G and yb = (R + G) / 2 - B,
  sqrt(var(rg) + var(yb)) + 0.3 sqrt(mean(rg)^2 + mean(yb)^2); 0 for one-channel images. On the [0, 1] scale:
  the paper's values, on 0-255 pixels, are 255 times these.

Sizes are read from the files' headers (no pixel is decoded), as stored: images are scored without applying their
EXIF orientation (images.open_image), so a rotation tag changes neither the scored pixels nor the size here.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from macs_audit import distributed
from macs_audit.errors import InputError

PROPERTIES = ("brightness", "contrast", "sharpness", "colourfulness")  # computed on every scored image
SIZE_PROPERTIES = ("original_pixels", "aspect_ratio")  # image folders only
LUMA_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R BT.601, R G B
# Pixels an image plane of a chunk holds on the CPU: 512 KiB of float64, so that the few planes computed from it
# stay in cache (64 CIFAR images, one 224x224 image); whole batches ran 1.7x (500 CIFAR images) to 3x (64 of
# 224x224) slower (benchmarks/bench_image_properties.py).
CHUNK_PIXELS = 2**16

CONVENTIONS: dict[str, str] = {
    "brightness": (
        "Mean luma Y = 0.299 R + 0.587 G + 0.114 B (ITU-R BT.601; a one-channel image is its own luma) over the "
        "image the model is given, on its [0, 1] pixel scale before the model's normalisation (0 black, 1 white)."
    ),
    "contrast": (
        "RMS contrast: the population standard deviation of the luma Y over the image, on the [0, 1] pixel scale "
        "(0 for a uniform image)."
    ),
    "sharpness": (
        "Variance of the Laplacian (Pech-Pacheco et al. 2000): the population variance over the image of the "
        "4-neighbour discrete Laplacian [[0,1,0],[1,-4,1],[0,1,0]] of the luma Y, borders reflected as OpenCV's "
        "default BORDER_REFLECT_101 (scipy.ndimage mode 'mirror'), on the [0, 1] pixel scale (0 for a uniform "
        "image; 255^2 times smaller than on 0-255 pixels)."
    ),
    "colourfulness": (
        "Hasler & Suesstrunk (2003) M3: sqrt(var(rg) + var(yb)) + 0.3 sqrt(mean(rg)^2 + mean(yb)^2) with "
        "rg = R - G and yb = (R + G) / 2 - B, population statistics over the image, on the [0, 1] pixel scale "
        "(the paper's 0-255 values are 255 times these); 0 for one-channel images."
    ),
    "original_pixels": (
        "The image file's width x height in pixels as stored in its header, before the audit resizes it and "
        "without applying its EXIF orientation (the audit scores the stored pixels unrotated)."
    ),
    "aspect_ratio": (
        "The image file's width / height as stored in its header, without applying its EXIF orientation "
        "(above 1: wider than tall)."
    ),
}


def image_properties(images: Any) -> dict[str, np.ndarray]:
    """Each PROPERTIES name -> its (N,) float64 values for a batch of float (N, C, H, W) images in [0, 1], C = 1 or
    3: a numpy array, or a torch tensor, computed with torch on its own device then."""
    if type(images).__module__.startswith("torch"):
        return _torch_properties(images)
    x = np.asarray(images)
    _check_shape(x.shape)
    values = np.empty((len(PROPERTIES), len(x)))
    for lo, hi in _chunks(x.shape):
        planes = [x[lo:hi, c].astype(np.float64) for c in range(x.shape[1])]
        chunk = _properties(planes, np, lambda a: a.mean(axis=(1, 2)), lambda a: a.var(axis=(1, 2)))
        values[:, lo:hi] = [chunk[name] for name in PROPERTIES]
    return {name: values[i] for i, name in enumerate(PROPERTIES)}


def _torch_properties(images: Any) -> dict[str, np.ndarray]:
    import torch

    _check_shape(tuple(images.shape))
    # float64 where the device has it (CPU, CUDA); MPS has no float64: float32 there, good to about 6 digits.
    dtype = torch.float32 if images.device.type == "mps" else torch.float64
    # On an accelerator the whole batch at once (a launch per operation); on the CPU by cache-sized chunks.
    chunks = _chunks(tuple(images.shape)) if images.device.type == "cpu" else [(0, len(images))]
    parts = []
    with torch.no_grad():
        for lo, hi in chunks:
            planes = [images[lo:hi, c].to(dtype) for c in range(images.shape[1])]
            chunk = _properties(planes, torch, lambda a: a.mean(dim=(1, 2)), lambda a: a.var(dim=(1, 2), correction=0))
            parts.append(torch.stack([chunk[name] for name in PROPERTIES]))
        values = torch.cat(parts, dim=1).cpu().numpy().astype(np.float64)
    return {name: values[i] for i, name in enumerate(PROPERTIES)}


def _chunks(shape: tuple) -> list[tuple[int, int]]:
    """(lo, hi) image ranges of about CHUNK_PIXELS pixels each (at least one image, at least one range): a chunk's
    few float64 planes stay in the CPU's caches, faster than whole batches and in less memory."""
    step = max(1, CHUNK_PIXELS // max(1, shape[2] * shape[3]))
    return [(lo, min(lo + step, shape[0])) for lo in range(0, shape[0], step)] or [(0, 0)]


def _check_shape(shape: tuple) -> None:
    if len(shape) != 4 or shape[1] not in (1, 3):
        raise InputError(
            f"image properties need images shaped (N, C, H, W) with C = 1 or 3, not {tuple(shape)}; "
            "pass the batch the model is given"
        )


def _properties(planes: list, xp: Any, mean: Callable, var: Callable) -> dict[str, Any]:
    """The definitions, once for numpy and torch (`xp`): `planes` are the (N, H, W) float channels, R G B or Y."""
    if len(planes) == 3:
        red, green, blue = planes
        rg = red - green
        yb = red + green
        yb *= 0.5
        yb -= blue
        colourfulness = xp.sqrt(var(rg) + var(yb)) + 0.3 * xp.sqrt(mean(rg) ** 2 + mean(yb) ** 2)
        del rg, yb
        luma = LUMA_WEIGHTS[0] * red
        luma += LUMA_WEIGHTS[1] * green
        luma += LUMA_WEIGHTS[2] * blue
    else:
        (luma,) = planes
    brightness, contrast = mean(luma), xp.sqrt(var(luma))
    laplacian = _laplacian(luma)
    if len(planes) == 1:
        colourfulness = xp.zeros_like(brightness)
    return {
        "brightness": brightness,
        "contrast": contrast,
        "sharpness": var(laplacian),
        "colourfulness": colourfulness,
    }


def _laplacian(y: Any) -> Any:
    """The 4-neighbour Laplacian of (N, H, W) images (numpy or torch), borders reflected about the edge pixel
    (BORDER_REFLECT_101: the neighbour before the first pixel is the second), built in one array: -4 y plus each
    neighbour."""
    out = -4 * y
    for axis in (1, 2):
        if y.shape[axis] == 1:  # one pixel along this axis: both its neighbours are itself
            out += 2 * y
            continue
        out[_along(axis, 1, None)] += y[_along(axis, None, -1)]  # the neighbour before
        out[_along(axis, None, -1)] += y[_along(axis, 1, None)]  # the neighbour after
        out[_along(axis, 0, 1)] += y[_along(axis, 1, 2)]  # reflected, before the first
        out[_along(axis, -1, None)] += y[_along(axis, -2, -1)]  # reflected, after the last
    return out


def _along(axis: int, start: int | None, stop: int | None) -> tuple:
    """The index of start:stop along `axis`, everything along the others before it."""
    return (slice(None),) * axis + (slice(start, stop),)


class PropertyTaps:
    """The PROPERTIES of a pass's images, batch by batch as the inference loop scores them; `finish` puts them in
    data-set order (under torch.distributed, every rank's batches together) and starts afresh."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._batches: list[np.ndarray] = []  # (len(PROPERTIES), n) float64 each

    def observe(self, start: int, images: Any) -> None:
        """The properties of a batch whose first image is the data set's `start`-th."""
        values = image_properties(images)
        self._starts.append(int(start))
        self._batches.append(np.stack([values[name] for name in PROPERTIES]))

    def finish(self, ctx: distributed.Context = distributed.SINGLE) -> dict[str, np.ndarray]:
        """Each PROPERTIES name -> its (N,) float64 values over the pass, in data-set order."""
        starts, batches = self._starts, self._batches
        self._starts, self._batches = [], []
        if ctx.active:
            batches = distributed.gather_in_order(batches, starts, ctx)
        else:  # gather_in_order leaves one process's batches as they came
            batches = [batch for _, batch in sorted(zip(starts, batches, strict=True), key=lambda pair: pair[0])]
        stacked = np.concatenate(batches, axis=1) if batches else np.zeros((len(PROPERTIES), 0))
        return {name: stacked[i] for i, name in enumerate(PROPERTIES)}


def original_sizes(files: Sequence[Path | str], threads: int = 8) -> dict[str, np.ndarray]:
    """Each SIZE_PROPERTIES name -> its (N,) float64 values for image files, read from their headers alone (a
    thread pool of `threads`: the work is I/O): original_pixels = width x height, aspect_ratio = width / height,
    the stored size (see CONVENTIONS). InputError naming the first file (in order) that is no readable image."""
    from PIL import Image

    paths = list(files)
    sizes = np.zeros((len(paths), 2))
    if paths:
        with warnings.catch_warnings():
            # A header over Pillow's pixel limit is not decoded here; images.open_image refuses it when scored.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with ThreadPoolExecutor(max(1, min(threads, len(paths)))) as pool:
                sizes[:] = list(pool.map(_stored_size, paths))
    width, height = sizes[:, 0], sizes[:, 1]
    return {"original_pixels": width * height, "aspect_ratio": width / height}


def _stored_size(path: Path | str) -> tuple[int, int]:
    """(width, height) from the file's header; Pillow opens lazily and decodes nothing here."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return im.size
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise InputError(f"cannot read image {path}: {exc}; replace the file or remove it from the folder") from None
