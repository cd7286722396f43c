"""The corruption table: names, families and the per-severity parameters of each generator.

Plain Python (no torch, no numpy): the gate, the data readers and the CLI's option parsing read
the names from here without loading the corruption code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

# name -> family, in the reference's loop order (the benchmark's 15, then the 4 extras).
# Brightness counts as weather, as in imagecorruptions.get_corruption_names().
FAMILIES: dict[str, str] = {
    "gaussian_noise": "noise",
    "shot_noise": "noise",
    "impulse_noise": "noise",
    "defocus_blur": "blur",
    "glass_blur": "blur",
    "motion_blur": "blur",
    "zoom_blur": "blur",
    "snow": "weather",
    "frost": "weather",
    "fog": "weather",
    "brightness": "weather",
    "contrast": "digital",
    "elastic_transform": "digital",
    "pixelate": "digital",
    "jpeg_compression": "digital",
    "speckle_noise": "noise",
    "gaussian_blur": "blur",
    "spatter": "weather",
    "saturate": "digital",
}
CORRUPTIONS: tuple[str, ...] = tuple(FAMILIES)
# The four extra ("validation") corruptions; the other 15 make up the benchmark.
EXTRA_CORRUPTIONS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
BENCHMARK_CORRUPTIONS: tuple[str, ...] = tuple(n for n in CORRUPTIONS if n not in EXTRA_CORRUPTIONS)
SEVERITIES: tuple[int, ...] = (1, 2, 3, 4, 5)


@dataclasses.dataclass(frozen=True, eq=False)
class ParameterSet:
    """The parameters of one reference generator.

    ``parameters`` maps every corruption to its five parameters (severities 1..5); ``frost_scale``
    is the factor the generator resizes its frost photographs by, and ``frost_sizes`` the
    (rows, cols) of frost1 .. frost5 after that resize (the sizes of the procedural textures).
    """

    name: str
    generator: str
    parameters: Mapping[str, tuple[Any, ...]]
    frost_scale: float
    frost_sizes: tuple[tuple[int, int], ...]


CIFAR = ParameterSet(
    name="cifar",
    generator="make_cifar_c.py (Hendrycks & Dietterich, 2019), for 32x32 images",
    parameters={
        # sigma of additive Normal noise
        "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
        # photon scale c: Poisson(x * c) / c
        "shot_noise": (500, 250, 100, 75, 50),
        # salt-and-pepper amount (per element)
        "impulse_noise": (0.01, 0.02, 0.03, 0.05, 0.07),
        # (disk radius, alias blur sigma)
        "defocus_blur": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
        # (gaussian sigma, max delta, iterations)
        "glass_blur": ((0.05, 1, 1), (0.25, 1, 1), (0.4, 1, 1), (0.25, 1, 2), (0.4, 1, 2)),
        # ImageMagick (radius, sigma); angle ~ U(-45, 45) degrees per image
        "motion_blur": ((6, 1), (6, 1.5), (6, 2), (8, 2), (9, 2.5)),
        # zoom factors np.arange(start, stop, step): 7, 12, 16, 21, 26 factors
        "zoom_blur": ((1, 1.06, 0.01), (1, 1.11, 0.01), (1, 1.16, 0.01), (1, 1.21, 0.01), (1, 1.26, 0.01)),
        # (loc, scale, zoom, threshold, blur radius, blur sigma, blend)
        "snow": (
            (0.1, 0.2, 1, 0.6, 8, 3, 0.95),
            (0.1, 0.2, 1, 0.5, 10, 4, 0.9),
            (0.15, 0.3, 1.75, 0.55, 10, 4, 0.9),
            (0.25, 0.3, 2.25, 0.6, 12, 6, 0.85),
            (0.3, 0.3, 1.25, 0.65, 14, 12, 0.8),
        ),
        # (image weight, frost weight), in 0..255 space
        "frost": ((1, 0.2), (1, 0.3), (0.9, 0.4), (0.85, 0.4), (0.75, 0.45)),
        # (strength, wibble decay) of the plasma fractal
        "fog": ((0.2, 3), (0.5, 3), (0.75, 2.5), (1, 2), (1.5, 1.75)),
        # added to HSV value
        "brightness": (0.05, 0.1, 0.15, 0.2, 0.3),
        # contrast factor around the per-channel mean
        "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
        # (alpha, sigma, affine max) as fractions of the image size (x 32 for CIFAR)
        "elastic_transform": (
            (0, 0, 0.08),
            (0.05, 0.2, 0.07),
            (0.08, 0.06, 0.06),
            (0.1, 0.04, 0.05),
            (0.1, 0.03, 0.03),
        ),
        # intermediate size factor: int(32 * c) = 30, 28, 27, 24, 20
        "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
        # Pillow JPEG quality
        "jpeg_compression": (80, 65, 58, 50, 40),
        # sigma of multiplicative Normal noise
        "speckle_noise": (0.06, 0.10, 0.12, 0.16, 0.20),
        # skimage gaussian sigma
        "gaussian_blur": (0.4, 0.6, 0.7, 0.8, 1.0),
        # (loc, scale, sigma, threshold, intensity | mud sigma, mode 0 water | 1 mud)
        "spatter": (
            (0.62, 0.1, 0.7, 0.7, 0.5, 0),
            (0.65, 0.1, 0.8, 0.7, 0.5, 0),
            (0.65, 0.3, 1, 0.69, 0.5, 0),
            (0.65, 0.1, 0.7, 0.69, 0.6, 1),
            (0.65, 0.1, 0.5, 0.68, 0.6, 1),
        ),
        # (saturation multiplier, addend)
        "saturate": ((0.3, 0), (0.1, 0), (1.5, 0), (2, 0.1), (2.5, 0.2)),
    },
    frost_scale=0.2,
    frost_sizes=((120, 180), (63, 112), (63, 112), (70, 105), (99, 132)),
)

PARAMETER_SETS: dict[str, ParameterSet] = {CIFAR.name: CIFAR}
