"""Speed of macs_audit.views.corruptions against the `imagecorruptions` package, on CPU.

    python benchmarks/bench_corruptions.py [--set cifar|tiny-imagenet|imagenet]
        [--data ../shared/data/cifar10_test.npz] [--images 1000] [--grid-images 10000] [--batch 1000]
        [--threads N] [--rounds 5] [--skip-reference] [--skip-grid] [--only NAME ...]

1. Images/s per corruption, all five severities, on the same images (CIFAR-10 test images for the
   cifar set; for the others, unless --data is given, crops of scikit-image's sample photographs at
   the set's side), for this implementation with the --set parameters (one batch of --images per
   severity) and for imagecorruptions (its per-image
   `corrupt(image, corruption_name, severity)`), and the ratio: --rounds interleaved rounds,
   each timing one pass of ours on all the images and one pass of the reference on 1/rounds of
   them, so both see the same load; the median of the rounds' ratios is reported, with their
   range.
2. Wall time of the full 19 corruptions x 5 severities grid on --grid-images images with this
   implementation, in batches of --batch, seeded per batch with batch_seed().

The output is a markdown report on stdout (progress on stderr).

imagecorruptions is a benchmark-only dependency (`pip install imagecorruptions`, which pulls
opencv-python and scikit-image). It always uses its ImageNet-C parameters: with --set imagenet
on 224 px images both sides do the same work; with the cifar set the work per image differs (e.g.
zoom_blur averages 11-16 zooms where CIFAR averages 7-26, glass blur loops up to 3 times with larger
shifts) and the comparison is of the implementations as shipped. Version 1.1.2 does not import
on a current stack, so this script installs three compatibility shims in its own process before
importing it (none changes what is computed):
  - `pkg_resources.resource_filename` (setuptools >= 81 no longer ships pkg_resources), used
    only to locate its frost images;
  - `np.float_ = np.float64` (removed in NumPy 2.0), used by its fog plasma fractal;
  - `skimage.filters.gaussian(..., multichannel=True)` mapped to `channel_axis=-1` (the
    argument was removed from scikit-image), used by gaussian_blur and glass_blur.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.util
import os
import platform
import sys
import time
import types
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "cifar10_test.npz"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def install_imagecorruptions_shims() -> None:
    if "pkg_resources" not in sys.modules and importlib.util.find_spec("pkg_resources") is None:
        shim = types.ModuleType("pkg_resources")

        def resource_filename(package: str, resource: str) -> str:
            spec = importlib.util.find_spec(package)
            return os.path.join(os.path.dirname(spec.origin), resource)

        shim.resource_filename = resource_filename
        sys.modules["pkg_resources"] = shim
    if not hasattr(np, "float_"):
        np.float_ = np.float64
    import inspect

    import skimage.filters

    original = skimage.filters.gaussian
    if "multichannel" not in inspect.signature(original).parameters:

        def gaussian(image, *args, multichannel=None, **kwargs):
            if multichannel:
                kwargs.setdefault("channel_axis", -1)
            return original(image, *args, **kwargs)

        skimage.filters.gaussian = gaussian


def load_reference():
    """imagecorruptions.corrupt, or (None, reason) when it cannot be imported."""
    try:
        install_imagecorruptions_shims()
        import imagecorruptions
        from imagecorruptions import corrupt as ic_corrupt
    except Exception as exc:  # noqa: BLE001 - report exactly why
        return None, f"{type(exc).__name__}: {exc}"
    version = getattr(imagecorruptions, "__version__", None)
    if version is None:
        from importlib.metadata import version as dist_version

        version = dist_version("imagecorruptions")
    return ic_corrupt, version


def limit_reference_threads(threads: int) -> None:
    """Size the reference's thread pools like ours, so that neither side gets extra cores and no
    idle pool spins next to the timed code."""
    import cv2

    cv2.setNumThreads(threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(threads)


class Clock:
    """Wall time and this process's CPU time (all its threads). On a machine shared with
    other jobs, CPU time of a single-threaded run approximates the time on a dedicated core."""

    def __enter__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu


def sample_photos(n: int, side: int) -> np.ndarray:
    """n crops (seeded positions) of scikit-image's bundled colour photographs, side x side: 224 px
    crops, resized to `side` with Pillow's bilinear filter when it differs."""
    from PIL import Image
    from skimage import data

    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    rng = np.random.default_rng(0)
    crops = []
    for i in range(n):
        photo = photos[i % len(photos)]
        top = int(rng.integers(0, photo.shape[0] - 224 + 1))
        left = int(rng.integers(0, photo.shape[1] - 224 + 1))
        crop = photo[top : top + 224, left : left + 224]
        if side != 224:
            crop = np.asarray(Image.fromarray(crop).resize((side, side), Image.BILINEAR))
        crops.append(crop)
    return np.ascontiguousarray(np.stack(crops))


def time_pair(torch, corruptions, ic_corrupt, name, images, rounds, corruption_set):
    """Ours and the reference, interleaved in ``rounds`` rounds so that both see the same
    machine load. Each round times one pass of ours over all five severities (one batch of all
    the images per severity) and one pass of the reference over all five severities on the
    round's share of the images (1/rounds of them, image by image); over all rounds the reference
    sees every image once. Returns ({"ours": [(wall, cpu) img/s per round], "reference": [...]},
    error): if the reference raises, its rounds are dropped, the error is returned and ours is
    still timed."""
    x = torch.from_numpy(images)
    for severity in range(1, 6):  # warm-up: tables, caches, the allocator's pools
        corruptions.corrupt(x, name, severity, seed=0, corruption_set=corruption_set)
    error = None
    if ic_corrupt is not None:
        try:
            for severity in range(1, 6):
                ic_corrupt(images[0], corruption_name=name, severity=severity)
        except Exception as exc:  # noqa: BLE001 - report exactly why
            error = f"{type(exc).__name__}: {exc}"
    rates = {"ours": [], "reference": []}
    for r, share in enumerate(np.array_split(np.arange(len(images)), rounds)):
        with Clock() as clock:
            for severity in range(1, 6):
                corruptions.corrupt(x, name, severity, seed=100 * r + severity, corruption_set=corruption_set)
        rates["ours"].append((5 * len(images) / clock.wall, 5 * len(images) / clock.cpu))
        if ic_corrupt is not None and error is None:
            try:
                with Clock() as clock:
                    for severity in range(1, 6):
                        for i in share:
                            ic_corrupt(images[i], corruption_name=name, severity=severity)
            except Exception as exc:  # noqa: BLE001 - report exactly why
                error, rates["reference"] = f"{type(exc).__name__}: {exc}", []
                continue
            rates["reference"].append((5 * len(share) / clock.wall, 5 * len(share) / clock.cpu))
    return rates, error


def time_grid(torch, corruptions, names, images, batch, corruption_set):
    """The full grid: (wall s, CPU s, {name: (wall s, CPU s)})."""
    x = torch.from_numpy(images)
    per = {}
    with Clock() as total:
        for name in names:
            with Clock() as clock:
                for severity in range(1, 6):
                    for start in range(0, len(x), batch):
                        seed = corruptions.batch_seed(0, name, severity, start)
                        part = x[start : start + batch]
                        corruptions.corrupt(part, name, severity, seed=seed, corruption_set=corruption_set)
            per[name] = (clock.wall, clock.cpu)
            log(f"  grid {name:18s} wall {clock.wall:7.1f} s  cpu {clock.cpu:7.1f} s")
    return total.wall, total.cpu, per


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--set", default="cifar", help="corruption parameter set: cifar, tiny-imagenet or imagenet")
    ap.add_argument("--data", type=Path, default=None, help="npz with x (default: CIFAR-10 test set for cifar)")
    ap.add_argument("--images", type=int, default=1000)
    ap.add_argument("--grid-images", type=int, default=10000)
    ap.add_argument("--batch", type=int, default=1000)
    ap.add_argument(
        "--threads",
        type=int,
        default=None,
        help="threads for both sides: torch's intra-op pool, and the reference's OpenCV, "
        "BLAS and OpenMP pools (whose idle workers otherwise spin on the other cores)",
    )
    ap.add_argument("--skip-reference", action="store_true")
    ap.add_argument("--skip-grid", action="store_true")
    ap.add_argument("--only", nargs="*", help="time only these corruptions (not the grid)")
    ap.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="interleaved rounds per corruption (the reference splits its images over them)",
    )
    args = ap.parse_args()
    if not 1 <= args.rounds <= args.images:
        ap.error(f"--rounds must be between 1 and --images ({args.images}), got {args.rounds}")
    from macs_audit.views.corruptions.table import CORRUPTIONS

    unknown = [name for name in args.only or [] if name not in CORRUPTIONS]
    if unknown:
        ap.error(f"--only: unknown corruption {', '.join(unknown)}; choose from {', '.join(CORRUPTIONS)}")
    return args


@dataclasses.dataclass
class Rates:
    """Per corruption: ours and the reference's median images/s (wall, CPU), the reference's failures, and each
    round's ratios of ours to the reference's (wall, CPU)."""

    ours: dict = dataclasses.field(default_factory=dict)
    reference: dict = dataclasses.field(default_factory=dict)
    errors: dict = dataclasses.field(default_factory=dict)
    ratios: dict = dataclasses.field(default_factory=dict)


def time_corruptions(torch, corruptions, ic_corrupt, names, images, rounds, corruption_set) -> Rates:
    """Each corruption of `names` timed against the reference (`time_pair`), a progress line each on stderr."""
    rates = Rates()
    for name in names:
        timed, error = time_pair(torch, corruptions, ic_corrupt, name, images, rounds, corruption_set)
        if error:
            rates.errors[name] = error
        rates.ours[name] = tuple(float(np.median([r[i] for r in timed["ours"]])) for i in (0, 1))
        line = f"  {name:18s} ours {rates.ours[name][0]:9.0f} img/s (cpu {rates.ours[name][1]:9.0f})"
        if timed["reference"]:
            ref = rates.reference[name] = tuple(float(np.median([r[i] for r in timed["reference"]])) for i in (0, 1))
            pairs = zip(timed["ours"], timed["reference"], strict=True)
            rates.ratios[name] = [tuple(o[i] / f[i] for i in (0, 1)) for o, f in pairs]
            line += (
                f"  imagecorruptions {ref[0]:9.1f} img/s (cpu {ref[1]:9.1f})"
                f"  ratios {' '.join(f'{q[0]:.1f}' for q in rates.ratios[name])}"
            )
        elif name in rates.errors:
            line += f"  imagecorruptions FAILED {rates.errors[name]}"
        log(line)
    return rates


def rate_rows(names, rates: Rates, n_images: int) -> list[str]:
    """The table's row per corruption, then the time-weighted total where the reference ran."""
    from macs_audit.views.corruptions.table import FAMILIES

    rows = []
    for name in names:
        (ow, oc), ref = rates.ours[name], rates.reference.get(name)
        if ref:
            ref_cell = f"{ref[0]:,.0f} ({ref[1]:,.0f})"
            wall_ratios = [q[0] for q in rates.ratios[name]]
            ratio = (
                f"{np.median(wall_ratios):.1f}x ({np.median([q[1] for q in rates.ratios[name]]):.1f}x)"
                f" | {min(wall_ratios):.1f}x - {max(wall_ratios):.1f}x"
            )
        else:
            ref_cell, ratio = rates.errors.get(name, "n/a"), "n/a | "
        rows.append(f"| {name} | {FAMILIES[name]} | {ow:,.0f} ({oc:,.0f}) | {ref_cell} | {ratio} |")
    if rates.reference:
        timed = rates.reference
        count = len(timed) * 5 * n_images
        totals = [
            (
                sum(count / len(timed) / rates.ours[n][i] for n in timed),
                sum(count / len(timed) / timed[n][i] for n in timed),
            )
            for i in (0, 1)
        ]
        rows.append(
            f"| **all, time-weighted** | | {count / totals[0][0]:,.0f} ({count / totals[1][0]:,.0f}) "
            f"| {count / totals[0][1]:,.0f} ({count / totals[1][1]:,.0f}) "
            f"| {totals[0][1] / totals[0][0]:.1f}x ({totals[1][1] / totals[1][0]:.1f}x) | |"
        )
    return rows


def main() -> None:
    args = parse_args()
    warnings.filterwarnings("ignore")

    import torch

    from macs_audit.views.corruptions import apply as corruptions
    from macs_audit.views.corruptions.table import CORRUPTIONS, parameter_set

    if args.threads:
        torch.set_num_threads(args.threads)
    pset = parameter_set(args.set)
    if args.data is None and pset.name != "cifar":
        data = sample_photos(max(args.images, 0 if args.skip_grid or args.only else args.grid_images), pset.size)
        data_name = f"crops of scikit-image sample photographs at {pset.size} px"
    else:
        path = args.data or DEFAULT_DATA
        data, data_name = np.load(path, allow_pickle=False)["x"], path.name
    images = np.ascontiguousarray(data[: args.images])
    load_start = os.getloadavg()

    ic_corrupt, reference = None, "skipped"
    if not args.skip_reference:
        ic_corrupt, info = load_reference()
        reference = f"imagecorruptions {info}" if ic_corrupt else f"not importable: {info}"
        if ic_corrupt is not None and args.threads:
            limit_reference_threads(args.threads)
        time.sleep(2.0)  # worker threads started by the reference's imports spin for a while
    log(f"{len(images)} images x 5 severities; reference: {reference}")
    names = args.only or CORRUPTIONS
    rates = time_corruptions(torch, corruptions, ic_corrupt, names, images, args.rounds, pset.name)
    grid_total = None
    if not args.skip_grid and not args.only:
        grid_images = np.ascontiguousarray(data[: args.grid_images])
        log(f"full grid: 19 x 5 x {len(grid_images)} images, batch {args.batch}")
        grid_total, grid_cpu, grid_per = time_grid(torch, corruptions, CORRUPTIONS, grid_images, args.batch, pset.name)
    load_end = os.getloadavg()

    out = [
        f"Date: {datetime.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"Machine: {os.cpu_count()} logical CPUs ({cpu_model()}), Linux {platform.release()}; "
        f"torch {torch.__version__} with {torch.get_num_threads()} intra-op threads, "
        f"numpy {np.__version__}, Python {platform.python_version()}",
        f"Load average (1 min) at start / end: {load_start[0]:.2f} / {load_end[0]:.2f}",
        f"Reference: {reference}",
        f"Data: first {len(images)} images ({images.shape[1]}x{images.shape[2]}) of {data_name}, all 5 severities; "
        f"macs-audit's {pset.name} parameter set",
        "",
        f"Rates are images per second over all 5 severities, medians over {args.rounds} interleaved "
        "rounds: wall clock, and in brackets per second of this process's CPU time (the better "
        "guide on a shared machine). The speed-up is the median of the rounds' ratios, with the "
        "lowest and highest round's wall-clock ratio.",
        "",
        "| corruption | family | macs-audit img/s | imagecorruptions img/s | speed-up wall (CPU) "
        "| rounds, wall: min - max |",
        "|---|---|---:|---:|---:|---:|",
        *rate_rows(names, rates, len(images)),
    ]
    if grid_total is not None:
        n_grid = 19 * 5 * args.grid_images
        out += [
            "",
            f"Full grid, 19 corruptions x 5 severities x {args.grid_images:,} images "
            f"(batch {args.batch}): **{grid_total:.1f} s wall** ({n_grid / grid_total:,.0f} img/s), "
            f"{grid_cpu:.1f} s CPU ({n_grid / grid_cpu:,.0f} img/s per CPU-second)",
            "",
            "| corruption | grid wall s | grid CPU s |",
            "|---|---:|---:|",
        ]
        out += [f"| {n} | {w:.1f} | {c:.1f} |" for n, (w, c) in grid_per.items()]
    print("\n".join(out))


if __name__ == "__main__":
    main()
