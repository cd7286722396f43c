"""The tensor JPEG codec and the jpeg_compression corruption (macs_audit.views.corruptions.jpeg) against
Pillow's own encode and decode.

JPEG decoders differ by build (libjpeg-turbo's versions and SIMD paths, IJG libjpeg 9's quantisation), so
every comparison with Pillow holds within 1 grey level (`assert_within_grey_levels`), and bit-identity with
the developers' Pillow (libjpeg-turbo, the codec this one reproduces) is a separate test marked
`exact_codec` (`-m "not exact_codec"` skips it elsewhere). Comparisons of the codec's own paths with each
other (chunking, float64, reduced matmul precision) are exact: they are integer arithmetic by design.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from conftest import assert_within_grey_levels
from PIL import Image

from macs_audit.views.corruptions import jpeg
from macs_audit.views.corruptions.apply import corrupt
from macs_audit.views.corruptions.table import CIFAR


def _pillow_roundtrip(img: np.ndarray, quality: int) -> np.ndarray:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    buf.seek(0)
    with Image.open(buf) as decoded:
        return np.asarray(decoded.convert("RGB"))


def _hard_images(rng, n: int, h: int, w: int) -> np.ndarray:
    """Uniform noise (large AC coefficients), saturated 0/255 pixels (range-limit and colour
    extremes) and smooth gradients (ties in the rounding shifts)."""
    noise = rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8)
    saturated = (rng.integers(0, 2, (n, h, w, 3)) * 255).astype(np.uint8)
    ramp = np.add.outer(np.arange(h), np.arange(w))[None, :, :, None] * rng.uniform(0.5, 4, (n, 1, 1, 3))
    smooth = (ramp % 256).astype(np.uint8)
    return np.concatenate([noise, saturated, smooth])


QUALITIES = [80, 65, 58, 50, 40, 95, 10]


def _against_pillow(quality):
    images = _hard_images(np.random.default_rng(quality), 6, 32, 32)
    ours = jpeg.roundtrip(torch.from_numpy(images), quality).numpy()
    return ours, np.stack([_pillow_roundtrip(img, quality) for img in images])


@pytest.mark.parametrize("quality", QUALITIES)
def test_within_one_grey_level_of_pillow(quality):
    assert_within_grey_levels(*_against_pillow(quality), 1, quality)


@pytest.mark.exact_codec
@pytest.mark.parametrize("quality", QUALITIES)
def test_bit_identical_to_pillow(quality):
    np.testing.assert_array_equal(*_against_pillow(quality))


def test_within_one_grey_level_holds_for_another_decoder_build():
    """A decoder whose rounding differs (IJG libjpeg 9's quantisation: some values 1 grey level off) passes the
    tolerant comparison and fails the exact one; 2 levels off fails both."""
    ours, reference = _against_pillow(80)
    flips = np.random.default_rng(0).random(reference.shape) < 0.02
    other = np.where(flips & (reference < 255), reference + 1, reference).astype(np.uint8)
    assert_within_grey_levels(ours, other, 1)
    assert not np.array_equal(ours, other)
    with pytest.raises(AssertionError):
        assert_within_grey_levels(ours, np.where(flips & (reference < 254), reference + 2, reference), 1)


def _libjpeg_turbo_reciprocal(divisor: int) -> tuple[int, int, int]:
    """jcdctmgr.c compute_reciprocal (16-bit DCT elements): (factor, correction, shift)."""
    shift = 16 + divisor.bit_length() - 1
    factor, remainder = divmod(1 << shift, divisor)
    correction = divisor // 2
    if remainder == 0:
        factor, shift = factor >> 1, shift - 1
    elif remainder <= divisor // 2:
        correction += 1
    else:
        factor += 1
    return factor, correction, shift


def test_quantisation_equals_libjpeg_turbo_reciprocal_exhaustively():
    """Every 16-bit coefficient at every quantiser 1..255: the rounding the codec uses equals
    libjpeg-turbo's reciprocal multiply, sign(t) ((|t| + correction) factor >> shift)."""
    t = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int64)
    for q in range(1, 256):
        factor, correction, shift = _libjpeg_turbo_reciprocal(8 * q)
        expected = torch.sign(t) * (((t.abs() + correction) * factor) >> shift)
        ours = (t.double() * (jpeg._QUANT_NUDGE / (8 * q))).round()
        assert torch.equal(ours.long(), expected), q


def _corruption_against_pillow():
    images = _hard_images(np.random.default_rng(5), 2, 32, 32)
    for severity, quality in enumerate(CIFAR.parameters["jpeg_compression"], start=1):
        ours = corrupt(torch.from_numpy(images), "jpeg_compression", severity, seed=0).numpy()
        yield severity, ours, np.stack([_pillow_roundtrip(img, quality) for img in images])


def test_corruption_is_pillow_at_every_severity():
    for severity, ours, reference in _corruption_against_pillow():
        assert_within_grey_levels(ours, reference, 1, severity)


@pytest.mark.exact_codec
def test_corruption_is_pillow_bit_for_bit_at_every_severity():
    for _, ours, reference in _corruption_against_pillow():
        np.testing.assert_array_equal(ours, reference)


def test_other_sizes_and_chunking(monkeypatch):
    images = _hard_images(np.random.default_rng(1), 2, 48, 64)  # 6 images
    whole = jpeg.roundtrip(torch.from_numpy(images), 58).numpy()
    monkeypatch.setattr(jpeg, "_CHUNK_PIXELS", 4 * 48 * 64)  # chunks of 4 and 2
    ours = jpeg.roundtrip(torch.from_numpy(images), 58).numpy()
    np.testing.assert_array_equal(ours, whole)  # the codec's own arithmetic: the same bytes in any chunking
    assert_within_grey_levels(ours, np.stack([_pillow_roundtrip(img, 58) for img in images]), 1)


@pytest.mark.exact_codec
def test_other_sizes_bit_identical_to_pillow():
    images = _hard_images(np.random.default_rng(1), 2, 48, 64)
    ours = jpeg.roundtrip(torch.from_numpy(images), 58).numpy()
    np.testing.assert_array_equal(ours, np.stack([_pillow_roundtrip(img, 58) for img in images]))


def test_float64_path_used_on_gpus(monkeypatch):
    """GPUs run every stage in float64 (no TF32 rounding); the result must not change (integer sums below
    2^24 are exact in both, so the bytes are the float32 path's)."""
    images = _hard_images(np.random.default_rng(3), 2, 32, 32)
    float32 = jpeg.roundtrip(torch.from_numpy(images), 65).numpy()
    monkeypatch.setattr(jpeg, "float32_products_are_exact", lambda device: False)
    assert jpeg._constants(65, "cpu", 32, 32, False)["to_ycc"].dtype == torch.float64
    ours = jpeg.roundtrip(torch.from_numpy(images), 65).numpy()
    np.testing.assert_array_equal(ours, float32)
    assert_within_grey_levels(ours, np.stack([_pillow_roundtrip(img, 65) for img in images]), 1)


def test_reduced_cpu_matmul_precision_stays_exact():
    """With float32 products switched to bf16 (on CPUs that have it) the codec must not round:
    it falls back to float64."""
    images = _hard_images(np.random.default_rng(4), 2, 32, 32)
    exact = jpeg.roundtrip(torch.from_numpy(images), 50).numpy()
    torch.set_float32_matmul_precision("medium")
    try:
        assert not jpeg.float32_products_are_exact("cpu")
        ours = jpeg.roundtrip(torch.from_numpy(images), 50).numpy()
    finally:
        torch.set_float32_matmul_precision("highest")  # the default
    assert jpeg.float32_products_are_exact("cpu")
    np.testing.assert_array_equal(ours, exact)
    assert_within_grey_levels(ours, np.stack([_pillow_roundtrip(img, 50) for img in images]), 1)


def test_quality_range():
    images = torch.zeros(1, 16, 16, 3, dtype=torch.uint8)
    for quality in (0, 101, -5):
        with pytest.raises(ValueError, match="1..100"):
            jpeg.roundtrip(images, quality)
    for quality in (1, 100):
        assert_within_grey_levels(
            jpeg.roundtrip(images, quality).numpy(), _pillow_roundtrip(images[0].numpy(), quality)[None], 1
        )


def test_unsupported_sizes_fall_back_to_pillow():
    assert jpeg.supports(32, 32) and jpeg.supports(224, 160)
    assert not jpeg.supports(30, 32) and not jpeg.supports(32, 8) and not jpeg.supports(0, 16)
    images = np.random.default_rng(2).integers(0, 256, (3, 30, 20, 3), dtype=np.uint8)
    with pytest.raises(ValueError, match="multiples of 16"):
        jpeg.roundtrip(torch.from_numpy(images), 80)
    corrupted = corrupt(torch.from_numpy(images), "jpeg_compression", 1, seed=0).numpy()
    # the fallback is this Pillow's own encode and decode, so the same bytes whatever its build
    np.testing.assert_array_equal(corrupted, np.stack([_pillow_roundtrip(img, 80) for img in images]))


def test_empty_batch():
    out = jpeg.roundtrip(torch.zeros(0, 32, 32, 3, dtype=torch.uint8), 80)
    assert out.shape == (0, 32, 32, 3) and out.dtype == torch.uint8


def test_exact_codec_tests_skip_on_another_build(monkeypatch):
    """Upstream Pillow with libjpeg-turbo runs the bit-exact tests; IJG libjpeg or Pillow-SIMD skip them (the
    1-grey-level checks still run), so another build does not fail the suite."""
    import PIL
    from conftest import exact_codec_build
    from PIL import features

    monkeypatch.setattr(features, "check", lambda name: True)
    monkeypatch.setattr(PIL, "__version__", "13.0.0")
    assert exact_codec_build() is None  # the developers' build
    monkeypatch.setattr(PIL, "__version__", "9.5.0.post1")
    assert "Pillow-SIMD" in exact_codec_build()
    monkeypatch.setattr(features, "check", lambda name: name != "libjpeg_turbo")
    assert "not libjpeg-turbo" in exact_codec_build()
