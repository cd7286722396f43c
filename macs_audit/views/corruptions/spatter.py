"""The spatter corruption (water or mud) and the OpenCV operations its water layer needs: Canny,
the 5x5 chamfer distance transform and equalizeHist, re-implemented from OpenCV's definitions."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from macs_audit.views.corruptions.ops import box3, filter2d, gaussian, to_float, to_uint8, zero_below

# Images per Canny chunk on the CPU: its many full-size temporaries then stay in cache.
_CANNY_CHUNK = 128


def spatter(img: torch.Tensor, param, gen: torch.Generator) -> torch.Tensor:
    loc, scale, sigma, threshold, intensity, mode = param
    x = to_float(img)
    n, _, h, w = x.shape
    liquid = torch.randn((n, 1, h, w), generator=gen, device=x.device).mul_(scale).add_(loc)
    liquid = gaussian(liquid, sigma)
    liquid = zero_below(liquid, threshold)
    # the blends below work in place, channel by channel: a (N, 1) layer broadcast over the
    # (N, 3) image would cost fresh 12 MB buffers (page faults on CPU)
    if mode == 0:  # water
        colour = torch.tensor([175, 238, 238], device=x.device) / 255.0
        m = _water_mask(liquid, intensity)[:, 0]
        for c in range(3):
            x[:, c].add_(m * colour[c])
        return to_uint8(x)
    # mud
    m = gaussian((liquid > threshold).float(), intensity)
    m = zero_below(m, 0.8)[:, 0]
    colour = torch.tensor([63, 42, 20], device=x.device) / 255.0
    kept = 1 - m
    for c in range(3):
        x[:, c].mul_(kept).add_(m * colour[c])
    return to_uint8(x)


def _water_mask(liquid: torch.Tensor, intensity: float) -> torch.Tensor:
    """Spatter's water layer: uint8 liquid -> Canny(50, 150) -> inverted -> 5x5 chamfer L2
    distance -> truncate 20 -> 3x3 blur -> uint8 -> equalizeHist -> emboss (8-bit) -> 3x3 blur
    (8-bit) -> times the liquid, each image divided by its max, times ``intensity``."""
    liquid8 = liquid.clamp(0, 1).mul_(255).floor_()
    dist = chamfer_distance(canny(liquid8, 50, 150), cap=20.0)
    dist = box3(dist).floor_()  # float blur, then astype(uint8)
    dist = equalize_hist(dist)
    emboss = ((-2.0, -1.0, 0.0), (-1.0, 1.0, 1.0), (0.0, 1.0, 2.0))
    dist = filter2d(dist, emboss, "mirror").round_().clamp_(0, 255)  # integer sums: exact
    dist = box3(dist).round_()  # uint8 blur rounds to nearest
    m = liquid8 * dist
    peak = m.amax(dim=(1, 2, 3), keepdim=True)
    # m >= 0: where the peak is 0, m is all 0 and 0 / 1e-12 leaves it so (no where needed)
    return m.div_(peak.clamp(min=1e-12)).mul_(intensity)


def canny(img: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """cv2.Canny (``_canny_images``) in chunks of images on the CPU: its many full-size
    temporaries then stay in cache (about 1.3x faster)."""
    if img.device.type != "cpu" or len(img) <= _CANNY_CHUNK:
        return _canny_images(img, low, high)
    return torch.cat([_canny_images(img[i : i + _CANNY_CHUNK], low, high) for i in range(0, len(img), _CANNY_CHUNK)])


def _canny_images(img: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """cv2.Canny(img, low, high) (aperture 3, L1 gradient) on (N, 1, H, W) values 0..255.

    Returns a bool edge map (N, 1, H, W). Sobel with replicated borders; OpenCV's non-maximum
    suppression (sector tests in 15-bit fixed point, '>' before and '>=' after along the
    gradient, both '>' on diagonals, magnitude 0 outside the image); hysteresis as repeated
    3x3 dilation of the strong edges inside the candidates (8-connectivity).
    """
    x = img[:, 0]
    h, w = x.shape[-2:]
    # Sobel sums are integers below 1024: float32 then rounding is exact. Below, every product
    # stays under 2^31, so int32 is exact too.
    dx = filter2d(x, ((-1.0, 0.0, 1.0), (-2.0, 0.0, 2.0), (-1.0, 0.0, 1.0)), "nearest")
    dy = filter2d(x, ((-1.0, -2.0, -1.0), (0.0, 0.0, 0.0), (1.0, 2.0, 1.0)), "nearest")
    dx = dx.round_().to(torch.int32)
    dy = dy.round_().to(torch.int32)
    ax, ay = dx.abs(), dy.abs()
    mag = ax + ay
    mp = F.pad(mag, (1, 1, 1, 1))

    def at(di, dj):
        return mp[:, 1 + di : 1 + di + h, 1 + dj : 1 + dj + w]

    tg22 = ax * 13573  # int(tan(22.5 deg) * 2^15 + 0.5)
    ay = ay * 32768
    horizontal = ay < tg22
    vertical = ~horizontal & (ay > tg22 + ax * 65536)
    diagonal = ~(horizontal | vertical)
    same_sign = (dx < 0) == (dy < 0)
    diag_ok = (same_sign & (mag > at(-1, -1)) & (mag > at(1, 1))) | (~same_sign & (mag > at(-1, 1)) & (mag > at(1, -1)))
    is_max = (
        (horizontal & (mag > at(0, -1)) & (mag >= at(0, 1)))
        | (vertical & (mag > at(-1, 0)) & (mag >= at(1, 0)))
        | (diagonal & diag_ok)
    )
    candidate = (mag > math.floor(low)) & is_max
    edges = candidate & (mag > math.floor(high))
    for _ in range(h * w):
        p = F.pad(edges.to(torch.uint8), (1, 1, 1, 1)).bool()
        grown = p[:, :, :-2] | p[:, :, 1:-1] | p[:, :, 2:]
        grown = (grown[:, :-2] | grown[:, 1:-1] | grown[:, 2:]) & candidate
        if torch.equal(grown, edges):
            break
        edges = grown
    return edges[:, None]


def chamfer_distance(edges: torch.Tensor, cap: float) -> torch.Tensor:
    """cv2.distanceTransform(255 - edges, DIST_L2, 5), capped at ``cap``: distance to the
    nearest edge pixel under the 5x5 chamfer metric (steps 1, 1.4, 2.1969, in OpenCV's 16-bit
    fixed point). OpenCV's two raster passes, vectorised over images and columns: each row
    takes the causal mask's contributions from the two rows before it, then the in-row
    recursion d[j] = min(d[j], d[j-1] + a) is a*j + cummin(d[k] - a*k).

    The scans run on a (H, W + 4, N) layout, images innermost: a row and its shifted
    neighbours are then contiguous blocks, and the two columns of padding on each side hold
    the out-of-image value. Every value is an integer below 2^24, exact in float32, so taking
    a minimum before adding a common step cost is the same as after."""
    a, b, c = 65536.0, 91750.0, 143976.0  # round(65536 * (1, 1.4, 2.1969))
    big = cap * 65536.0
    n, _, h, w = edges.shape
    d = torch.full((h, w + 4, n), big, dtype=torch.float32, device=edges.device)
    inside = d[:, 2 : w + 2]
    inside.copy_(edges[:, 0].permute(1, 2, 0)).neg_().add_(1).mul_(big)  # 0 on edges, big elsewhere
    ramp = (torch.arange(w, dtype=torch.float32, device=d.device) * a)[:, None]

    def scan(d):
        for i in range(h):
            row = d[i, 2 : w + 2]
            if i >= 1:
                prev = d[i - 1]  # columns j - 2 .. j + 2 of the row above: prev[j .. j + 4]
                row = torch.minimum(row, prev[2 : w + 2] + a)
                row = torch.minimum(row, torch.minimum(prev[1 : w + 1], prev[3 : w + 3]).add_(b))
                row = torch.minimum(row, torch.minimum(prev[0:w], prev[4 : w + 4]).add_(c))
            if i >= 2:
                prev2 = d[i - 2]
                row = torch.minimum(row, torch.minimum(prev2[1 : w + 1], prev2[3 : w + 3]).add_(c))
            d[i, 2 : w + 2] = torch.cummin(row - ramp, dim=0).values.add_(ramp)
        return d

    def mirrored(d):  # d.flip(0, 1), as the (H (W + 4)) rows of N values in reverse order
        rows = d.view(h * (w + 4), n)
        reverse = torch.arange(len(rows) - 1, -1, -1, device=d.device)
        return rows.index_select(0, reverse).view(h, w + 4, n)  # whole rows: block copies

    d = scan(d)  # forward: top-left to bottom-right
    d = mirrored(scan(mirrored(d)))  # backward: the mirrored mask
    return d[:, 2 : w + 2].clamp_(max=big).div_(65536.0).permute(2, 0, 1)[:, None]


def equalize_hist(x: torch.Tensor) -> torch.Tensor:
    """cv2.equalizeHist per image on (N, 1, H, W) integer values 0..255 (float)."""
    n = x.shape[0]
    levels = x.reshape(n, -1).to(torch.int32, copy=True)
    total = levels.shape[1]
    # one histogram for the batch: level v of image i counts in bin 256 i + v
    keys = levels.add_((torch.arange(n, dtype=torch.int32, device=x.device) * 256)[:, None]).view(-1)
    hist = torch.bincount(keys, minlength=256 * n).view(n, 256)
    first = (hist > 0).long().argmax(dim=1, keepdim=True)
    h0 = hist.gather(1, first)
    cdf = hist.cumsum(1)
    denom = (total - h0).clamp(min=1).float()
    lut = ((cdf - h0).float() * (255.0 / denom)).round_().clamp_(0, 255)
    lut = torch.where(h0 == total, torch.arange(256, device=x.device).float().expand(n, 256), lut)
    return lut.view(-1).index_select(0, keys).view(x.shape)
