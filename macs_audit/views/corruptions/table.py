"""The corruption table: names, families and the per-severity parameters of each generator.

Plain Python (no torch, no numpy): the gate, the data readers and the CLI's option parsing read
the names from here without loading the corruption code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from macs_audit.errors import UsageError

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

    ``size`` is the side of the square images the generator was written for; ``parameters`` maps
    every corruption to its five parameters (severities 1..5); ``frost_scale`` is the factor the
    generator resizes its frost photographs by, and ``frost_sizes`` the (rows, cols) of frost1 ..
    frost5 after that resize (the sizes of the procedural textures). ``elastic_length`` is the
    length the elastic_transform fractions multiply at ``size`` (the generator's side, except
    ImageNet-C's 244 for its 224 px images); at other sides it scales with the image.

    How the set's benchmark was released: ``released_layout``, the layout `corrupt --layout auto`
    writes ("npy", the CIFAR-C files, or "tree", the ImageNet-C image tree); ``tree_format``, the
    (PIL format, suffix, save arguments) of the tree's image files; ``alexnet_baseline``, whether its
    Corruption Errors are normalised by AlexNet's published errors when no --corruption-baseline is
    given.
    """

    name: str
    generator: str
    size: int
    parameters: Mapping[str, tuple[Any, ...]]
    frost_scale: float
    frost_sizes: tuple[tuple[int, int], ...]
    elastic_length: int
    released_layout: str
    tree_format: tuple[str, str, Mapping[str, Any]]
    alexnet_baseline: bool = False


# The released trees' file formats: the ImageNet-C and Tiny-ImageNet-C generators save every image as a
# quality-85 JPEG (PIL, optimized Huffman tables, 4:2:0); CIFAR-C is released lossless (.npy), so its tree
# is PNG.
_RELEASED_JPEG: tuple[str, str, Mapping[str, Any]] = ("JPEG", ".jpg", {"quality": 85, "optimize": True})
_LOSSLESS_PNG: tuple[str, str, Mapping[str, Any]] = ("PNG", ".png", {})


CIFAR = ParameterSet(
    name="cifar",
    generator="make_cifar_c.py (Hendrycks & Dietterich, 2019), for 32x32 images",
    size=32,
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
    elastic_length=32,
    released_layout="npy",
    tree_format=_LOSSLESS_PNG,
)

# make_tinyimagenet_c.py (= make_imagenet_64_c.py): the tuples mean what they mean for CIFAR.
TINY_IMAGENET = ParameterSet(
    name="tiny-imagenet",
    generator="make_tinyimagenet_c.py (Hendrycks & Dietterich, 2019), for 64x64 images",
    size=64,
    parameters={
        "gaussian_noise": (0.04, 0.08, 0.12, 0.15, 0.18),
        "shot_noise": (250, 100, 50, 30, 15),
        "impulse_noise": (0.01, 0.02, 0.05, 0.08, 0.14),
        "defocus_blur": ((0.5, 0.6), (1, 0.1), (1.5, 0.1), (2.5, 0.01), (3, 0.1)),
        "glass_blur": ((0.1, 1, 1), (0.5, 1, 1), (0.6, 1, 2), (0.7, 2, 1), (0.9, 2, 2)),
        "motion_blur": ((10, 1), (10, 1.5), (10, 2), (10, 2.5), (12, 3)),
        "zoom_blur": ((1, 1.06, 0.01), (1, 1.11, 0.01), (1, 1.16, 0.01), (1, 1.21, 0.01), (1, 1.26, 0.01)),
        "snow": (
            (0.1, 0.2, 1, 0.6, 8, 3, 0.8),
            (0.1, 0.2, 1, 0.5, 10, 4, 0.8),
            (0.15, 0.3, 1.75, 0.55, 10, 4, 0.7),
            (0.25, 0.3, 2.25, 0.6, 12, 6, 0.65),
            (0.3, 0.3, 1.25, 0.65, 14, 12, 0.6),
        ),
        "frost": ((1, 0.3), (0.9, 0.4), (0.8, 0.45), (0.75, 0.5), (0.7, 0.55)),
        "fog": ((0.4, 3), (0.7, 3), (1, 2.5), (1.5, 2), (2, 1.75)),
        "brightness": (0.1, 0.2, 0.3, 0.4, 0.5),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        # x 64
        "elastic_transform": (
            (0, 0, 0.08),
            (0.05, 0.3, 0.06),
            (0.1, 0.08, 0.06),
            (0.1, 0.03, 0.03),
            (0.16, 0.03, 0.02),
        ),
        # int(64 * c) = 57, 51, 44, 38, 32
        "pixelate": (0.9, 0.8, 0.7, 0.6, 0.5),
        "jpeg_compression": (65, 58, 50, 40, 25),
        "speckle_noise": (0.15, 0.2, 0.25, 0.3, 0.35),
        "gaussian_blur": (0.5, 0.75, 1, 1.25, 1.5),
        "spatter": (
            (0.62, 0.1, 0.7, 0.7, 0.6, 0),
            (0.65, 0.1, 0.8, 0.7, 0.6, 0),
            (0.65, 0.3, 1, 0.69, 0.6, 0),
            (0.65, 0.1, 0.7, 0.68, 0.6, 1),
            (0.65, 0.1, 0.5, 0.67, 0.6, 1),
        ),
        "saturate": ((0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (30, 0.2)),
    },
    frost_scale=0.3,
    frost_sizes=((180, 270), (94, 168), (94, 168), (105, 158), (148, 198)),
    elastic_length=64,
    released_layout="tree",
    tree_format=_RELEASED_JPEG,
)

# make_imagenet_c.py: the tuples mean what they mean for CIFAR.
IMAGENET = ParameterSet(
    name="imagenet",
    generator="make_imagenet_c.py (Hendrycks & Dietterich, 2019), for 224x224 images",
    size=224,
    parameters={
        "gaussian_noise": (0.08, 0.12, 0.18, 0.26, 0.38),
        "shot_noise": (60, 25, 12, 5, 3),
        "impulse_noise": (0.03, 0.06, 0.09, 0.17, 0.27),
        # radius 10 builds its disk on a 21x21 grid with 5x5 smoothing (blur._defocus_kernel)
        "defocus_blur": ((3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5)),
        "glass_blur": ((0.7, 1, 2), (0.9, 2, 1), (1, 2, 3), (1.1, 3, 2), (1.5, 4, 2)),
        "motion_blur": ((10, 3), (15, 5), (15, 8), (15, 12), (20, 15)),
        # 12, 16, 11, 13, 11 factors
        "zoom_blur": ((1, 1.11, 0.01), (1, 1.16, 0.01), (1, 1.21, 0.02), (1, 1.26, 0.02), (1, 1.31, 0.03)),
        "snow": (
            (0.1, 0.3, 3, 0.5, 10, 4, 0.8),
            (0.2, 0.3, 2, 0.5, 12, 4, 0.7),
            (0.55, 0.3, 4, 0.9, 12, 8, 0.7),
            (0.55, 0.3, 4.5, 0.85, 12, 8, 0.65),
            (0.55, 0.3, 2.5, 0.85, 12, 12, 0.55),
        ),
        "frost": ((1, 0.4), (0.8, 0.6), (0.7, 0.7), (0.65, 0.7), (0.6, 0.75)),
        "fog": ((1.5, 2), (2, 2), (2.5, 1.7), (2.5, 1.5), (3, 1.4)),
        "brightness": (0.1, 0.2, 0.3, 0.4, 0.5),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        # x 244 (sic: the generator's constant; its comment says 224 was meant)
        "elastic_transform": (
            (2, 0.7, 0.1),
            (2, 0.08, 0.2),
            (0.05, 0.01, 0.02),
            (0.07, 0.01, 0.02),
            (0.12, 0.01, 0.02),
        ),
        # int(224 * c) = 134, 112, 89, 67, 56
        "pixelate": (0.6, 0.5, 0.4, 0.3, 0.25),
        "jpeg_compression": (25, 18, 15, 10, 7),
        "speckle_noise": (0.15, 0.2, 0.35, 0.45, 0.6),
        "gaussian_blur": (1, 2, 3, 4, 6),
        "spatter": (
            (0.65, 0.3, 4, 0.69, 0.6, 0),
            (0.65, 0.3, 3, 0.68, 0.6, 0),
            (0.65, 0.3, 2, 0.68, 0.5, 0),
            (0.65, 0.3, 1, 0.65, 1.5, 1),
            (0.67, 0.4, 1, 0.65, 1.5, 1),
        ),
        "saturate": ((0.3, 0), (0.1, 0), (2, 0), (5, 0.1), (20, 0.2)),
    },
    frost_scale=1.0,  # the photographs are cropped at full resolution
    frost_sizes=((600, 900), (315, 560), (315, 560), (350, 527), (495, 660)),
    elastic_length=244,
    released_layout="tree",
    tree_format=_RELEASED_JPEG,
    alexnet_baseline=True,  # the ImageNet-C benchmark's mCE
)

PARAMETER_SETS: dict[str, ParameterSet] = {p.name: p for p in (CIFAR, TINY_IMAGENET, IMAGENET)}

# "auto" takes the set whose side is nearest the images' (in ratio) when within this factor of it.
AUTO_TOLERANCE = 1.5


def parameter_set(name: str) -> ParameterSet:
    """The parameter set called ``name``; UsageError naming the choices for any other name."""
    if name not in PARAMETER_SETS:
        raise UsageError(f"unknown corruption set {name!r}; choose one of: {', '.join(PARAMETER_SETS)}")
    return PARAMETER_SETS[name]


def nearest_parameter_set(height: int, width: int) -> ParameterSet | None:
    """The set whose native side is nearest (in ratio) to the images' shorter side, or None when
    that side is more than AUTO_TOLERANCE times away from every set's."""
    side = min(height, width)
    best = min(PARAMETER_SETS.values(), key=lambda p: max(side / p.size, p.size / side))
    return best if max(side / best.size, best.size / side) <= AUTO_TOLERANCE else None


def choose_parameter_set(requested: str, height: int, width: int) -> tuple[ParameterSet, str]:
    """The set for ``requested`` (a set's name or "auto") on height x width images, and how it was
    chosen, for the report and the screen. "auto" takes ``nearest_parameter_set`` and fails with a
    UsageError naming --corruption-set when no set's side is near the images'; a named set is used
    at any size."""
    if requested != "auto":
        return parameter_set(requested), f"--corruption-set {requested}"
    chosen = nearest_parameter_set(height, width)
    if chosen is None:
        sides = ", ".join(f"{p.name} {p.size}" for p in PARAMETER_SETS.values())
        raise UsageError(
            f"no corruption parameter set fits {height}x{width} images (native sides: {sides} px; auto takes "
            f"one within a factor of {AUTO_TOLERANCE}): choose one with --corruption-set"
        )
    return chosen, f"auto: nearest to {height}x{width} images"
