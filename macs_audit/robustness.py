"""The robustness half of the audit: perturbation and corruption views, and their summaries.

A view turns a uint8 batch (N, H, W, C) at data-set position `start` into float [0,1] NCHW images.
Random views draw from a generator seeded by (seed, view, severity, start), so a batch gets the
same bytes however the data set is split across batches of the same size or across processes.
"""

from __future__ import annotations

import functools

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.seeding import derive_seed

ALL = "all"


def parse_perturbations(text: str | None) -> tuple[str, ...]:
    from macs_audit.perturbations import EVAL_VIEWS

    if text is None or text.strip() in ("", "none"):
        return ()
    names = EVAL_VIEWS if text.strip() == ALL else tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in EVAL_VIEWS]
    if unknown:
        raise UsageError(f"unknown perturbation {unknown[0]!r}; choose from {', '.join(EVAL_VIEWS)}, all or none")
    return tuple(dict.fromkeys(names))


def parse_corruptions(text: str | None) -> tuple[str, ...]:
    """'cifar-c' or 'all' -> the 19; 'benchmark' -> the 15; else a comma-separated list of names."""
    from macs_audit.corruptions import BENCHMARK_CORRUPTIONS, CORRUPTIONS

    if text is None or text.strip() in ("", "none"):
        return ()
    text = text.strip()
    if text in ("cifar-c", ALL):
        return CORRUPTIONS
    if text == "benchmark":
        return BENCHMARK_CORRUPTIONS
    names = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = [n for n in names if n not in CORRUPTIONS]
    if unknown:
        raise UsageError(f"unknown corruption {unknown[0]!r}; use cifar-c, benchmark, or names from: {', '.join(CORRUPTIONS)}")
    return tuple(dict.fromkeys(names))


def parse_severities(text: str | None) -> tuple[int, ...]:
    """'1-5', '3', '1,3,5' -> sorted unique severities in 1..5."""
    text = (text or "1-5").replace(" ", "")
    out: set[int] = set()
    try:
        for part in text.split(","):
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    except ValueError:
        raise UsageError(f"--severities must look like 1-5 or 1,3,5, got {text!r}") from None
    if not out or min(out) < 1 or max(out) > 5:
        raise UsageError(f"severities must lie in 1-5, got {text!r}")
    return tuple(sorted(out))


def view_device(predictor) -> str:
    """Views run where the model runs: CUDA for a model on the GPU, else the CPU."""
    device = str(predictor.info.get("device", "cpu"))
    return device if device.startswith("cuda") else "cpu"


def perturbation_view(name: str, seed: int, device: str):
    import torch

    from macs_audit.perturbations import evaluation_view

    def view(images, start: int):
        # A uint8 tensor (the device-resident split) stays on the device; numpy goes back to numpy.
        on_device = torch.is_tensor(images)
        x = (images if on_device else torch.from_numpy(images)).to(device).permute(0, 3, 1, 2).float().div_(255)
        gen = torch.Generator(device=device).manual_seed(derive_seed("perturbation", seed, name, start))
        out = evaluation_view(name, x, gen)
        return out if on_device else out.cpu().numpy()

    return view


def corruption_view(name: str, severity: int, seed: int, device: str, frost_textures: str | None):
    import torch

    from macs_audit.corruptions import batch_seed, corrupt
    from macs_audit.models.predictor import to_unit_float

    def view(images, start: int):
        on_device = torch.is_tensor(images)
        x = (images if on_device else torch.from_numpy(images)).to(device)
        out = corrupt(x, name, severity, seed=batch_seed(seed, name, severity, start), frost_textures=frost_textures)
        if on_device:
            return out.permute(0, 3, 1, 2).float().mul_(float(np.float32(1 / 255)))
        return to_unit_float(out.cpu().numpy())

    return view


@functools.lru_cache(maxsize=4)
def _open_cifar_c(directory: str):
    """One CifarCDirectory per path, so each file is memory-mapped once for all its severities."""
    from macs_audit.cifar_c import read_cifar_c

    return read_cifar_c(directory)


def cifar_c_source(directory, clean_source, name: str, severity: int):
    """The released images of one corruption x severity, aligned with `clean_source` (same positions)."""
    import dataclasses

    cc = _open_cifar_c(str(directory))
    if name not in cc.corruptions:
        raise InputError(f"{directory} has no {name}.npy (found: {', '.join(cc.corruptions) or 'none'})")
    # The directory holds either the whole clean set (subset positions index into it) or exactly
    # the evaluated images (e.g. written by `corrupt --limit N`); its labels must agree either way.
    n = len(clean_source)
    candidates = []
    if clean_source.indices is not None:
        candidates.append(clean_source.indices)
    candidates.append(np.arange(n))
    rows = next((c for c in candidates if c.max() < cc.num_per_severity
                 and np.array_equal(cc.labels[c], clean_source.labels)), None)
    if rows is None:
        raise InputError(f"{directory} ({cc.num_per_severity} images per severity) does not match the clean data "
                         f"({n} images): pass the clean set it was made from with --data and the same --limit")

    def fetch(idx: np.ndarray) -> np.ndarray:
        return np.asarray(cc.images(name, severity)[idx])

    return dataclasses.replace(clean_source, name=str(directory), format="cifar-c", indices=rows, fetch=fetch)


def summarize_corruptions(views, clean_accuracy: float, baseline=None) -> dict:
    """Means per corruption (over severities), per family, per severity, over the 15 and 19; mCE."""
    from macs_audit.corruptions import BENCHMARK_CORRUPTIONS, CORRUPTIONS, EXTRA_CORRUPTIONS, FAMILIES

    keys = ("accuracy", "ece", "nll", "brier")
    by_corruption: dict[str, list] = {}
    for v in views:
        by_corruption.setdefault(v.corruption, []).append(v)
    corruptions = {}
    for name, vs in by_corruption.items():
        corruptions[name] = {"family": FAMILIES[name], "extra": name in EXTRA_CORRUPTIONS,
                             "severities": [v.severity for v in vs],
                             **{k: float(np.mean([v.metrics[k] for v in vs])) for k in keys}}
    families = {}
    for fam in dict.fromkeys(FAMILIES[n] for n in corruptions):
        members = [c for n, c in corruptions.items() if c["family"] == fam]
        families[fam] = {k: float(np.mean([c[k] for c in members])) for k in ("accuracy", "ece")}
        families[fam]["corruptions"] = [n for n, c in corruptions.items() if c["family"] == fam]
    severities = sorted({v.severity for v in views})
    per_severity = {str(s): {k: float(np.mean([v.metrics[k] for v in views if v.severity == s])) for k in ("accuracy", "ece")}
                    for s in severities}
    summary = {"corruptions": corruptions, "families": families, "per_severity": per_severity,
               "severities": severities, "clean_accuracy": clean_accuracy}
    for label, names in (("15", BENCHMARK_CORRUPTIONS), ("19", CORRUPTIONS)):
        if all(n in corruptions for n in names):
            summary[f"mean_accuracy_{label}"] = float(np.mean([corruptions[n]["accuracy"] for n in names]))
            summary[f"mean_ece_{label}"] = float(np.mean([corruptions[n]["ece"] for n in names]))
    if "mean_accuracy_15" in summary:
        summary["mce_unnormalized"] = 1.0 - summary["mean_accuracy_15"]
    summary["mean_accuracy_selected"] = float(np.mean([c["accuracy"] for c in corruptions.values()]))
    if baseline is not None:
        summary.update(baseline_errors(views, clean_accuracy, baseline))
    return summary


def baseline_errors(views, clean_accuracy: float, baseline) -> dict:
    """CE_c = sum_s E_sc / sum_s E^base_sc and relative CE_c = sum_s (E_sc - E_clean) / sum_s (E^base_sc - E^base_clean),
    each averaged over the benchmark corruptions both reports hold (cifar-c-reference.md §7)."""
    from macs_audit.corruptions import BENCHMARK_CORRUPTIONS

    base = {(v.corruption, v.severity): 1 - v.metrics["accuracy"] for v in baseline.views if v.kind == "corruption"}
    ours = {(v.corruption, v.severity): 1 - v.metrics["accuracy"] for v in views}
    base_clean_err = 1 - baseline.clean.metrics["accuracy"]
    ce, rel = {}, {}
    for name in BENCHMARK_CORRUPTIONS:
        sevs = [s for (c, s) in ours if c == name and (c, s) in base]
        if not sevs:
            continue
        denom = sum(base[name, s] for s in sevs)
        rel_denom = sum(base[name, s] - base_clean_err for s in sevs)
        # A baseline with no error (or none above its clean error) leaves the ratio undefined: None.
        ce[name] = sum(ours[name, s] for s in sevs) / denom if denom > 0 else None
        rel[name] = sum(ours[name, s] - (1 - clean_accuracy) for s in sevs) / rel_denom if rel_denom > 0 else None
    if not ce:
        raise InputError("the baseline report holds none of the benchmark corruptions evaluated here")
    defined_ce = [v for v in ce.values() if v is not None]
    defined_rel = [v for v in rel.values() if v is not None]
    return {
        "baseline": {"model": baseline.model.get("path"), "sha256": baseline.model.get("sha256")},
        "ce": ce, "relative_ce": rel,
        "mce": float(np.mean(defined_ce)) if defined_ce else None,
        "relative_mce": float(np.mean(defined_rel)) if defined_rel else None,
        "baseline_corruptions": sorted(ce),
    }
