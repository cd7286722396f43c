"""Floors of the 224 px corruptions that miss 10x imagecorruptions on the CPU.

    python benchmarks/bench_corruption_floors.py [--images 8] [--rounds 3] [--threads 1] [--only NAME ...]

For each corruption below, in one process on one thread and in interleaved rounds: the reference
(imagecorruptions' per-image `corrupt`, ImageNet-C parameters, all five severities), macs-audit's
`corrupt` (the imagenet set, one batch per severity) and the fastest compiled implementation we
know of the same work (OpenCV's SIMD filters, Pillow's C resize and codec, a single gather pass),
on the same 224 px photographs. The 10x budget is a tenth of the reference's time. Where the
compiled work alone costs more than the budget, 10x would need beating that compiled code, and
the row sits at a floor.

Needs the bench extra (imagecorruptions pulls opencv-python); the reference is loaded through
bench_corruptions.py's compatibility shims. Output: a markdown table on stdout.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_corruptions import cpu_model, limit_reference_threads, load_reference, sample_photos  # noqa: E402


def _each(images, step):
    for image in images:
        step(image)


def compiled_work(cv2, torch, pset):
    """name -> (what, fn(images, severity, rng)): the same work as the corruption at one severity
    on a batch of uint8 (N, 224, 224, 3) images, in the fastest compiled code we know of."""
    params = pset.parameters
    return {**_weather_work(cv2, params), **_filter_work(cv2, params), **_pixel_work(torch, params)}


def _weather_work(cv2, params):
    """fog, elastic, saturate and snow's compiled work (`compiled_work`)."""

    def elastic(images, s, rng):
        alpha, sigma, affine = (p * 244 for p in params["elastic_transform"][s - 1])
        size = 2 * int(3 * sigma + 0.5) + 1  # scipy's radius at truncate 3
        centre = np.float32([[112 + 74, 112 + 74], [112 + 74, 112 - 74], [112 - 74, 112 - 74]])
        cols, rows = np.meshgrid(np.arange(224, dtype=np.float32), np.arange(224, dtype=np.float32))
        for im in images:
            jitter = centre + rng.uniform(-affine, affine, centre.shape).astype(np.float32)
            warped = cv2.warpAffine(
                im.astype(np.float32),
                cv2.getAffineTransform(centre, jitter),
                (224, 224),
                borderMode=cv2.BORDER_REFLECT_101,
            )
            if alpha == 0:
                continue
            fields = [
                cv2.GaussianBlur(rng.uniform(-1, 1, (224, 224)).astype(np.float32), (size, size), sigma) * alpha
                for _ in range(2)
            ]
            cv2.remap(warped, cols + fields[0], rows + fields[1], cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)

    def saturate(images, s, rng):
        mult, add = params["saturate"][s - 1]
        for im in images:
            hsv = cv2.cvtColor(im.astype(np.float32) / 255, cv2.COLOR_RGB2HSV)
            hsv[..., 1] = np.clip(hsv[..., 1] * mult + add, 0, 1)
            cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)

    def snow(images, s, rng):
        loc, scale, zoom, _, radius, sigma, _ = params["snow"][s - 1]
        width = 2 * int(math.ceil(radius)) + 1
        kernel = np.zeros((2 * width + 1, 2 * width + 1), dtype=np.float32)
        kernel[width, width:] = np.exp(-(np.arange(width + 1) ** 2) / (2.0 * sigma * sigma))
        kernel /= kernel.sum()
        for im in images:  # the snow layer: normal draws, zoom, motion blur; then the blend's grey
            layer = rng.normal(loc, scale, (224, 224)).astype(np.float32)
            crop = int(math.ceil(224 / zoom))
            layer = cv2.resize(layer[:crop, :crop], (224, 224), interpolation=cv2.INTER_LINEAR)
            cv2.filter2D(layer, -1, kernel, borderType=cv2.BORDER_REPLICATE)
            cv2.cvtColor(im, cv2.COLOR_RGB2GRAY)

    def fog(images, s, rng):
        from imagecorruptions.corruptions import plasma_fractal  # after load_reference's shims

        for _ in images:
            plasma_fractal(mapsize=256, wibbledecay=params["fog"][s - 1][1])

    return {
        "fog": ("the reference's own numpy diamond-square map, 256 x 256, alone", fog),
        "elastic_transform": ("cv2.warpAffine, 2 x cv2.GaussianBlur of the fields, cv2.remap", elastic),
        "saturate": ("cv2.cvtColor RGB -> HSV -> RGB, float32", saturate),
        "snow": ("numpy normal draws, cv2.resize, cv2.filter2D line, cv2 grey", snow),
    }


def _filter_work(cv2, params):
    """The blurs' and spatter's compiled work (`compiled_work`): OpenCV's filters."""
    from macs_audit.views.corruptions.blur import _defocus_kernel

    def defocus(images, s, rng):
        kernel = np.asarray(_defocus_kernel(*params["defocus_blur"][s - 1]), dtype=np.float32)
        _each(images, lambda im: cv2.filter2D(im.astype(np.float32), -1, kernel, borderType=cv2.BORDER_REFLECT_101))

    def gaussian_blur(images, s, rng):
        sigma = params["gaussian_blur"][s - 1]
        size = 2 * int(4 * sigma + 0.5) + 1  # scipy's radius at truncate 4
        _each(
            images,
            lambda im: cv2.GaussianBlur(im.astype(np.float32), (size, size), sigma, borderType=cv2.BORDER_REPLICATE),
        )

    def motion_blur(images, s, rng):
        radius, sigma = params["motion_blur"][s - 1]
        width = 2 * int(math.ceil(radius)) + 1
        weights = np.exp(-(np.arange(width) ** 2) / (2.0 * sigma * sigma))
        weights /= weights.sum()
        for im in images:  # the ImageMagick line kernel at a random angle, as one 2-D filter
            angle = math.radians(rng.uniform(-45, 45))
            kernel = np.zeros((2 * width + 1, 2 * width + 1), dtype=np.float32)
            for i, wgt in enumerate(weights):
                ox, oy = math.ceil(i * math.cos(angle) - 0.5), math.ceil(i * math.sin(angle) - 0.5)
                kernel[width + oy, width + ox] += wgt
            cv2.filter2D(im.astype(np.float32), -1, kernel, borderType=cv2.BORDER_REPLICATE)

    def spatter(images, s, rng):
        loc, scale, sigma, threshold, _, mode = params["spatter"][s - 1]
        if mode != 0:  # mud: Gaussian filters and a blend, no OpenCV step of its own
            return
        for _ in images:  # the water layer's two heavy OpenCV steps on a liquid layer like spatter's
            liquid = cv2.GaussianBlur(rng.normal(loc, scale, (224, 224)).astype(np.float32), (0, 0), sigma)
            liquid8 = (np.clip(np.where(liquid < threshold, 0, liquid), 0, 1) * 255).astype(np.uint8)
            cv2.distanceTransform(255 - cv2.Canny(liquid8, 50, 150), cv2.DIST_L2, 5)

    return {
        "defocus_blur": ("cv2.filter2D, float32, its 2-D kernel", defocus),
        "gaussian_blur": ("cv2.GaussianBlur, float32 (separable, SIMD)", gaussian_blur),
        "motion_blur": ("cv2.filter2D, float32, the line kernel", motion_blur),
        "spatter": ("cv2.Canny + cv2.distanceTransform (water severities 1-3)", spatter),
    }


def _pixel_work(torch, params):
    """pixelate, JPEG and contrast's compiled work (`compiled_work`): Pillow's codec and resize, a torch gather."""
    from PIL import Image

    def pixelate(images, s, rng):
        c = params["pixelate"][s - 1]
        _each(
            images,
            lambda im: Image.fromarray(im).resize((int(224 * c),) * 2, Image.BOX).resize((224, 224), Image.NEAREST),
        )

    def jpeg(images, s, rng):
        def step(im):
            buf = io.BytesIO()
            Image.fromarray(im).save(buf, "JPEG", quality=params["jpeg_compression"][s - 1])
            np.asarray(Image.open(buf))

        _each(images, step)

    def contrast(images, s, rng):  # one table lookup per value: the least a per-level map costs
        x = torch.from_numpy(images).reshape(len(images), -1)
        offsets = torch.arange(3, dtype=torch.int32).mul_(256).repeat(224 * 224)
        index, table = torch.empty_like(offsets), torch.arange(768).to(torch.uint8)
        out = torch.empty_like(x)
        for i in range(len(images)):
            torch.index_select(table, 0, torch.add(offsets, x[i], out=index), out=out[i])

    return {
        "pixelate": ("Pillow resize BOX down, NEAREST up", pixelate),
        "jpeg_compression": ("Pillow JPEG encode + decode (libjpeg-turbo)", jpeg),
        "contrast": ("one 768-entry table gather per value (torch)", contrast),
    }


def steps_of(ic_corrupt, corruptions, fn, name, images, rng):
    """The three timed passes over all five severities: seed -> None each."""
    import torch

    x = torch.from_numpy(images)

    def reference(seed):
        for s in range(1, 6):
            for image in images:
                ic_corrupt(image, corruption_name=name, severity=s)

    def ours(seed):
        for s in range(1, 6):
            corruptions.corrupt(x, name, s, seed=seed, corruption_set="imagenet")

    def compiled(seed):
        for s in range(1, 6):
            fn(images, s, rng)

    return {"reference": reference, "ours": ours, "compiled": compiled}


def time_rounds(rounds: int, count: int, steps) -> dict[str, list[float]]:
    """CPU milliseconds per image of each step, per round, the steps interleaved in every round."""
    times: dict[str, list[float]] = {key: [] for key in steps}
    for r in range(rounds):
        for key, step in steps.items():
            start = time.process_time()
            step(r)
            times[key].append((time.process_time() - start) / (5 * count) * 1e3)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    warnings.filterwarnings("ignore")

    import cv2
    import torch

    from macs_audit.views.corruptions import apply as corruptions
    from macs_audit.views.corruptions.table import IMAGENET

    torch.set_num_threads(args.threads)
    ic_corrupt, version = load_reference()
    if ic_corrupt is None:
        sys.exit(f"imagecorruptions does not import: {version}")
    limit_reference_threads(args.threads)
    images = sample_photos(args.images, 224)
    work = compiled_work(cv2, torch, IMAGENET)
    names = args.only or list(work)
    unknown = [name for name in names if name not in work]
    if unknown:
        ap.error(f"--only: no floor measured for {', '.join(unknown)}; choose from {', '.join(work)}")
    rng = np.random.default_rng(0)
    rows = []
    for name in names:
        what, fn = work[name]
        x = torch.from_numpy(images)
        for s in range(1, 6):  # warm-up: tables, caches
            corruptions.corrupt(x, name, s, seed=0, corruption_set="imagenet")
            fn(images[:1], s, rng)
        times = time_rounds(args.rounds, len(images), steps_of(ic_corrupt, corruptions, fn, name, images, rng))
        med = {k: float(np.median(v)) for k, v in times.items()}
        rows.append((name, what, med))
        print(f"  {name:18s} " + "  ".join(f"{k} {v:7.3f} ms" for k, v in med.items()), file=sys.stderr, flush=True)

    print(f"Machine: {os.cpu_count()} logical CPUs ({cpu_model()}); {args.threads} thread(s) on every side")
    print(f"Reference: imagecorruptions {version}; OpenCV {cv2.__version__}; torch {torch.__version__}")
    print(f"Data: {args.images} crops of scikit-image's sample photographs at 224x224, all 5 severities; medians of")
    print(f"{args.rounds} interleaved rounds, CPU milliseconds per image (process time, one thread).")
    print()
    print("| corruption | reference | 10x budget | macs-audit | speed-up | compiled work | its time | work / budget |")
    print("|---|---:|---:|---:|---:|---|---:|---:|")
    for name, what, med in rows:
        budget = med["reference"] / 10
        print(
            f"| {name} | {med['reference']:.2f} | {budget:.2f} | {med['ours']:.2f} | "
            f"{med['reference'] / med['ours']:.1f}x | {what} | {med['compiled']:.2f} | {med['compiled'] / budget:.1f} |"
        )


if __name__ == "__main__":
    main()
