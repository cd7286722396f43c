"""Tests of macs_audit.views.corruptions: the API, determinism, severity ordering, and agreement of
the deterministic corruptions with independent numpy / SciPy / Pillow computations of the
reference algorithms (written here from the reference description, not from the module)."""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import scipy.ndimage as ndi
import torch
from PIL import Image

from macs_audit.errors import InputError, UsageError
from macs_audit.views import corruptions as C

DETERMINISTIC = {"brightness", "contrast", "saturate", "pixelate", "jpeg_compression",
                 "defocus_blur", "gaussian_blur", "zoom_blur"}
RANDOM = [n for n in C.CORRUPTIONS if n not in DETERMINISTIC]
# Monotone in mean |corrupted - clean| by their parameters (section 3 of the reference facts).
# Not monotone: glass_blur (sigma drops at severity 4), snow (severity 3 raises the threshold),
# elastic_transform (the affine jitter shrinks while alpha grows), spatter (water -> mud at 4),
# saturate (1-2 desaturate, 3-5 oversaturate), frost (tested below with its own measure).
MONOTONE = ["gaussian_noise", "shot_noise", "impulse_noise", "speckle_noise", "defocus_blur",
            "motion_blur", "zoom_blur", "gaussian_blur", "fog", "brightness", "contrast",
            "pixelate", "jpeg_compression"]


def _images(n: int = 6, seed: int = 0, size: int = 32) -> torch.Tensor:
    """Smooth random colour images with a little texture, plus grey, black, white and
    two-equal-maximum pixels (the HSV edge cases)."""
    rng = np.random.default_rng(seed)
    low = rng.random((n, 5, 5, 3))
    smooth = ndi.zoom(low, (1, size / 5, size / 5, 1), order=1)[:, :size, :size]
    img = np.clip(smooth + rng.normal(0, 0.05, smooth.shape), 0, 1)
    img = (img * 255).astype(np.uint8)
    img[:, 0, 0] = 0
    img[:, 0, 1] = 255
    img[:, 1, :4] = rng.integers(0, 256, (n, 4, 1))  # grey pixels
    img[:, 2, :4, 1] = img[:, 2, :4, 0]  # R == G
    return torch.from_numpy(img)


# ---------------------------------------------------------------------------------------------
# API
# ---------------------------------------------------------------------------------------------
def test_tables():
    assert len(C.CORRUPTIONS) == 19 and len(set(C.CORRUPTIONS)) == 19
    assert C.CORRUPTIONS[:3] == ("gaussian_noise", "shot_noise", "impulse_noise")
    assert C.CORRUPTIONS[-4:] == C.EXTRA_CORRUPTIONS == (
        "speckle_noise", "gaussian_blur", "spatter", "saturate")
    assert len(C.BENCHMARK_CORRUPTIONS) == 15
    assert set(C.BENCHMARK_CORRUPTIONS) | set(C.EXTRA_CORRUPTIONS) == set(C.CORRUPTIONS)
    families = {}
    for name in C.BENCHMARK_CORRUPTIONS:
        families.setdefault(C.FAMILIES[name], []).append(name)
    assert families == {
        "noise": ["gaussian_noise", "shot_noise", "impulse_noise"],
        "blur": ["defocus_blur", "glass_blur", "motion_blur", "zoom_blur"],
        "weather": ["snow", "frost", "fog", "brightness"],
        "digital": ["contrast", "elastic_transform", "pixelate", "jpeg_compression"],
    }
    assert [C.FAMILIES[n] for n in C.EXTRA_CORRUPTIONS] == ["noise", "blur", "weather", "digital"]
    assert all(len(C.PARAMS[n]) == 5 for n in C.CORRUPTIONS)


@pytest.mark.parametrize("name", C.CORRUPTIONS)
def test_shape_dtype_determinism(name):
    x = _images(4, seed=1)
    outs = [C.corrupt(x, name, s, seed=7) for s in range(1, 6)]
    for out in outs:
        assert out.shape == x.shape and out.dtype == torch.uint8 and out.device == x.device
        assert out.is_contiguous()
    assert torch.equal(C.corrupt(x, name, 3, seed=7), outs[2])
    other = C.corrupt(x, name, 3, seed=8)
    if name in DETERMINISTIC:
        assert torch.equal(other, outs[2])
    else:
        assert not torch.equal(other, outs[2])
    assert torch.equal(x, _images(4, seed=1))  # the input is not modified


def test_non_square_and_odd_sizes():
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.integers(0, 256, (2, 24, 40, 3), dtype=np.uint8))
    for name in C.CORRUPTIONS:
        assert C.corrupt(x, name, 5, seed=1).shape == x.shape, name
    assert C.corrupt(x[:0], "fog", 1, seed=0).shape == (0, 24, 40, 3)


def test_errors():
    x = _images(1)
    with pytest.raises(UsageError, match="unknown corruption"):
        C.corrupt(x, "gaussian", 1, seed=0)
    for bad in (0, 6, 2.0, True, "3"):
        with pytest.raises(UsageError, match="severity"):
            C.corrupt(x, "fog", bad, seed=0)
    with pytest.raises(InputError, match="uint8"):
        C.corrupt(x.float(), "fog", 1, seed=0)
    with pytest.raises(InputError, match="uint8"):
        C.corrupt(x[..., :1], "fog", 1, seed=0)
    with pytest.raises(InputError, match="uint8"):
        C.corrupt(x.numpy(), "fog", 1, seed=0)
    with pytest.raises(InputError) as info:
        C.corrupt(x[0], "fog", 1, seed=0)
    assert "\n" not in str(info.value)


# torch's two ways to lower float32 matmul precision; the per-backend one exists from torch 2.9
PRECISION_APIS = ["legacy"] + (["per-backend"] if hasattr(torch.backends.mkldnn.matmul, "fp32_precision") else [])


@pytest.mark.parametrize("api", PRECISION_APIS)
def test_reduced_matmul_precision_changes_nothing(api):
    """A user's reduced float32 matmul precision (bf16 on CPUs that have it) must not change the
    corruptions, and is restored afterwards."""
    x = _images(4, seed=9)
    names = ("snow", "gaussian_blur", "zoom_blur", "elastic_transform", "jpeg_compression", "contrast")
    expected = {n: C.corrupt(x, n, 3, seed=5) for n in names}
    matmul = torch.backends.mkldnn.matmul
    try:
        if api == "legacy":
            torch.set_float32_matmul_precision("medium")
        else:
            matmul.fp32_precision = "bf16"
        for n in names:
            assert torch.equal(C.corrupt(x, n, 3, seed=5), expected[n]), n
        if api == "legacy":
            assert torch.get_float32_matmul_precision() == "medium"
        else:
            assert matmul.fp32_precision == "bf16"
    finally:
        if api == "legacy":
            torch.set_float32_matmul_precision("highest")
        else:
            matmul.fp32_precision = "none"
    assert torch.get_float32_matmul_precision() == "highest"


def test_batch_seed():
    s = C.batch_seed(0, "fog", 3, 1000)
    assert s == C.batch_seed(0, "fog", 3, 1000)
    assert 0 <= s < 2 ** 63
    others = {C.batch_seed(1, "fog", 3, 1000), C.batch_seed(0, "snow", 3, 1000),
              C.batch_seed(0, "fog", 4, 1000), C.batch_seed(0, "fog", 3, 2000)}
    assert s not in others and len(others) == 4
    assert C.batch_seed(0, "fog", 3, 0) == 7_280_092_846_327_443_954  # stable across runs


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_device():
    x = _images(3).cuda()
    for name in C.CORRUPTIONS:
        out = C.corrupt(x, name, 3, seed=1)
        assert out.device == x.device and out.shape == x.shape and out.dtype == torch.uint8
        if name in DETERMINISTIC:
            diff = (out.cpu().int() - C.corrupt(x.cpu(), name, 3, seed=1).int()).abs().max()
            assert diff <= 1, name


# ---------------------------------------------------------------------------------------------
# Severity ordering and randomness sanity
# ---------------------------------------------------------------------------------------------
def _distortion(name, x, seed=3):
    return [(C.corrupt(x, name, s, seed=seed).float() - x.float()).abs().mean().item()
            for s in range(1, 6)]


@pytest.mark.parametrize("name", MONOTONE)
def test_severity_monotone(name):
    d = _distortion(name, _images(8, seed=2))
    assert all(b >= a - 0.05 for a, b in zip(d, d[1:])), d
    assert d[4] > d[0]


def test_frost_monotone_in_correlation_loss():
    # frost = w_img * x + w_frost * texture: the image-to-frost ratio falls 5 -> 1.67, so the
    # clean signal's share falls; measured as 1 - correlation with the clean image.
    x = _images(8, seed=2).float()
    losses = []
    for s in range(1, 6):
        y = C.corrupt(x.to(torch.uint8), "frost", s, seed=3).float()
        xc = x - x.mean(dim=(1, 2, 3), keepdim=True)
        yc = y - y.mean(dim=(1, 2, 3), keepdim=True)
        corr = (xc * yc).sum((1, 2, 3)) / ((xc * xc).sum((1, 2, 3)) * (yc * yc).sum((1, 2, 3))).sqrt()
        losses.append(1 - corr.mean().item())
    assert all(b >= a for a, b in zip(losses, losses[1:])), losses


def test_gaussian_noise_statistics():
    x = torch.full((20, 32, 32, 3), 128, dtype=torch.uint8)
    for s, sigma in enumerate(C.PARAMS["gaussian_noise"], start=1):
        diff = C.corrupt(x, "gaussian_noise", s, seed=0).double() - 128
        # floor(128 + 255 n) - 128 has mean -0.5 and std ~ 255 sigma
        assert abs(diff.mean().item() + 0.5) < 0.3
        assert abs(diff.std().item() / (255 * sigma) - 1) < 0.03


def test_impulse_noise_statistics():
    x = torch.full((20, 32, 32, 3), 100, dtype=torch.uint8)
    out = C.corrupt(x, "impulse_noise", 5, seed=0)
    salt = (out == 255).double().mean().item()
    pepper = (out == 0).double().mean().item()
    assert abs(salt - 0.035) < 0.005 and abs(pepper - 0.035) < 0.005
    assert ((out == 0) | (out == 100) | (out == 255)).all()


def test_impulse_noise_extreme_amounts():
    """amount 0 keeps every value; amount 1 flips every value to 0 or 255 (the threshold of
    2^15 on the signed 16-bit word must not wrap)."""
    x = torch.full((8, 32, 32, 3), 77, dtype=torch.uint8)
    assert torch.equal(C._impulse_noise(x, 0.0, torch.Generator().manual_seed(0)), x)
    out = C._impulse_noise(x, 1.0, torch.Generator().manual_seed(0))
    assert set(out.unique().tolist()) == {0, 255}
    assert abs(float((out == 255).float().mean()) - 0.5) < 0.02


def test_shot_noise_statistics():
    x = torch.full((20, 32, 32, 3), 128, dtype=torch.uint8)
    diff = C.corrupt(x, "shot_noise", 5, seed=0).double() - 128
    lam = 128 / 255 * 50  # Poisson(x c) / c, times 255: std = 255 sqrt(lam) / c
    assert abs(diff.std().item() / (255 * math.sqrt(lam) / 50) - 1) < 0.05


def _normal_cdf(t):
    return 0.5 * (1 + math.erf(t / math.sqrt(2)))


def _output_pmf(name, level, severity):
    """The exact distribution of one output value for a flat input ``level`` (the reference's
    model: x + N(0, s), x Poisson(x c) / c, x + x N(0, s); then clip, x 255, floor)."""
    param = C.PARAMS[name][severity - 1]
    pmf = np.zeros(256)
    if name == "shot_noise":
        lam = level / 255 * param
        for count in range(int(lam + 12 * math.sqrt(lam) + 20)):
            p = math.exp(count * math.log(lam) - lam - math.lgamma(count + 1))
            pmf[int(min(count / param, 1.0) * 255)] += p
        return pmf
    scale = 255 * param if name == "gaussian_noise" else level * param
    edges = np.array([_normal_cdf((j - level) / scale) for j in range(1, 256)])
    pmf[0], pmf[255] = edges[0], 1 - edges[-1]
    pmf[1:255] = np.diff(edges)
    return pmf


@pytest.mark.parametrize("name", ["gaussian_noise", "shot_noise", "speckle_noise"])
def test_noise_samplers_draw_the_reference_distribution(name):
    """The quantile-table samplers against the exact distribution of the output grey level:
    total variation within sampling error (about 0.01 for 307,200 draws over ~100 levels)."""
    for level, severity in ((128, 1), (128, 5), (30, 3), (240, 5)):
        x = torch.full((100, 32, 32, 3), level, dtype=torch.uint8)
        out = C.corrupt(x, name, severity, seed=severity)
        empirical = np.bincount(out.numpy().ravel(), minlength=256) / out.numel()
        tv = 0.5 * np.abs(empirical - _output_pmf(name, level, severity)).sum()
        assert tv < 0.02, (name, level, severity, tv)


# ---------------------------------------------------------------------------------------------
# Independent references for the deterministic corruptions (max |diff| <= 1 grey level)
# ---------------------------------------------------------------------------------------------
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


def _ref_gaussian_blur(img, sigma):
    x = ndi.gaussian_filter(img / 255.0, sigma=(sigma, sigma, 0), mode="nearest", truncate=4.0)
    return np.clip(x, 0, 1) * 255


def _ref_defocus(img, c):
    radius, alias_blur = c
    grid = np.arange(-8, 9)
    xx, yy = np.meshgrid(grid, grid)
    disk = (xx ** 2 + yy ** 2 <= radius ** 2).astype(np.float64)
    disk /= disk.sum()
    g = np.exp(-((np.arange(3) - 1) ** 2) / (2 * alias_blur ** 2))  # getGaussianKernel(3, s)
    g /= g.sum()
    kernel = ndi.correlate(disk, np.outer(g, g), mode="mirror")  # GaussianBlur (3, 3)
    x = img / 255.0
    out = np.stack([ndi.correlate(x[..., ch], kernel, mode="mirror") for ch in range(3)], -1)
    return np.clip(out, 0, 1) * 255  # filter2D, BORDER_REFLECT_101 = scipy 'mirror'


def _ref_clipped_zoom(x, z):
    n = x.shape[0]
    ch = int(np.ceil(n / z))
    top = (n - ch) // 2
    out = ndi.zoom(x[top:top + ch, top:top + ch], (z, z, 1), order=1)
    trim = (out.shape[0] - n) // 2
    return out[trim:trim + n, trim:trim + n]


def _ref_zoom_blur(img, c):
    factors = np.arange(*c)
    x = (img / 255.0).astype(np.float32)
    acc = np.zeros_like(x)
    for z in factors:
        acc += _ref_clipped_zoom(x, z)
    return np.clip((x + acc) / (len(factors) + 1), 0, 1) * 255


def _ref_pixelate(img, c):
    im = Image.fromarray(img)
    im = im.resize((int(32 * c), int(32 * c)), Image.BOX).resize((32, 32), Image.BOX)
    return np.asarray(im)


def _ref_jpeg(img, quality):
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=quality)
    return np.asarray(Image.open(buf))


# Bit-exact by construction: Pillow's arithmetic, the same codec, scikit-image's float64 HSV.
EXACT = {"pixelate", "jpeg_compression", "saturate"}

REFERENCES = {
    "brightness": _ref_brightness, "saturate": _ref_saturate, "contrast": _ref_contrast,
    "gaussian_blur": _ref_gaussian_blur, "defocus_blur": _ref_defocus,
    "zoom_blur": _ref_zoom_blur, "pixelate": _ref_pixelate, "jpeg_compression": _ref_jpeg,
}


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_reference_algorithm(name):
    x = _images(4, seed=5)
    for s in range(1, 6):
        ours = C.corrupt(x, name, s, seed=0).numpy().astype(int)
        ref = np.stack([REFERENCES[name](img, C.PARAMS[name][s - 1]) for img in x.numpy()])
        ref = ref.astype(np.uint8).astype(int)  # the reference's truncating cast
        diff = ours - ref
        if name in EXACT:
            assert (diff == 0).all(), (name, s, (diff != 0).mean())
        assert np.abs(diff).max() <= 1, (name, s, np.abs(diff).max())
        # Off-by-one values are results that are integers in exact arithmetic (brightness's
        # V + 51/255, the 1/9 box of defocus severity 5), floored on float32 noise here and on
        # float64 noise in the reference; they must stay rare and unbiased.
        assert (diff != 0).mean() < 0.15, (name, s, (diff != 0).mean())
        assert abs(diff.mean()) < 0.05, (name, s, diff.mean())


@pytest.mark.parametrize("shape", [(37, 45), (5, 64), (4, 4)])
def test_pixelate_matches_pillow_at_other_sizes(shape):
    h, w = shape
    x = torch.from_numpy(np.random.default_rng(3).integers(0, 256, (3, h, w, 3), dtype=np.uint8))
    for s, c in enumerate(C.PARAMS["pixelate"], start=1):
        ref = [np.asarray(Image.fromarray(img).resize((int(w * c), int(h * c)), Image.BOX).resize((w, h), Image.BOX))
               for img in x.numpy()]
        assert np.array_equal(C.corrupt(x, "pixelate", s, seed=0).numpy(), np.stack(ref)), (shape, s)


def test_pixelate_cpu_path_matches_the_gathered_path():
    # The CPU path (appended neighbour means, chunked) against the generic gathers the GPU
    # runs: odd sizes, and a batch over two chunks at 32x32.
    rng = np.random.default_rng(4)
    for n, h, w in [(2, 17, 23), (C._PIXELATE_CHUNK_PIXELS // 1024 + 3, 32, 32)]:
        x = torch.from_numpy(rng.integers(0, 256, (n, h, w, 3), dtype=np.uint8))
        for c in C.PARAMS["pixelate"]:
            assert torch.equal(C._pixelate_cpu(x, c), C._pixelate_gathered(x, c)), (n, h, w, c)


def test_saturate_exact_on_every_tie_pattern():
    # Every pixel with two equal channels, (a, a, b), (a, b, b) and (a, b, a) for all a, b (grey
    # included), plus random pixels: the hue ramps and NaN-driven grey handling must give
    # scikit-image's float64 values exactly, also where a hue sits on a sector boundary.
    a, b = (v.ravel() for v in np.meshgrid(np.arange(256), np.arange(256)))
    ties = np.concatenate([np.stack([a, a, b], 1), np.stack([a, b, b], 1), np.stack([a, b, a], 1)])
    pixels = np.concatenate([ties, np.random.default_rng(4).integers(0, 256, (3 * 1024, 3))])
    x = torch.from_numpy(pixels.astype(np.uint8).reshape(-1, 32, 32, 3))
    for s in range(1, 6):
        ref = _ref_saturate(x.numpy(), C.PARAMS["saturate"][s - 1]).astype(np.uint8)
        assert np.array_equal(C.corrupt(x, "saturate", s, seed=0).numpy(), ref), s


def test_hsv_corruptions_against_scikit_image():
    color = pytest.importorskip("skimage.color")  # benchmark-only dependency
    x = _images(6, seed=11)
    for s in range(1, 6):
        for name, channel, update in (
                ("saturate", 1, lambda ch, c: np.clip(ch * c[0] + c[1], 0, 1)),
                ("brightness", 2, lambda ch, c: np.clip(ch + c, 0, 1))):
            c = C.PARAMS[name][s - 1]
            ref = []
            for img in x.numpy():
                hsv = color.rgb2hsv(img / 255.0)
                hsv[..., channel] = update(hsv[..., channel], c)
                ref.append((np.clip(color.hsv2rgb(hsv), 0, 1) * 255).astype(np.uint8))
            diff = C.corrupt(x, name, s, seed=0).numpy().astype(int) - np.stack(ref)
            if name == "saturate":
                assert (diff == 0).all(), (s, (diff != 0).mean())
            else:
                assert np.abs(diff).max() <= 1 and (diff != 0).mean() < 0.01, (s, (diff != 0).mean())


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_zero_below_is_where_below(dtype):
    # x where x >= threshold, else 0: values exactly at the threshold are kept, the next value
    # below it is not (as torch.where(x < threshold, 0, x) compares in x's dtype).
    t = torch.tensor(0.69, dtype=dtype)
    x = torch.cat([torch.linspace(0, 1, 1001, dtype=dtype), t[None],
                   torch.nextafter(t, torch.tensor(0.0, dtype=dtype))[None],
                   torch.nextafter(t, torch.tensor(1.0, dtype=dtype))[None]])
    expected = torch.where(x < 0.69, torch.zeros_like(x), x)
    assert torch.equal(C._zero_below(x.clone(), 0.69), expected)


def test_random_words_deterministic_per_seed():
    def words(seed):
        return C._RandomWords(torch.Generator().manual_seed(seed), "cpu").draw(10_001)

    assert torch.equal(words(3), words(3)) and not torch.equal(words(3), words(4))
    w = words(5).numpy().astype(np.int64) + (1 << 15)  # table cells 0..65535
    assert w.dtype == np.int64 and w.min() >= 0 and w.max() < 1 << 16
    assert abs(w.mean() / 65535 - 0.5) < 0.01  # uniform: mean 1/2, sd of the mean ~0.003


def test_glass_blur_severity1_is_a_local_copy():
    # sigma 0.05 has a Gaussian radius of 0: only the shuffle acts. Each pixel (h, w) with
    # h, w >= 2 copies one of (h, w), (h-1, w), (h, w-1), (h-1, w-1); rows/cols 0-1 stay.
    x = _images(4, seed=6).numpy().astype(int)
    out = C.corrupt(torch.from_numpy(x.astype(np.uint8)), "glass_blur", 1, seed=0).numpy()
    assert (out[:, :2] == x[:, :2]).all() and (out[:, :, :2] == x[:, :, :2]).all()
    inner = out[:, 2:, 2:]
    candidates = [x[:, 2 + dy:32 + dy, 2 + dx:32 + dx] for dy in (-1, 0) for dx in (-1, 0)]
    match = np.zeros(inner.shape[:3], dtype=bool)
    for cand in candidates:
        match |= (cand == inner).all(-1)
    assert match.all()
    moved = (inner != x[:, 2:, 2:]).any(-1).mean()
    assert 0.5 < moved < 0.9  # 3/4 of the offsets move, minus equal neighbours


def _ref_motion_blur(img, radius, sigma, angle):
    """ImageMagick MotionBlurImage on one float image (H, W, C), written out per tap."""
    h, w = img.shape[:2]
    width = 2 * math.ceil(radius) + 1
    k = np.exp(-np.arange(width) ** 2 / (2 * sigma ** 2))
    k /= k.sum()
    rows, cols = np.arange(h)[:, None], np.arange(w)[None, :]
    out = np.zeros(img.shape)
    for i in range(width):
        ox = math.ceil(i * math.cos(math.radians(angle)) - 0.5)
        oy = math.ceil(i * math.sin(math.radians(angle)) - 0.5)
        out += k[i] * img[np.clip(rows + oy, 0, h - 1), np.clip(cols + ox, 0, w - 1)]
    return np.floor(out + 0.5)


def test_motion_blur_kernel_matches_imagemagick_description():
    x = _images(5, seed=7)
    angles = torch.tensor([-45.0, -10.3, 0.0, 33.3, 135.0], dtype=torch.float64)
    for radius, sigma in C.PARAMS["motion_blur"] + ((14, 12),):
        ours = C._motion_blur(x.float(), radius, sigma, angles).numpy()
        for i, angle in enumerate(angles.tolist()):
            ref = _ref_motion_blur(x[i].numpy().astype(np.float64), radius, sigma, angle)
            assert np.abs(ours[i] - ref).max() <= 1


def test_fog_plasma_fractal():
    gen = torch.Generator().manual_seed(0)
    maps = C._plasma(3, 32, 2.0, gen, "cpu")
    assert maps.shape == (3, 32, 32)
    assert torch.allclose(maps.amin(dim=(1, 2)), torch.zeros(3))
    assert torch.allclose(maps.amax(dim=(1, 2)), torch.ones(3))
    assert not torch.equal(maps[0], maps[1])


def test_elastic_resampling_matches_scipy():
    rng = np.random.default_rng(8)
    img = rng.random((2, 3, 32, 32)).astype(np.float32)
    dx, dy = rng.uniform(-3, 3, (2, 2, 32, 32)).astype(np.float32)
    disp = torch.from_numpy(np.stack([dx, dy], axis=1) / 2.5)  # (N, 2, H, W), scaled by alpha below
    ours = C._displace(torch.from_numpy(img), disp, 2.5).numpy()
    rr, cc = np.meshgrid(np.arange(32), np.arange(32), indexing="ij")
    for n in range(2):
        for ch in range(3):
            ref = ndi.map_coordinates(img[n, ch], [rr + dy[n], cc + dx[n]], order=1, mode="reflect")
            assert np.abs(ours[n, ch] - ref).max() < 1e-5
    t = np.array([[1.03, 0.06], [-0.05, 0.96], [0.4, -0.7]])  # source (x, y) = [col, row, 1] @ t
    ours = C._warp_affine(torch.from_numpy(img), torch.from_numpy(np.stack([t, t]))).numpy()
    pos = np.stack([cc, rr, np.ones_like(cc)], -1) @ t
    for ch in range(3):  # warpAffine's BORDER_REFLECT_101 = scipy 'mirror'
        ref = ndi.map_coordinates(img[0, ch], [pos[..., 1], pos[..., 0]], order=1, mode="mirror")
        assert np.abs(ours[0, ch] - ref).max() < 1e-5
    ref = ndi.gaussian_filter(dx[0].astype(np.float64), 1.92, mode="reflect", truncate=3.0)
    ours = C._gaussian(torch.from_numpy(dx[:1].astype(np.float64)), 1.92, "reflect", 3.0)
    assert np.abs(ours[0].numpy() - ref).max() < 1e-12


def test_spatter_opencv_chain_against_cv2():
    cv2 = pytest.importorskip("cv2")  # benchmark-only dependency; skipped where absent
    gen = torch.Generator().manual_seed(0)
    liquid = torch.randn(40, 1, 32, 32, generator=gen) * 0.3 + 0.65
    liquid = C._gaussian(liquid, 1.0)
    liquid = torch.where(liquid < 0.69, torch.zeros_like(liquid), liquid)
    liquid8 = liquid.clamp(0, 1).mul(255).floor()
    edges = C._canny(liquid8, 50, 150)
    dist = C._chamfer_distance(edges, 20.0)
    for i in range(liquid8.shape[0]):
        u8 = liquid8[i, 0].numpy().astype(np.uint8)
        ref_edges = cv2.Canny(u8, 50, 150)
        assert ((ref_edges > 0) == edges[i, 0].numpy()).all()
        ref_dist = np.minimum(cv2.distanceTransform(255 - ref_edges, cv2.DIST_L2, 5), 20)
        assert np.abs(ref_dist - dist[i, 0].numpy()).max() < 1e-3
        d8 = np.floor(cv2.blur(ref_dist, (3, 3))).astype(np.uint8)
        ours = C._equalize_hist(torch.from_numpy(d8.astype(np.float32))[None, None])
        assert (ours[0, 0].numpy() == cv2.equalizeHist(d8)).all()


# ---------------------------------------------------------------------------------------------
# Frost textures
# ---------------------------------------------------------------------------------------------
def test_procedural_frost_textures():
    a = C._procedural_frost(0, 120, 180)
    assert a.shape == (120, 180, 3) and a.dtype == np.uint8
    assert np.array_equal(a, C._procedural_frost.__wrapped__(0, 120, 180))  # deterministic
    assert 90 < a.mean() < 200 and a.std() > 20
    assert not np.array_equal(C._procedural_frost(1, 63, 112), C._procedural_frost(2, 63, 112))
    assert C.frost_texture_info(None).startswith("procedural (seed ")


def test_frost_from_user_directory(tmp_path):
    rng = np.random.default_rng(9)
    for name, size in (("a.png", (260, 300)), ("b.jpg", (200, 240))):
        low = rng.random((6, 6, 3))
        img = (np.clip(ndi.zoom(low, (size[0] / 6, size[1] / 6, 1), order=1), 0, 1) * 255)
        Image.fromarray(img.astype(np.uint8)).save(tmp_path / name)
    (tmp_path / "notes.txt").write_text("not an image")
    info = C.frost_texture_info(str(tmp_path))
    assert str(tmp_path) in info and "a.png" in info and "b.jpg" in info
    textures = C._load_user_frost(str(tmp_path))
    assert [t.shape for t in textures] == [(52, 60, 3), (40, 48, 3)]  # 0.2 resize
    x = _images(6, seed=3)
    out = C.corrupt(x, "frost", 4, seed=1, frost_textures=str(tmp_path)).numpy()
    w_img, w_frost = C.PARAMS["frost"][3]
    for i in range(6):  # each output is clip(w_img x + w_frost crop) for some crop
        xi = x[i].numpy().astype(np.float32)
        found = False
        for t in textures:
            for r in range(t.shape[0] - 32):
                for c in range(t.shape[1] - 32):
                    crop = t[r:r + 32, c:c + 32].astype(np.float32)
                    if np.array_equal(np.clip(w_img * xi + w_frost * crop, 0, 255).astype(np.uint8),
                                      out[i]):
                        found = True
                        break
                if found:
                    break
            if found:
                break
        assert found, i


def test_frost_user_directory_errors(tmp_path):
    x = _images(1)
    with pytest.raises(InputError, match="does not exist"):
        C.corrupt(x, "frost", 1, seed=0, frost_textures=str(tmp_path / "missing"))
    with pytest.raises(InputError, match="no image files"):
        C.corrupt(x, "frost", 1, seed=0, frost_textures=str(tmp_path))
    Image.fromarray(np.zeros((100, 100, 3), np.uint8)).save(tmp_path / "small.png")
    with pytest.raises(InputError, match="smaller than"):
        C.corrupt(x, "frost", 1, seed=0, frost_textures=str(tmp_path))


def test_frost_resize_matches_cv2(tmp_path):
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(4)
    img = rng.integers(0, 256, (315, 560, 3), dtype=np.uint8)
    Image.fromarray(img).save(tmp_path / "frost.png")
    ours = C._load_user_frost(str(tmp_path))[0]
    ref = cv2.resize(img, (0, 0), fx=0.2, fy=0.2)  # INTER_LINEAR
    assert ours.shape == ref.shape
    assert np.abs(ours.astype(int) - ref.astype(int)).max() <= 1
