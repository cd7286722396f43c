"""Digital corruptions: contrast, elastic_transform, pixelate and saturate, and brightness (a
weather corruption that shares saturate's HSV model). jpeg_compression lives in ``jpeg``."""

from __future__ import annotations

import functools

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from macs_audit.views.corruptions.ops import gaussian, to_uint8, to_uint8_same_layout, unit
from macs_audit.views.corruptions.randomness import uniform, uniform16
from macs_audit.views.corruptions.table import ParameterSet


@functools.lru_cache(maxsize=None)
def _brightness_lut(c: float) -> tuple[float, ...]:
    """The reference's float64 floor(clip(k/255 + c, 0, 1) * 255) for each grey level k: an
    exact integer in exact arithmetic whenever 255 c is one (c = 0.2), where float64 rounding
    decides the floor (18 of the 256 levels land one below)."""
    v = np.clip(np.arange(256) / 255.0 + c, 0, 1)
    return tuple((v * 255).astype(np.uint8).astype(np.float32).tolist())


def brightness(img: torch.Tensor, c: float, gen: torch.Generator) -> torch.Tensor:
    """scikit-image HSV with V <- clip(V + c). With hue and saturation fixed every channel
    scales with V: out = x V'/V. Channels equal to V (all of them for grey pixels) become V'
    itself, taken from the reference's float64 values; the others agree with scikit-image
    except on rare float ties (under 0.4% of values, 1 grey level, checked against 0.26)."""
    x = img.float()  # 0..255, (N, H, W, 3)
    v = x.amax(dim=-1, keepdim=True)
    is_max = x == v
    lut = torch.tensor(_brightness_lut(float(c)), device=img.device)
    # in place (no fresh 12 MB buffers); 0/0 only where x == v, which takes the table's value
    scaled = x.mul_((v + 255.0 * c).clamp_(max=255.0) / v)
    return to_uint8_same_layout(torch.where(is_max, lut[v.long()], scaled, out=scaled))


def contrast(img: torch.Tensor, c: float, gen: torch.Generator) -> torch.Tensor:
    """(x - m) c + m with m the mean of each image and channel, as c x + (1 - c) m."""
    n, h, w, channels = img.shape
    if img.device.type == "cpu" and h * w > 1024:
        return _contrast_tables(img, c)
    if img.device.type != "cpu":  # one fused pass; a GPU reduces and broadcasts fast
        x = img.float()
        means = x.view(n, h * w, channels).mean(1).view(n, 1, 1, channels)
        return to_uint8_same_layout(torch.add(means * (1 - c), x, alpha=c).clamp_(0, 255))
    # On the CPU a reduction and a broadcast over a 3-wide axis are slow: the channel sums are
    # one product with a 0/1 matrix and c x + (1 - c) m a second product that writes the
    # result, piecewise so the temporaries stay in cache. The sums (up to 32x32 here) are
    # integers below 2^24: exact in float32, like torch.mean's (corrupt() keeps the products
    # IEEE float32 whatever the user's matmul precision).
    pick = torch.eye(channels).repeat(h * w, 1)  # (h w channels, channels)
    spread = pick.t() * ((1 - c) / (h * w))  # channel sums -> (1 - c) m at every position
    piece = max(1, _CONTRAST_PIECE // (h * w * channels))
    out = torch.empty_like(img)
    for start in range(0, n, piece):
        x = img[start : start + piece].reshape(-1, h * w * channels).float()  # 0..255
        y = torch.addmm(x, torch.mm(x, pick), spread, beta=c)
        out[start : start + piece] = to_uint8_same_layout(y.clamp_(0, 255)).view(-1, h, w, channels)
    return out


_CONTRAST_PIECE = 1 << 18  # elements


def _contrast_tables(img: torch.Tensor, c: float) -> torch.Tensor:
    """``contrast`` on the CPU for images larger than 32x32: each image's channel means from exact
    integer sums, then the reference's float64 formula for each of the 256 levels of each channel
    (a 768-entry table per image) and one gather per image (4x fewer passes over the pixels than
    the float product form; the table's values are the reference's own, up to the rounding of
    the mean)."""
    n, h, w, channels = img.shape
    pixels = img.numpy().reshape(n, -1)
    # channel sums: column sums of rows of 64 pixels (vectorised), folded to the channels
    group = 64 if (h * w) % 64 == 0 else 1
    sums = pixels.reshape(n, -1, group * channels).sum(axis=1, dtype=np.uint32)  # exact below 2^24 rows
    sums = sums.reshape(n, group, channels).sum(axis=1, dtype=np.int64)
    means = sums / 255.0 / (h * w)  # (N, C): the mean of x / 255
    levels = np.arange(256) / 255.0
    lut = np.clip((levels - means[:, :, None]) * c + means[:, :, None], 0, 1) * 255
    tables = torch.from_numpy(lut.astype(np.uint8).reshape(n, channels * 256))
    # table index of every value: its level plus 256 x its channel
    offsets = torch.arange(channels, dtype=torch.int32).mul_(256).repeat(h * w)
    index = torch.empty_like(offsets)
    flat, out = img.reshape(n, -1), torch.empty((n, h * w * channels), dtype=torch.uint8)
    for i in range(n):
        torch.add(offsets, flat[i], out=index)
        torch.index_select(tables[i], 0, index, out=out[i])
    return out.view(img.shape)


def elastic_transform(img: torch.Tensor, param, gen: torch.Generator, pset: ParameterSet) -> torch.Tensor:
    """(1) cv2.warpAffine by a random affine map of three jittered anchor points, then (2)
    scipy map_coordinates at (row + dy, col + dx) with Gaussian-smoothed uniform noise fields.
    The parameters are fractions of the set's elastic length (32, 64, 244), scaled with the
    image's shorter side."""
    # grid_sample reads a channels-last batch as fast as a contiguous one: no transposing copy
    x = unit(img).permute(0, 3, 1, 2)
    n, _, h, w = x.shape
    length = min(h, w) * pset.elastic_length / pset.size  # exact at the set's side (244.0 at 224)
    alpha, sigma, affine = (p * length for p in param)
    dev = x.device
    cx, cy, s = w // 2, h // 2, min(h, w) // 3
    src = torch.tensor(
        [[cx + s, cy + s], [cx + s, cy - s], [cx - s, cy - s]], dtype=torch.float64, device=dev
    )  # (x, y) anchor points
    dst = src + uniform((n, 3, 2), -affine, affine, gen, dev).double()
    # warpAffine samples the source at M^-1(dst pixel): solve T with [dst_k, 1] @ T = src_k
    ones = torch.ones((n, 3, 1), dtype=torch.float64, device=dev)
    x = warp_affine(x, torch.linalg.solve(torch.cat([dst, ones], dim=2), src.expand(n, 3, 2)))
    if alpha > 0:  # severity 1 has alpha 0: affine only
        noise = uniform16((n, 2, h, w), -1.0, 1.0, gen, dev)  # dx field, then dy field
        disp = gaussian(noise, sigma, mode="reflect", truncate=3.0)
        x = displace(x, disp, alpha)
    return to_uint8(x)


def warp_affine(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """cv2.warpAffine(INTER_LINEAR, BORDER_REFLECT_101) given the inverse map: output pixel
    (col, row) samples the source at [col, row, 1] @ t[n], t of shape (N, 3, 2), (x, y) order.
    grid_sample's reflection about the first and last pixel centres (align_corners) is
    REFLECT_101 for bilinear taps. The map to grid_sample's [-1, 1] coordinates is folded into
    t. The grid is separable, (col t0 + row t1 + t2 - 1) per coordinate: a per-image column
    term plus a per-image row term, one broadcast sum (a batched product of 1024 x 3 by 3 x 2
    per image costs several times more)."""
    n, _, h, w = x.shape
    t = t.double() * torch.tensor([2.0 / (w - 1), 2.0 / (h - 1)], dtype=torch.float64, device=x.device)
    t = t.transpose(1, 2)  # (N, 2 coordinates, 3 coefficients)
    cols = torch.arange(w, dtype=torch.float64, device=x.device) * t[:, :, 0:1]  # (N, 2, W)
    rows = torch.arange(h, dtype=torch.float64, device=x.device) * t[:, :, 1:2]  # (N, 2, H)
    rows = rows.add_(t[:, :, 2:3] - 1).to(x.dtype)
    grid = torch.add(rows.unsqueeze(3), cols.to(x.dtype).unsqueeze(2))  # (N, 2, H, W)
    return F.grid_sample(x, grid.permute(0, 2, 3, 1), mode="bilinear", padding_mode="reflection", align_corners=True)


def displace(x: torch.Tensor, disp: torch.Tensor, alpha: float) -> torch.Tensor:
    """scipy.ndimage.map_coordinates(order=1, mode='reflect') of every channel at
    (row + alpha dy, col + alpha dx), disp of shape (N, 2, H, W) holding (dx, dy). SciPy's
    'reflect' is half-sample symmetric: grid_sample's reflection about the image edges (no
    align_corners) followed by clamping to the pixel centres. Overwrites disp."""
    h, w = x.shape[-2:]
    # grid = (2 (pos + alpha d) + 1) / size - 1 per coordinate plane, handed to grid_sample as
    # a (N, H, W, 2) view (it reads the strided grid as fast as a contiguous one)
    cols = torch.arange(w, dtype=x.dtype, device=x.device).mul_(2).add_(1).div_(w).sub_(1)
    rows = torch.arange(h, dtype=x.dtype, device=x.device).mul_(2).add_(1).div_(h).sub_(1)
    disp[:, 0].mul_(2 * alpha / w).add_(cols)
    disp[:, 1].mul_(2 * alpha / h).add_(rows.unsqueeze(1))
    return F.grid_sample(x, disp.permute(0, 2, 3, 1), mode="bilinear", padding_mode="reflection", align_corners=False)


@functools.lru_cache(maxsize=None)
def _pil_box_members(in_size: int, out_size: int) -> np.ndarray:
    """Pillow's BOX resampling of one axis as an (out, in) 0/1 membership matrix.

    Pillow's box filter is point-sampled: output i averages, with equal weights, the inputs
    whose centres fall in its box [i, i + 1) * in / out (for upscaling: the one nearest input).
    """
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = 0.5 * filterscale
    member = np.zeros((out_size, in_size), dtype=np.float32)
    for i in range(out_size):
        center = (i + 0.5) * scale
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        pos = (np.arange(lo, hi) - center + 0.5) / filterscale
        member[i, lo:hi] = (pos > -0.5) & (pos <= 0.5)
    return member


@functools.lru_cache(maxsize=None)
def _pixelate_pairs(size: int, c: float) -> tuple[np.ndarray, np.ndarray]:
    """Pixelate along one axis as a rounded pair average: for each output position, the first
    and last input of the box it is copied back from.

    Down to int(size c) and back with c in (1/2, 1] (all CIFAR severities), each box averages one
    or two inputs and every upscaled output copies one box. Pillow stores a one-input weight as
    2^22 and a two-input weight as 2^21 (22-bit fixed point), so a pass is (a + b + 1) >> 1 with
    b = a for one input, exactly; the copy-back commutes with the other axis's pass."""
    down = int(size * c)
    if not size <= 2 * down <= 2 * size:
        raise ValueError(f"pixelate factor {c} at size {size} is outside [1/2, 1]")
    member = _pil_box_members(size, down)  # boxes of one or two pixels: width size / down <= 2
    up_member = _pil_box_members(down, size)  # upscaling: one box per pixel
    up = up_member.argmax(axis=1)
    first = member.argmax(axis=1)
    last = member.shape[1] - 1 - member[:, ::-1].argmax(axis=1)
    return first[up], last[up]


def _round_up_mean(a, b, out=None):
    """(a + b + 1) >> 1 on uint8 without widening: (a | b) - ((a ^ b) >> 1), into ``out`` if
    given."""
    return torch.bitwise_or(a, b, out=out).sub_((a ^ b).bitwise_right_shift_(1))


def pixelate(img: torch.Tensor, c: float, gen: torch.Generator) -> torch.Tensor:
    """PIL resize(BOX) to int(size * c), then resize(BOX) back (Pillow: horizontal pass, then
    vertical, uint8 after each): for c in [1/2, 1] as uint8 gathers and rounded averages, for
    smaller c (boxes of more than two pixels) as Pillow's fixed-point box sums."""
    n, h, w, _ = img.shape
    if img.device.type == "cpu" and h * w > 1024:  # Pillow's own resize is faster there (4x at 224 px)
        return _pixelate_pillow(img, float(c))
    if not all(size <= 2 * int(size * c) for size in (h, w)):
        return _pixelate_boxes(img, float(c))
    if img.device.type == "cpu":
        return _pixelate_cpu(img, float(c))
    return _pixelate_gathered(img, float(c))


def _pixelate_pillow(img: torch.Tensor, c: float) -> torch.Tensor:
    """``pixelate`` through Pillow, image by image (CPU tensors)."""
    n, h, w, _ = img.shape
    down = (int(w * c), int(h * c))
    # enlarging, BOX copies one pixel per output: NEAREST's, unless the two round a boundary
    # differently (a few size pairs); NEAREST is 6x cheaper
    same = _nearest_enlarges_as_box(down[0], w) and _nearest_enlarges_as_box(down[1], h)
    up = Image.Resampling.NEAREST if same else Image.Resampling.BOX
    out = np.empty((n, h, w, 3), dtype=np.uint8)
    for i, image in enumerate(img.numpy()):
        small = Image.fromarray(image).resize(down, Image.Resampling.BOX)
        out[i] = np.asarray(small.resize((w, h), up))
    return torch.from_numpy(out)


@functools.lru_cache(maxsize=None)
def _nearest_enlarges_as_box(in_size: int, out_size: int) -> bool:
    """Whether Pillow's NEAREST enlargement of an axis from in_size to out_size picks the pixel
    its BOX enlargement copies, for every output (read from an image of pixel indices)."""
    indices = Image.fromarray(np.arange(in_size, dtype=np.int32)[None, :])
    nearest = np.asarray(indices.resize((out_size, 1), Image.Resampling.NEAREST))[0]
    return bool(np.array_equal(nearest, _pil_box_members(in_size, out_size).argmax(axis=1)))


_PRECISION_BITS = 22  # Pillow's fixed-point resampling weights for 8-bit images


@functools.lru_cache(maxsize=None)
def _box_plan(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One axis of Pillow's BOX resize: each output's box as a range [first, last) of inputs, and
    its weight per member in Pillow's 22-bit fixed point, int(2^22 / members + 1/2)."""
    member = _pil_box_members(in_size, out_size)
    first = member.argmax(axis=1)
    last = first + member.sum(axis=1).astype(np.int64)  # Pillow's boxes are contiguous
    weight = np.floor(0.5 + (1.0 / (last - first)) * (1 << _PRECISION_BITS)).astype(np.int64)
    return first, last, weight


def _box_resize(x: torch.Tensor, axis: int, size: int) -> torch.Tensor:
    """Pillow's 8-bit BOX pass along axis 1 (rows) or 2 (columns) of uint8 (N, H, W, C):
    (2^21 + weight * sum of the box's members) >> 22, clipped. Box sums are differences of a
    running sum (exact in int32); one-member boxes (all of them when enlarging: weight 2^22) are
    copies."""
    first, last, weight = (torch.as_tensor(a, device=x.device) for a in _box_plan(x.shape[axis], size))
    if bool((last - first == 1).all()):
        return x.index_select(axis, first)
    running = torch.cumsum(x, dim=axis, dtype=torch.int32)
    running = torch.cat([torch.zeros_like(running.narrow(axis, 0, 1)), running], dim=axis)
    sums = running.index_select(axis, last) - running.index_select(axis, first)
    shape = [1, 1, 1, 1]
    shape[axis] = size
    levels = sums.to(torch.int64).mul_(weight.view(shape)).add_(1 << (_PRECISION_BITS - 1))
    return levels.bitwise_right_shift_(_PRECISION_BITS).clamp_(0, 255).to(torch.uint8)


def _pixelate_boxes(img: torch.Tensor, c: float) -> torch.Tensor:
    """``pixelate`` for any c: two Pillow resizes, each horizontal then vertical."""
    n, h, w, _ = img.shape
    small = _box_resize(_box_resize(img, 2, int(w * c)), 1, int(h * c))
    return _box_resize(_box_resize(small, 2, w), 1, h)


def _pixelate_gathered(img: torch.Tensor, c: float) -> torch.Tensor:
    """``pixelate`` as two gathers and a rounded mean per axis (fast on GPUs)."""
    n, h, w, _ = img.shape
    ca, cb = (torch.as_tensor(i, device=img.device) for i in _pixelate_pairs(w, c))
    ra, rb = (torch.as_tensor(i, device=img.device) for i in _pixelate_pairs(h, c))
    x = _round_up_mean(img.index_select(2, ca), img.index_select(2, cb))
    return _round_up_mean(x.index_select(1, ra), x.index_select(1, rb))


# Pixels per chunk of the CPU pixelate (128 CIFAR images): its two working buffers (1.5 MB)
# stay in cache.
_PIXELATE_CHUNK_PIXELS = 128 * 32 * 32


def _pixelate_cpu(img: torch.Tensor, c: float) -> torch.Tensor:
    """``pixelate`` with one gather per axis, for the CPU, where torch gathers 3-byte pixels one
    memcpy at a time (9 ms per 1,000 CIFAR images per gather). Each pass first appends the rounded
    mean of every value and its right (or lower) neighbour, computed on the flat bytes, then
    picks each output from the originals or the means: columns with numpy's take on a 3-byte
    item view (3 ms), rows with index_select on whole rows. Same bytes as the generic path."""
    n, h, w, _ = img.shape
    row_bytes = 3 * w
    chunk = max(1, _PIXELATE_CHUNK_PIXELS // (h * w))
    out = torch.empty_like(img)
    pixels = torch.empty(2 * min(chunk, n) * h * row_bytes, dtype=torch.uint8)
    columns = torch.empty_like(pixels)
    for start in range(0, n, chunk):
        part = img[start : start + chunk]
        m, size = part.shape[0], part.numel()
        pixels[:size].view(part.shape).copy_(part)
        _append_neighbour_means(pixels, size, 3)
        np.take(
            pixels[: 2 * size].numpy().view("V3"),
            _pixelate_sources(m * h, w, c),
            out=columns[:size].numpy().view("V3"),
            mode="clip",
        )
        _append_neighbour_means(columns, size, row_bytes)
        torch.index_select(
            columns[: 2 * size].view(2 * m * h, row_bytes),
            0,
            torch.from_numpy(_pixelate_sources(m, h, c)),
            out=out[start : start + m].view(m * h, row_bytes),
        )
    return out


def _append_neighbour_means(buffer, size: int, step: int):
    """buffer[size + i] = _round_up_mean(buffer[i], buffer[i + step]) for i < size - step, the
    means of the first ``size`` values and their neighbours ``step`` on (the last ``step``
    places, without a neighbour, are left unset and never read)."""
    _round_up_mean(buffer[: size - step], buffer[step:size], out=buffer[size : 2 * size - step])


@functools.lru_cache(maxsize=32)
def _pixelate_sources(lines: int, size: int, c: float) -> np.ndarray:
    """For ``lines`` lines of ``size`` inputs followed by the ``lines`` lines of their means
    (place i of a means line: the mean of inputs i and i + 1), the flat index of each output's
    source: a line's outputs take their own line's inputs or means."""
    first, last = _pixelate_pairs(size, c)
    src = np.where(last > first, lines * size + first, first)  # a mean: a whole block further on
    return (np.arange(lines)[:, None] * size + src).reshape(-1)


def saturate(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    """scikit-image rgb2hsv, S <- clip(S mult + add), hsv2rgb: the same float64 values, so the
    result is bit-identical to scikit-image's (checked against 0.26 on every tie pattern and 1.5
    M random pixels). Many outputs here are exact integers in exact arithmetic (e.g.
    V - 1.5 (V - x) at severity 3), where only the float64 rounding decides the floor; a cheaper
    algebraic form gets 8% of values 1 grey level brighter."""
    # Chunks of pixels keep the float64 temporaries in the core's cache (about 2x faster on CPU);
    # a GPU takes the batch at once (chunks there only add kernel launches).
    pixels = img.reshape(-1, 3)
    out = torch.empty_like(pixels)
    chunk = _SATURATE_CHUNK if img.device.type == "cpu" else max(len(pixels), 1)
    scaled = torch.empty(min(chunk, len(pixels)), dtype=torch.float64, device=img.device)
    for start in range(0, len(pixels), chunk):
        rgb = _saturate_planes(pixels[start : start + chunk], param)
        target = out[start : start + chunk]
        for c in range(3):  # x 255 and back to (P, 3) plane by plane: 2.7x faster than a 3x3 product
            target[:, c] = torch.mul(rgb[c], 255.0, out=scaled[: len(target)]).to(torch.int16)  # truncates
    return out.view(img.shape)


_SATURATE_CHUNK = 1 << 15


# Per channel (r, g, b), (start, end): K's rising ramp is h6 - start, its falling ramp end - h6.
# K is the clamped minimum of the two for r (a plateau between them), the clamped maximum for
# g and b (a valley).
_HUE_RAMPS = ((1.0, 5.0), (3.0, 1.0), (5.0, 3.0))


def _saturate_planes(pixels: torch.Tensor, param) -> torch.Tensor:
    """(P, 3) uint8 -> (3, P) float64 planes of the result in [0, 1] (before x 255).

    Every value is computed as scikit-image computes it, or by an operation that rounds the same
    real number once (so gives the same float64). No torch.where: on CPU it runs a branch per
    value, mispredicted on image data; selections are lerps with 0/1 weights (exact for finite
    ends) and min / max / clamp."""
    mult, add = param
    # Divisions by one-element tensors, not Python numbers: CUDA turns x / number into
    # x * (1 / number), which rounds differently (k / 255 for 24 of the 256 levels k).
    x = pixels.t().to(torch.float64, memory_format=torch.contiguous_format)
    x = x.div_(_constant(255.0, x))
    r, g, b = x
    v = torch.maximum(torch.maximum(r, g), b)
    delta = v - torch.minimum(torch.minimum(r, g), b)
    # Grey pixels (delta 0) get s = h = 0 in scikit-image. Here they are the NaNs of 0 / 0 (in
    # s where v = 0 too; in numerator / delta the numerator is 0 there), and only they: delta
    # <= v and |numerator| <= delta. nan_to_num sets exactly those to 0.
    s = torch.div(delta, v).nan_to_num_(0.0)
    # The last maximal channel sets the hue: numerator and offset of r, overridden by g's where
    # g is maximal, by b's where b is.
    b_max = torch.eq(b, v, out=torch.empty_like(v))
    g_max = torch.eq(g, v, out=torch.empty_like(v))
    numerator = torch.lerp(torch.lerp(g - b, b - r, g_max), r - g, b_max)
    offset = torch.lerp(g_max.mul_(2.0), _constant(4.0, v), b_max)
    h = numerator.div_(delta).add_(offset).div_(_constant(6.0, v))  # offset + y: the same sum
    # h % 1 for h in [-1/6, 5/6]: numpy's remainder adds 1 to a negative h, adding 0 is exact
    h = h.add_(torch.lt(h, 0, out=b_max)).nan_to_num_(0.0)
    s = s.mul_(mult).add_(add).clamp_(0, 1)
    h6 = h.mul_(6.0)
    # hsv2rgb picks, per hue sector i = floor(h6) with f = h6 - i, each channel among v,
    # p = v (1 - s), q = v (1 - f s) (odd sectors) and t = v (1 - (1 - f) s) (even): v (1 - K s)
    # with K = 0, 1, f or 1 - f. K per channel is a clamped hue ramp, whose rising part h6 - i
    # is f and falling part (i + 1) - h6 is 1 - f, each one rounding of the same real number.
    # Sector 6 (h6 rounding up to 6.0) acts as sector 0 with f = 0, as "% 6" makes it.
    up, down = torch.empty_like(x), torch.empty_like(x)
    neg_h6 = h6.neg()
    for c, (start, end) in enumerate(_HUE_RAMPS):  # by rows: broadcast columns are slow on CPU
        torch.sub(h6, start, out=up[c])
        torch.add(neg_h6, end, out=down[c])
    k = torch.maximum(up, down)  # g: t, v, v, q, p, p; b: p, p, t, v, v, q
    torch.minimum(up[0], down[0], out=k[0])  # r: v, q, p, p, t, v
    # v (1 - K s) as v (1 + K (-s)), in [0, 1]: K = 0 gives v and K = 1 gives p exactly
    return k.clamp_(0, 1).mul_(s.neg_()).add_(1).mul_(v)


def _constant(value: float, like: torch.Tensor) -> torch.Tensor:
    """A one-element tensor that broadcasts against ``like``."""
    return torch.full((1,), value, dtype=like.dtype, device=like.device)
