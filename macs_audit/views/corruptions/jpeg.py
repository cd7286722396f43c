"""The jpeg_compression corruption: Pillow's JPEG round trip (save at a quality, load back) as
batched tensor code.

Pillow runs libjpeg-turbo with its defaults: 4:2:0 chroma subsampling, the "islow" integer DCT
both ways, libjpeg-turbo's reciprocal quantisation, h2v2 downsampling and "fancy" upsampling, and
16-bit fixed-point colour conversion. Every one of those steps is integer arithmetic, and each
DCT pass is a linear integer map followed by one rounding shift. Here each pass is a float matrix
product with the shift folded into the matrix, followed by a floor: exact, because every partial
sum is an integer below 2^24 (float32) or 2^53 (float64). The output is bit-identical to Pillow's
(tested), so the reference and this agree byte for byte, on any device.

Only images whose sides are multiples of 16 (whole 4:2:0 MCUs, e.g. 32x32 or 224x224) take this
path (``supports``); libjpeg's edge padding for other sizes is left to Pillow.

Layout: a plane (n, H, W) is viewed as (n, hb, r, wb, c) blocks. The passes act in IJG's order
along alternating axes, so no permutes are needed: forward pass 1 along c (a product on the
right), forward pass 2 along r (a batched product on the left), quantisation elementwise, inverse
pass 1 along the row frequency (left), inverse pass 2 along the column frequency (right).
"""

from __future__ import annotations

import functools
import io

import numpy as np
import torch
from PIL import Image

# IJG jfdctint.c / jidctint.c constants: CONST_BITS = 13, PASS1_BITS = 2.
_CONST_BITS, _PASS1_BITS = 13, 2


def _fix13(x: float) -> int:
    return int(x * (1 << _CONST_BITS) + 0.5)


def _fix16(x: float) -> int:
    return int(x * 65536 + 0.5)


_C = {
    name: _fix13(value)
    for name, value in dict(
        c0298=0.298631336,
        c0390=0.390180644,
        c0541=0.541196100,
        c0765=0.765366865,
        c0899=0.899976223,
        c1175=1.175875602,
        c1501=1.501321110,
        c1847=1.847759065,
        c1961=1.961570560,
        c2053=2.053119869,
        c2562=2.562915447,
        c3072=3.072711026,
    ).items()
}


def _forward_1d(d: list[int]) -> list[int]:
    """The LL&M forward 1-D DCT of jfdctint.c before its descaling shift. jfdctint.c shifts
    outputs 0 and 4 by CONST_BITS less than the others in both passes (pass 1: << PASS1_BITS
    against >> CONST_BITS - PASS1_BITS; pass 2: >> PASS1_BITS against >> CONST_BITS +
    PASS1_BITS), so they are scaled by 2^CONST_BITS here and every output takes one shift."""
    even_shift = _CONST_BITS
    t0, t7, t1, t6 = d[0] + d[7], d[0] - d[7], d[1] + d[6], d[1] - d[6]
    t2, t5, t3, t4 = d[2] + d[5], d[2] - d[5], d[3] + d[4], d[3] - d[4]
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    out = [0] * 8
    out[0] = (t10 + t11) << even_shift
    out[4] = (t10 - t11) << even_shift
    z1 = (t12 + t13) * _C["c0541"]
    out[2] = z1 + t13 * _C["c0765"]
    out[6] = z1 - t12 * _C["c1847"]
    z1, z2, z3, z4 = t4 + t7, t5 + t6, t4 + t6, t5 + t7
    z5 = (z3 + z4) * _C["c1175"]
    t4, t5, t6, t7 = t4 * _C["c0298"], t5 * _C["c2053"], t6 * _C["c3072"], t7 * _C["c1501"]
    z1, z2 = -z1 * _C["c0899"], -z2 * _C["c2562"]
    z3, z4 = -z3 * _C["c1961"] + z5, -z4 * _C["c0390"] + z5
    out[7], out[5], out[3], out[1] = t4 + z1 + z3, t5 + z2 + z4, t6 + z2 + z3, t7 + z1 + z4
    return out


def _inverse_1d(c: list[int]) -> list[int]:
    """The LL&M inverse 1-D DCT of jidctint.c before its descaling shift."""
    z1 = (c[2] + c[6]) * _C["c0541"]
    t2, t3 = z1 - c[6] * _C["c1847"], z1 + c[2] * _C["c0765"]
    t0, t1 = (c[0] + c[4]) << _CONST_BITS, (c[0] - c[4]) << _CONST_BITS
    t10, t13, t11, t12 = t0 + t3, t0 - t3, t1 + t2, t1 - t2
    t0, t1, t2, t3 = c[7], c[5], c[3], c[1]
    z1, z2, z3, z4 = t0 + t3, t1 + t2, t0 + t2, t1 + t3
    z5 = (z3 + z4) * _C["c1175"]
    t0, t1, t2, t3 = t0 * _C["c0298"], t1 * _C["c2053"], t2 * _C["c3072"], t3 * _C["c1501"]
    z1, z2 = -z1 * _C["c0899"], -z2 * _C["c2562"]
    z3, z4 = -z3 * _C["c1961"] + z5, -z4 * _C["c0390"] + z5
    t0, t1, t2, t3 = t0 + z1 + z3, t1 + z2 + z4, t2 + z2 + z3, t3 + z1 + z4
    return [t10 + t3, t11 + t2, t12 + t1, t13 + t0, t13 - t0, t12 - t1, t11 - t2, t10 - t3]


def _matrix(transform) -> np.ndarray:
    """A linear integer 1-D transform as its (out, in) integer matrix."""
    return np.array([transform([int(i == k) for i in range(8)]) for k in range(8)], dtype=np.int64).T


# The standard tables (JPEG Annex K), in natural (row-major) order, scaled as jcparam.c does.
_LUMINANCE = (
    16,
    11,
    10,
    16,
    24,
    40,
    51,
    61,
    12,
    12,
    14,
    19,
    26,
    58,
    60,
    55,
    14,
    13,
    16,
    24,
    40,
    57,
    69,
    56,
    14,
    17,
    22,
    29,
    51,
    87,
    80,
    62,
    18,
    22,
    37,
    56,
    68,
    109,
    103,
    77,
    24,
    35,
    55,
    64,
    81,
    104,
    113,
    92,
    49,
    64,
    78,
    87,
    103,
    121,
    120,
    101,
    72,
    92,
    95,
    98,
    112,
    100,
    103,
    99,
)
_CHROMINANCE = (
    (17, 18, 24, 47)
    + (99,) * 4
    + (18, 21, 26, 66)
    + (99,) * 4
    + (24, 26, 56)
    + (99,) * 5
    + (47, 66)
    + (99,) * 6
    + (99,) * 32
)


def _quant_table(base: tuple[int, ...], quality: int) -> np.ndarray:
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return np.array([min(max((b * scale + 50) // 100, 1), 255) for b in base]).reshape(8, 8)


# libjpeg-turbo quantises with a reciprocal multiply (compute_reciprocal: factor, correction and
# shift for the divisor 8 q), which for every 16-bit coefficient and every q in 1..255 equals
# integer division rounding half away from zero: q(t) = sign(t) floor((|t| + 4 q) / (8 q))
# (checked exhaustively in the tests). Here that is round(t (1 + 2^-30) / (8 q)): the
# nudge turns exact halves (which torch.round would send to even) away from zero and moves no
# other value across a rounding boundary (those sit at least 1 / (8 q) >= 2^-11 from one).
_QUANT_NUDGE = 1.0 + 2.0**-30


def supports(height: int, width: int) -> bool:
    """Whether ``roundtrip`` handles this image size (whole 16x16 MCUs)."""
    return height > 0 and width > 0 and height % 16 == 0 and width % 16 == 0


def float32_products_are_exact(device: str) -> bool:
    """Whether float32 matrix products on ``device`` are IEEE float32 right now. False on GPUs
    (TF32 may be on) and on a CPU whose products a user switched to bf16
    (``torch.set_float32_matmul_precision("medium")`` on CPUs with AMX or AVX512-BF16); the
    exact stages then run in float64 instead."""
    if device != "cpu":
        return False
    try:
        if torch.get_float32_matmul_precision() != "highest":
            return False
    except RuntimeError:  # the legacy and the per-backend precision APIs were mixed
        return False
    mkldnn = getattr(getattr(torch.backends, "mkldnn", None), "matmul", None)
    return getattr(mkldnn, "fp32_precision", "none") in ("none", "ieee")


@functools.lru_cache(maxsize=None)
def _constants(quality: int, device: str, height: int, width: int, exact32: bool) -> dict[str, torch.Tensor]:
    single = torch.float32 if exact32 else torch.float64

    def f32(a):
        return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=single, device=device)

    def f64(a):
        return torch.as_tensor(np.asarray(a, dtype=np.float64), dtype=torch.float64, device=device)

    # Both forward passes use the same integer map (DC and AC scaled alike); they differ in
    # the final descaling shift, like the two inverse passes.
    forward = _matrix(_forward_1d)
    inverse = _matrix(_inverse_1d)
    forward1_shift = inverse1_shift = 2.0 ** -(_CONST_BITS - _PASS1_BITS)  # >> 11
    forward2_shift = 2.0 ** -(_CONST_BITS + _PASS1_BITS)  # >> 15
    inverse2_shift = 2.0 ** -(_CONST_BITS + _PASS1_BITS + 3)  # >> 18 (with the 1/8 scale)
    k = {
        # jccolor.c: Y, Cb, Cr from R, G, B in 16-bit fixed point, with its rounding biases
        "to_ycc": f32(
            np.array(
                [
                    [_fix16(0.299), _fix16(0.587), _fix16(0.114)],
                    [-_fix16(0.16874), -_fix16(0.33126), 32768],
                    [32768, -_fix16(0.41869), -_fix16(0.08131)],
                ]
            )
            / 65536
        ),
        "to_ycc_bias": f32(np.array([[32768], [(128 << 16) + 32767], [(128 << 16) + 32767]]) / 65536),
        # forward pass 1 with the level shift in the bias; float32 is exact (|sums| < 2^24)
        "fdct1": f32(forward.T * forward1_shift),
        "fdct1_bias": f32(-128 * forward.sum(1) * forward1_shift + 0.5),
        "fdct2": f64(forward * forward2_shift).unsqueeze(0),
        "idct2": f64(inverse.T * inverse2_shift),
        "idct2_bias": f64(np.full(8, 0.5 + 128)),
        # jdcolor.c: R = Y + 1.402 Cr, G = Y - 0.34414 Cb - 0.71414 Cr, B = Y + 1.772 Cb
        "to_rgb": f32(np.array([[0, _fix16(1.402)], [-_fix16(0.34414), -_fix16(0.71414)], [_fix16(1.772), 0]]) / 65536),
        "identity": f32(np.eye(3)),
    }
    # Dequantisation is a per-(u, v) factor, so it cannot sit in inverse pass 1's left matrix
    # (which mixes u for each v): it is applied with the quantisation.
    for name, base in (("luma", _LUMINANCE), ("chroma", _CHROMINANCE)):
        table = _quant_table(base, quality).astype(np.float64)
        # constants in the (u, 1, v) layout of a (blocks, u, block columns, v) view
        k[name + "_scale"] = f64(_QUANT_NUDGE / (8 * table)).view(8, 1, 8)
        k[name + "_table"] = f64(table).view(8, 1, 8)
    k["idct1"] = f64(inverse * inverse1_shift).unsqueeze(0)
    k["half"] = f64(np.full((1, 1, 1), 0.5))
    # chroma upsampling from (height / 2, width / 2): the >> 4 folded into the column matrix,
    # the biases 8, 7, 8, 7, ... and the -128 centring into one row of biases
    k["up_rows"] = f32(_fancy_upsample_matrix(height // 2))
    k["up_cols"] = f32(_fancy_upsample_matrix(width // 2).T / 16)
    k["up_bias"] = f32(np.tile([8.0, 7.0], width // 2) / 16 - 128).view(1, 1, width)
    return k


def _codec_planes(planes, table: str, k):
    """(n, H, W) float samples 0..255 -> the same samples encoded and decoded (same dtype)."""
    n, h, w = planes.shape
    blocks = n * (h // 8)
    row_len = w  # (block columns, v) after the row passes
    # forward pass 1 along each block row: (n, hb, r, wb, u-of-row)
    t = torch.addmm(k["fdct1_bias"], planes.reshape(-1, 8), k["fdct1"]).floor_()
    t = t.to(torch.float64).view(blocks, 8, row_len)
    # forward pass 2 along r: (blocks, u, wb * v)
    t = torch.baddbmm(k["half"], k["fdct2"].expand(blocks, 8, 8), t).floor_()
    # quantise (round half away from zero) and dequantise, per (u, v)
    t = t.view(blocks, 8, w // 8, 8).mul_(k[table + "_scale"]).round_()
    t = t.mul_(k[table + "_table"]).view(blocks, 8, row_len)
    # inverse pass 1 along u, then pass 2 along v (with the +128 level shift) and range limit
    t = torch.baddbmm(k["half"], k["idct1"].expand(blocks, 8, 8), t).floor_()
    t = torch.addmm(k["idct2_bias"], t.view(-1, 8), k["idct2"]).floor_().clamp_(0, 255)
    return t.to(planes.dtype).view(n, h, w)


def _downsample(planes):
    """jcsample.c h2v2_downsample: (sum of the 2x2 block + bias) >> 2, bias 1, 2, 1, 2, ...
    along each output row."""
    n, h, w = planes.shape
    pairs = planes.view(n, h // 2, 2, w)
    rows = pairs[:, :, 0] + pairs[:, :, 1]
    cols = rows.view(n, h // 2, w // 2, 2)
    out = cols[..., 0] + cols[..., 1]
    out.view(n, h // 2, w // 4, 2).add_(torch.tensor([1.0, 2.0], dtype=planes.dtype, device=planes.device))
    return out.mul_(0.25).floor_()


def _fancy_upsample_matrix(size: int) -> np.ndarray:
    """jdsample.c's triangular filter along one axis, as a (2 size, size) integer matrix:
    output 2i is 3 c[i] + c[i-1], output 2i+1 is 3 c[i] + c[i+1], edges replicated."""
    m = np.zeros((2 * size, size))
    for i in range(size):
        m[2 * i, i] += 3
        m[2 * i, max(i - 1, 0)] += 1
        m[2 * i + 1, i] += 3
        m[2 * i + 1, min(i + 1, size - 1)] += 1
    return m


def _upsample(planes, k):
    """jdsample.c h2v2_fancy_upsample: the vertical then horizontal 3:1 filters in integers,
    then (sum + 8 or 7, alternating along the row) >> 4: one rounding, so two exact products.
    Returns the samples minus 128 (the centred chroma the colour conversion uses)."""
    n, h, w = planes.shape
    across = torch.mm(planes.view(-1, w), k["up_cols"]).view(n, h, 2 * w)
    out = torch.baddbmm(k["up_bias"], k["up_rows"].expand(n, 2 * h, h), across)
    return out.floor_()


# Pixels per chunk: on the CPU, keeps the float64 temporaries in cache (best 64-128 images at
# 32x32); on a GPU, bounds their memory (each float64 plane of a chunk is 128 MB).
_CHUNK_PIXELS = 128 * 32 * 32
_GPU_CHUNK_PIXELS = 1 << 24


def roundtrip(images: torch.Tensor, quality: int) -> torch.Tensor:
    """``images`` (N, H, W, 3) uint8 with H and W multiples of 16 -> the uint8 images Pillow
    gives for ``Image.fromarray(x).save(buf, "JPEG", quality=quality)`` and loading them back."""
    n, h, w, _ = images.shape
    if not supports(h, w):
        raise ValueError(f"tensor JPEG needs sides that are multiples of 16, got {h}x{w}")
    if not 1 <= int(quality) <= 100:
        raise ValueError(f"JPEG quality must be 1..100, got {quality}")
    if images.device.type == "mps":  # no float64 there
        return roundtrip(images.cpu(), quality).to(images.device)
    device = str(images.device)
    k = _constants(int(quality), device, h, w, float32_products_are_exact(device))
    per_chunk = _CHUNK_PIXELS if images.device.type == "cpu" else _GPU_CHUNK_PIXELS
    chunk = max(1, per_chunk // (h * w))
    out = torch.empty_like(images)
    for start in range(0, n, chunk):
        # through int16: torch's float -> uint8 conversion is not vectorised on CPU
        out[start : start + chunk].copy_(_roundtrip_chunk(images[start : start + chunk], k).to(torch.int16))
    return out


def _roundtrip_chunk(images, k):
    n, h, w, _ = images.shape
    dtype = k["to_ycc"].dtype
    # converted in the (pixels, 3) layout and read transposed by the product (BLAS takes the
    # transpose for free; a planar copy first is a slow strided copy)
    rgb = images.reshape(-1, 3).to(dtype)
    ycc = torch.addmm(k["to_ycc_bias"], k["to_ycc"], rgb.t()).floor_().view(3, n, h, w)
    luma = _codec_planes(ycc[0], "luma", k)
    chroma = _downsample(ycc[1:].reshape(2 * n, h, w))
    chroma = _upsample(_codec_planes(chroma, "chroma", k), k)  # (2n, h, w): Cb then Cr, centred
    # R, G, B offsets from Cb, Cr in one product; (offset + 32768) >> 16 + Y is
    # floor(offset + Y + 0.5) as Y is an integer; then the range limit. Offsets are multiples of
    # 2^-16 below 2^8 in magnitude, so the float32 sum is exact wherever it is below 256; above,
    # it may round, but those values are clamped to 255 either way.
    planar = torch.mm(k["to_rgb"], chroma.view(2, -1)).add_(luma.view(1, -1).add_(0.5))
    planar = planar.floor_().clamp_(0, 255)
    # Pixel-interleaved by a product with the identity into a transposed output: BLAS writes
    # the transpose for free, far faster than torch's strided copy (exact: one term each).
    rgb = torch.empty(n, h, w, 3, dtype=dtype, device=images.device)
    torch.mm(k["identity"], planar, out=rgb.view(-1, 3).t())
    return rgb


def jpeg_compression(img: torch.Tensor, quality: int, gen: torch.Generator) -> torch.Tensor:
    """The jpeg_compression corruption: Pillow JPEG encode at ``quality`` (other settings
    default) and decode, through ``roundtrip`` (bit-identical) when the sides are multiples of
    16, else through Pillow itself, one image at a time on the CPU. On the CPU, images larger
    than 32x32 go through Pillow too: libjpeg-turbo's SIMD code is several times faster there
    (measured 6x at 224x224), with the same bytes."""
    h, w = img.shape[1], img.shape[2]
    if supports(h, w) and (img.device.type != "cpu" or h * w <= 1024):
        return roundtrip(img, quality)
    arr = img.cpu().numpy()
    out = np.empty_like(arr)
    for i in range(arr.shape[0]):
        buf = io.BytesIO()
        Image.fromarray(arr[i]).save(buf, format="JPEG", quality=quality)
        buf.seek(0)
        with Image.open(buf) as decoded:
            out[i] = np.asarray(decoded if decoded.mode == "RGB" else decoded.convert("RGB"))
    return torch.from_numpy(out).to(img.device)
