"""The tiny-imagenet (64 px) and imagenet (224 px) parameter sets: fidelity on real photographs
against independent numpy / SciPy / Pillow / scikit-image computations of the generators'
algorithms and against the `imagecorruptions` package, the algorithmic steps that differ from
the CIFAR generator, and shape, determinism and severity order for every corruption."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from conftest import assert_within_grey_levels
from corruption_helpers import DETERMINISTIC
from corruption_helpers import MONOTONE as CIFAR_MONOTONE
from PIL import Image

from macs_audit.errors import UsageError
from macs_audit.views.corruptions.apply import corrupt
from macs_audit.views.corruptions.blur import glass_sources
from macs_audit.views.corruptions.digital import _pixelate_boxes
from macs_audit.views.corruptions.table import (
    CORRUPTIONS,
    IMAGENET,
    PARAMETER_SETS,
    TINY_IMAGENET,
    nearest_parameter_set,
    parameter_set,
)
from macs_audit.views.corruptions.weather import frost_texture_info, set_frost

NEW_SETS = (TINY_IMAGENET, IMAGENET)
# Monotone in mean |corrupted - clean| by their parameters in both sets: CIFAR's monotone ones but fog
# (ImageNet's decay and strength move together); glass_blur, snow, frost, elastic_transform, spatter
# and saturate are not, by design of the generators' tables.
MONOTONE = tuple(name for name in CIFAR_MONOTONE if name != "fog")


@pytest.fixture(scope="module")
def photos():
    """Real photographs from scikit-image's bundled sample data (no download): 224x224 crops,
    and the same crops resized to 64x64 as Tiny-ImageNet-C resizes its sources."""
    data = pytest.importorskip("skimage.data")
    crops = [data.astronaut()[40:264, 150:374], data.coffee()[80:304, 150:374]]
    big = np.stack([np.ascontiguousarray(c) for c in crops])
    small = np.stack([np.asarray(Image.fromarray(c).resize((64, 64), Image.BILINEAR)) for c in crops])
    return {IMAGENET.name: big, TINY_IMAGENET.name: small}


# ---------------------------------------------------------------------------------------------
# Independent computations of the generators' deterministic corruptions, for any side
# ---------------------------------------------------------------------------------------------
def _ref_gaussian_blur(img, sigma):
    x = ndi.gaussian_filter(img / 255.0, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)
    return np.clip(x, 0, 1) * 255


def _ref_defocus(img, c):
    radius, alias_blur = c
    half, ksize = (8, 3) if radius <= 8 else (int(radius), 5)
    grid = np.arange(-half, half + 1)
    xx, yy = np.meshgrid(grid, grid)
    disk = (xx**2 + yy**2 <= radius**2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-((np.arange(ksize) - ksize // 2) ** 2) / (2 * alias_blur**2))  # getGaussianKernel
    g /= g.sum()
    kernel = ndi.correlate(disk, np.outer(g, g), mode="mirror")  # GaussianBlur, BORDER_REFLECT_101
    x = img / 255.0
    out = np.stack([ndi.correlate(x[..., ch], kernel, mode="mirror") for ch in range(3)], -1)
    return np.clip(out, 0, 1) * 255


def _ref_zoom_blur(img, c):
    x = (img / 255.0).astype(np.float32)
    n = x.shape[0]
    acc = np.zeros_like(x)
    factors = np.arange(*c)
    for z in factors:
        ch = int(np.ceil(n / z))
        top = (n - ch) // 2
        zoomed = ndi.zoom(x[top : top + ch, top : top + ch], (z, z, 1), order=1)
        trim = (zoomed.shape[0] - n) // 2
        acc += zoomed[trim : trim + n, trim : trim + n]
    return np.clip((x + acc) / (len(factors) + 1), 0, 1) * 255


def _ref_hsv(img, channel, update):
    color = pytest.importorskip("skimage.color")
    hsv = color.rgb2hsv(img / 255.0)
    hsv[..., channel] = update(hsv[..., channel])
    return np.clip(color.hsv2rgb(hsv), 0, 1) * 255


def _ref_brightness(img, c):
    return _ref_hsv(img, 2, lambda v: np.clip(v + c, 0, 1))


def _ref_saturate(img, c):
    return _ref_hsv(img, 1, lambda s: np.clip(s * c[0] + c[1], 0, 1))


def _ref_contrast(img, c):
    x = img / 255.0
    means = x.mean(axis=(0, 1), keepdims=True)
    return np.clip((x - means) * c + means, 0, 1) * 255


def _ref_pixelate(img, c):
    h, w = img.shape[:2]
    small = Image.fromarray(img).resize((int(w * c), int(h * c)), Image.BOX)
    return np.asarray(small.resize((w, h), Image.BOX))


def _ref_jpeg(img, quality):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf))


REFERENCES = {
    "brightness": _ref_brightness,
    "contrast": _ref_contrast,
    "saturate": _ref_saturate,
    "pixelate": _ref_pixelate,
    "jpeg_compression": _ref_jpeg,
    "defocus_blur": _ref_defocus,
    "gaussian_blur": _ref_gaussian_blur,
    "zoom_blur": _ref_zoom_blur,
}


def _assert_close(ours: np.ndarray, ref: np.ndarray, what) -> None:
    """Within 1 grey level: mean absolute difference below 1 (the acceptance), and no value more
    than 1 level off (the float32 / float64 floors of exact-integer results)."""
    diff = np.abs(ours.astype(int) - ref.astype(int))
    assert diff.mean() < 1 and diff.max() <= 1, (what, diff.mean(), diff.max())


@pytest.mark.parametrize("pset", NEW_SETS, ids=lambda p: p.name)
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_the_generator_on_photographs(photos, pset, name):
    """The script's algorithm computed independently (scipy / Pillow / scikit-image; the
    clip, x 255 and truncating cast of the generators) on 224 px and 64 px photographs."""
    images = photos[pset.name]
    for s in range(1, 6):
        param = pset.parameters[name][s - 1]
        ours = corrupt(torch.from_numpy(images), name, s, seed=0, corruption_set=pset.name).numpy()
        ref = np.stack([REFERENCES[name](img, param).astype(np.uint8) for img in images])
        _assert_close(ours, ref, (pset.name, name, s))


@pytest.fixture(scope="module")
def imagecorruptions():
    """imagecorruptions.corrupt through the benchmark's compatibility shims (version 1.1.2 needs
    pkg_resources, np.float_ and skimage's `multichannel`, gone from a current stack; the shims
    change no computed value). Skipped when the package is not installed."""
    if importlib.util.find_spec("imagecorruptions") is None:
        pytest.skip("imagecorruptions not installed (pip install .[bench])")
    sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
    from bench_corruptions import load_reference

    ic_corrupt, info = load_reference()
    if ic_corrupt is None:
        pytest.skip(f"imagecorruptions does not import: {info}")
    return ic_corrupt


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_imagenet_set_matches_imagecorruptions(photos, imagecorruptions, name):
    """imagecorruptions 1.1.2 implements these eight corruptions exactly as make_imagenet_c.py
    at 224 px (its departures are in other corruptions), so it is the reference here."""
    images = photos[IMAGENET.name]
    for s in range(1, 6):
        ours = corrupt(torch.from_numpy(images), name, s, seed=0, corruption_set="imagenet").numpy()
        ref = np.stack([np.asarray(imagecorruptions(img, corruption_name=name, severity=s)) for img in images])
        _assert_close(ours, ref, (name, s))


# ---------------------------------------------------------------------------------------------
# Steps that differ between the sets
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("delta", [1, 2, 3, 4])
def test_glass_pass_follows_the_reference_loop(delta):
    """One glass pass against the reference's pixel loop run on the same offsets: rows then
    columns descending, each pixel copying the current value at its source. For delta >= 2 a
    source can be a pixel the pass already overwrote (below, or right in the same row)."""
    n, h, w = 2, 23, 19
    d = torch.randint(-delta, delta, (n, 2, h, w), generator=torch.Generator().manual_seed(delta))
    img = np.random.default_rng(delta).integers(0, 256, (n, h, w, 3))
    src = glass_sources(d, delta).numpy()
    ours = np.stack([img[i].reshape(h * w, 3)[src[i].ravel()].reshape(h, w, 3) for i in range(n)])
    ref = img.copy()
    for i in range(n):
        x = ref[i]
        for r in range(h - delta, delta, -1):
            for q in range(w - delta, delta, -1):
                dx, dy = int(d[i, 0, r, q]), int(d[i, 1, r, q])
                x[r, q] = x[r + dy, q + dx]
    assert np.array_equal(ours, ref)
    if delta >= 2:  # chains do occur: a plain gather from the pre-pass image would differ
        plain = (np.arange(h)[:, None] + d[:, 1].numpy()) * w + np.arange(w) + d[:, 0].numpy()
        inner = np.zeros((h, w), bool)
        inner[delta + 1 : h - delta + 1, delta + 1 : w - delta + 1] = True
        assert (src[:, inner] != plain[:, inner]).any()


def test_elastic_lengths_follow_the_generators():
    # make_imagenet_c.py multiplies 244 (its 224 px images), the others their own side
    assert (IMAGENET.elastic_length, IMAGENET.size) == (244, 224)
    assert (TINY_IMAGENET.elastic_length, TINY_IMAGENET.size) == (64, 64)
    alpha, sigma, affine = (
        p * 224 * IMAGENET.elastic_length / IMAGENET.size for p in IMAGENET.parameters["elastic_transform"][0]
    )
    assert (alpha, sigma, affine) == pytest.approx((488, 170.8, 24.4))


def test_frost_textures_at_each_sets_sizes():
    # ImageNet-C crops its photographs at full size, Tiny-ImageNet-C after a 0.3 resize
    assert IMAGENET.frost_scale == 1 and IMAGENET.frost_sizes[0] == (600, 900)
    assert TINY_IMAGENET.frost_scale == 0.3 and TINY_IMAGENET.frost_sizes[0] == (180, 270)
    big = set_frost(1, *IMAGENET.frost_sizes[1], IMAGENET.frost_scale)
    assert big.shape == (315, 560, 3) and big.dtype == np.uint8
    assert 100 < big.mean() < 200  # the procedural frost enlarged, not an empty canvas
    assert "560x315" in frost_texture_info(None, "imagenet")
    assert "168x94" in frost_texture_info(None, "tiny-imagenet")


def test_choosing_a_set():
    assert parameter_set("imagenet") is IMAGENET
    with pytest.raises(UsageError, match="tiny-imagenet"):
        parameter_set("imagenet-c")
    assert nearest_parameter_set(32, 32).name == "cifar"
    assert nearest_parameter_set(64, 64).name == "tiny-imagenet"
    assert nearest_parameter_set(224, 224).name == "imagenet"
    assert nearest_parameter_set(288, 300).name == "imagenet"
    assert nearest_parameter_set(128, 128) is None  # 2x from 64, 1.75x from 224
    assert nearest_parameter_set(512, 512) is None
    with pytest.raises(UsageError, match="corruption set"):
        corrupt(torch.zeros((1, 32, 32, 3), dtype=torch.uint8), "fog", 1, seed=0, corruption_set="svhn")


# ---------------------------------------------------------------------------------------------
# Every corruption of every set
# ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("pset", NEW_SETS, ids=lambda p: p.name)
def test_every_corruption_shape_determinism_and_order(photos, pset):
    x = torch.from_numpy(photos[pset.name][:1])
    for name in CORRUPTIONS:
        outs = [corrupt(x, name, s, seed=7, corruption_set=pset.name) for s in range(1, 6)]
        for out in outs:
            assert out.shape == x.shape and out.dtype == torch.uint8 and out.is_contiguous(), name
        again = corrupt(x, name, 3, seed=7, corruption_set=pset.name)
        assert torch.equal(again, outs[2]), name
        other = corrupt(x, name, 3, seed=8, corruption_set=pset.name)
        assert torch.equal(other, outs[2]) == (name in DETERMINISTIC), name
        if name in MONOTONE:
            change = [float((o.float() - x.float()).abs().mean()) for o in outs]
            assert all(a < b for a, b in zip(change[:-1], change[1:], strict=True)), (pset.name, name, change)
    assert torch.equal(x, torch.from_numpy(photos[pset.name][:1]))  # the input is not modified


def test_sets_differ_where_their_tables_do(photos):
    x = torch.from_numpy(photos[IMAGENET.name][:1])
    for name in ("gaussian_noise", "fog", "frost", "glass_blur"):
        outs = {p: corrupt(x, name, 3, seed=1, corruption_set=p) for p in PARAMETER_SETS}
        assert not torch.equal(outs["cifar"], outs["imagenet"]), name
        assert not torch.equal(outs["tiny-imagenet"], outs["imagenet"]), name


@pytest.mark.parametrize("pset", NEW_SETS, ids=lambda p: p.name)
def test_noise_strengths(pset):
    """Flat grey input: the output spread of the noise corruptions follows each set's table
    (gaussian: 255 sigma; shot: 255 sqrt(lambda) / c; impulse: amount / 2 salt and pepper)."""
    x = torch.full((4, pset.size, pset.size, 3), 128, dtype=torch.uint8)
    for s in (1, 2):  # severities whose spread stays clear of the clipping at 0 and 255
        sigma = pset.parameters["gaussian_noise"][s - 1]
        diff = corrupt(x, "gaussian_noise", s, seed=s, corruption_set=pset.name).double() - 128
        assert abs(diff.std().item() / (255 * sigma) - 1) < 0.03, (s, sigma)
        scale = pset.parameters["shot_noise"][s - 1]
        diff = corrupt(x, "shot_noise", s, seed=s, corruption_set=pset.name).double() - 128
        assert abs(diff.std().item() / (255 * np.sqrt(128 / 255 * scale) / scale) - 1) < 0.05, (s, scale)
    for s in range(1, 6):
        amount = pset.parameters["impulse_noise"][s - 1]
        out = corrupt(x, "impulse_noise", s, seed=s, corruption_set=pset.name)
        for level in (0, 255):
            assert abs((out == level).double().mean().item() - amount / 2) < 0.01, (s, level)


@pytest.mark.parametrize(
    "exact_codec", [pytest.param(False, id="1-level"), pytest.param(True, marks=pytest.mark.exact_codec, id="exact")]
)
def test_pixelate_box_sums_match_pillow(photos, exact_codec):
    """The tensor path of pixelate for factors below 1/2 (used on GPUs; the CPU calls Pillow): within 1 grey
    level of any Pillow build (Pillow-SIMD rounds its box weights differently), bit-exact with the developers'
    (exact_codec)."""
    images = photos[IMAGENET.name]
    odd = np.ascontiguousarray(images[:1, :45, :37])
    pairs = [(_pixelate_boxes(torch.from_numpy(images), c).numpy(), images, c) for c in IMAGENET.parameters["pixelate"]]
    pairs.append((_pixelate_boxes(torch.from_numpy(odd), 0.3).numpy(), odd, 0.3))
    for ours, inputs, c in pairs:
        ref = np.stack([_ref_pixelate(img, c) for img in inputs])
        assert_within_grey_levels(ours, ref, 1, c)
        if exact_codec:
            assert np.array_equal(ours, ref), c
