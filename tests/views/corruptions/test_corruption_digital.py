"""Digital corruptions (and brightness, which shares saturate's HSV model) against independent
numpy / SciPy / Pillow / scikit-image computations of the reference algorithms."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from conftest import assert_within_grey_levels
from corruption_helpers import assert_equal_but_at_float64_ties, check_against_reference, sample_images
from PIL import Image

from macs_audit.views.corruptions.apply import corrupt
from macs_audit.views.corruptions.digital import (
    _PIXELATE_CHUNK_PIXELS,
    _pixelate_cpu,
    _pixelate_gathered,
    displace,
    warp_affine,
)
from macs_audit.views.corruptions.ops import gaussian
from macs_audit.views.corruptions.table import CIFAR


def _rgb2hsv(rgb):
    """skimage.color.rgb2hsv's algorithm (hue from the max channel, later channels winning
    ties; hue 0 and saturation 0 for grey)."""
    v = rgb.max(-1)
    delta = v - rgb.min(-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        s = np.where(delta == 0, 0.0, delta / v)
        r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
        h = np.zeros_like(v)
        h = np.where(r == v, (g - b) / delta, h)
        h = np.where(g == v, 2.0 + (b - r) / delta, h)
        h = np.where(b == v, 4.0 + (r - g) / delta, h)
    h = np.where(delta == 0, 0.0, (h / 6.0) % 1.0)
    return np.stack([h, s, v], -1)


def _hsv2rgb(hsv):
    h, s, v = hsv[..., 0], hsv[..., 1], hsv[..., 2]
    hi = np.floor(h * 6)
    f = h * 6 - hi
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    hi = hi.astype(int) % 6
    choices = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)]
    out = np.zeros(hsv.shape)
    for k, (r, g, b) in enumerate(choices):
        out[hi == k] = np.stack([r, g, b], -1)[hi == k]
    return out


def _ref_brightness(img, c):
    hsv = _rgb2hsv(img / 255.0)
    hsv[..., 2] = np.clip(hsv[..., 2] + c, 0, 1)
    return np.clip(_hsv2rgb(hsv), 0, 1) * 255


def _ref_saturate(img, c):
    hsv = _rgb2hsv(img / 255.0)
    hsv[..., 1] = np.clip(hsv[..., 1] * c[0] + c[1], 0, 1)
    return np.clip(_hsv2rgb(hsv), 0, 1) * 255


def _ref_contrast(img, c):
    x = img / 255.0
    means = x.mean(axis=(0, 1), keepdims=True)
    return np.clip((x - means) * c + means, 0, 1) * 255


def _ref_pixelate(img, c):
    im = Image.fromarray(img)
    im = im.resize((int(32 * c), int(32 * c)), Image.BOX).resize((32, 32), Image.BOX)
    return np.asarray(im)


# scikit-image's float64 HSV in its order: equal but at float64 ties (corruption_helpers.TIE). pixelate is
# Pillow's fixed-point arithmetic, within 1 grey level of any Pillow build, bit-exact with the developers'
# (test_pixelate_bit_identical_to_pillow, marked exact_codec).
EXACT = {"saturate"}
REFERENCES = {
    "brightness": _ref_brightness,
    "saturate": _ref_saturate,
    "contrast": _ref_contrast,
    "pixelate": _ref_pixelate,
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_reference_algorithm(name):
    check_against_reference(name, REFERENCES[name], exact=name in EXACT)


@pytest.mark.exact_codec
def test_pixelate_bit_identical_to_pillow():
    x = sample_images(4, seed=5)
    for s, c in enumerate(CIFAR.parameters["pixelate"], start=1):
        ref = np.stack([_ref_pixelate(img, c) for img in x.numpy()])
        np.testing.assert_array_equal(corrupt(x, "pixelate", s, seed=0).numpy(), ref)


def test_float64_tie_tolerance_is_only_at_ties():
    """The saturate tolerance: a value floored one level lower is allowed only where the float64 reference is
    within TIE of an integer; anywhere else a difference fails."""
    reference = np.array([3.0, 3.0 - 1e-14, 7.5, 200.25])
    assert_equal_but_at_float64_ties(np.array([3, 2, 7, 200], np.uint8), reference)  # 2: the tie floored lower
    with pytest.raises(AssertionError):
        assert_equal_but_at_float64_ties(np.array([3, 3, 8, 200], np.uint8), reference)  # 7.5 is no tie


@pytest.mark.parametrize(
    "exact_codec", [pytest.param(False, id="1-level"), pytest.param(True, marks=pytest.mark.exact_codec, id="exact")]
)
@pytest.mark.parametrize("shape", [(37, 45), (5, 64), (4, 4)])
def test_pixelate_matches_pillow_at_other_sizes(shape, exact_codec):
    h, w = shape
    x = torch.from_numpy(np.random.default_rng(3).integers(0, 256, (3, h, w, 3), dtype=np.uint8))
    for s, c in enumerate(CIFAR.parameters["pixelate"], start=1):
        ref = [
            np.asarray(Image.fromarray(img).resize((int(w * c), int(h * c)), Image.BOX).resize((w, h), Image.BOX))
            for img in x.numpy()
        ]
        ours = corrupt(x, "pixelate", s, seed=0).numpy()
        assert_within_grey_levels(ours, np.stack(ref), 1, (shape, s))  # any Pillow build
        if exact_codec:
            assert np.array_equal(ours, np.stack(ref)), (shape, s)


def test_pixelate_cpu_path_matches_the_gathered_path():
    # The CPU path (appended neighbour means, chunked) against the generic gathers the GPU
    # runs: odd sizes, and a batch over two chunks at 32x32.
    rng = np.random.default_rng(4)
    for n, h, w in [(2, 17, 23), (_PIXELATE_CHUNK_PIXELS // 1024 + 3, 32, 32)]:
        x = torch.from_numpy(rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8))
        for c in CIFAR.parameters["pixelate"]:
            assert torch.equal(_pixelate_cpu(x, c), _pixelate_gathered(x, c)), (n, h, w, c)


@pytest.mark.parametrize(
    "exact_codec", [pytest.param(False, id="ties"), pytest.param(True, marks=pytest.mark.exact_codec, id="exact")]
)
def test_saturate_exact_on_every_tie_pattern(exact_codec):
    # Every pixel with two equal channels, (a, a, b), (a, b, b) and (a, b, a) for all a, b (grey
    # included), plus random pixels: the hue ramps and NaN-driven grey handling must give
    # scikit-image's float64 values exactly, also where a hue sits on a sector boundary.
    a, b = (v.ravel() for v in np.meshgrid(np.arange(256), np.arange(256)))
    ties = np.concatenate([np.stack([a, a, b], 1), np.stack([a, b, b], 1), np.stack([a, b, a], 1)])
    pixels = np.concatenate([ties, np.random.default_rng(4).integers(0, 256, (3 * 1024, 3))])
    x = torch.from_numpy(pixels.astype(np.uint8).reshape(-1, 32, 32, 3))
    for s in range(1, 6):
        ref = _ref_saturate(x.numpy(), CIFAR.parameters["saturate"][s - 1])
        ours = corrupt(x, "saturate", s, seed=0).numpy()
        assert_equal_but_at_float64_ties(ours, ref, s)
        if exact_codec:  # the developers' numpy and torch round every tie as scikit-image does
            assert np.array_equal(ours, ref.astype(np.uint8)), s


def test_hsv_corruptions_against_scikit_image():
    color = pytest.importorskip("skimage.color")  # benchmark-only dependency
    x = sample_images(6, seed=11)
    for s in range(1, 6):
        for name, channel, update in (
            ("saturate", 1, lambda ch, c: np.clip(ch * c[0] + c[1], 0, 1)),
            ("brightness", 2, lambda ch, c: np.clip(ch + c, 0, 1)),
        ):
            c = CIFAR.parameters[name][s - 1]
            values = []
            for img in x.numpy():
                hsv = color.rgb2hsv(img / 255.0)
                hsv[..., channel] = update(hsv[..., channel], c)
                values.append(np.clip(color.hsv2rgb(hsv), 0, 1) * 255)
            ours = corrupt(x, name, s, seed=0).numpy()
            diff = ours.astype(int) - np.stack(values).astype(np.uint8)
            if name == "saturate":  # scikit-image's float64 in its order: equal but at float64 ties
                assert_equal_but_at_float64_ties(ours, np.stack(values), s)
            else:
                assert np.abs(diff).max() <= 1 and (diff != 0).mean() < 0.01, (s, (diff != 0).mean())


def test_elastic_resampling_matches_scipy():
    rng = np.random.default_rng(8)
    img = rng.random((2, 3, 32, 32)).astype(np.float32)
    dx, dy = rng.uniform(-3, 3, (2, 2, 32, 32)).astype(np.float32)
    disp = torch.from_numpy(np.stack([dx, dy], axis=1) / 2.5)  # (N, 2, H, W), scaled by alpha below
    ours = displace(torch.from_numpy(img), disp, 2.5).numpy()
    rr, cc = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    # float32 against float64: a source position below 35 is rounded by half an ulp (1.9e-6) and moves a value in
    # [0, 1] by at most that per pixel, plus ~4 float32 operations (2.4e-7): 1e-5 leaves 4x
    for n in range(2):
        for ch in range(3):
            ref = ndi.map_coordinates(img[n, ch], [rr + dy[n], cc + dx[n]], order=1, mode="reflect")
            assert np.abs(ours[n, ch] - ref).max() < 1e-5
    t = np.array([[1.03, 0.06], [-0.05, 0.96], [0.4, -0.7]])  # source (x, y) = [col, row, 1] @ t
    ours = warp_affine(torch.from_numpy(img), torch.from_numpy(np.stack([t, t]))).numpy()
    pos = np.stack([cc, rr, np.ones_like(cc)], -1) @ t
    for ch in range(3):  # warpAffine's BORDER_REFLECT_101 = scipy 'mirror'
        ref = ndi.map_coordinates(img[0, ch], [pos[..., 1], pos[..., 0]], order=1, mode="mirror")
        assert np.abs(ours[0, ch] - ref).max() < 1e-5
    ref = ndi.gaussian_filter(dx[0].astype(np.float64), 1.92, mode="reflect", truncate=3.0)
    ours = gaussian(torch.from_numpy(dx[:1].astype(np.float64)), 1.92, "reflect", 3.0)
    assert np.abs(ours[0].numpy() - ref).max() < 1e-12  # float64, 13 taps on |x| <= 3: under 13 x 3 x 2^-53
