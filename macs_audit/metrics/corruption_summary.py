"""The corruption grid summarised: means per corruption, family and severity; CE, the mean corruption error
(mCE) and relative mCE.

The corruptions' names come in with the views (each view result names its corruption and family) and as
arguments (which are the benchmark's 15 and which the 4 extras, views/corruptions/table.py's), so that the
metrics need nothing of the views."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from macs_audit.errors import InputError
from macs_audit.metrics.registry import GROUP_METRICS, VIEW_METRICS


def summarize_corruptions(
    views, clean_accuracy: float, baseline=None, *, benchmark: Sequence[str], extras: Sequence[str]
) -> dict:
    """Means per corruption (over severities), per family, per severity, over the `benchmark` corruptions
    (the 15) and with the `extras` (the 19); the mean corruption error against `baseline` (a Report), if
    given. `views` are the grid's view results (corruption, severity, family, metrics)."""
    by_corruption: dict[str, list] = {}
    for v in views:
        by_corruption.setdefault(v.corruption, []).append(v)
    corruptions = {}
    for name, vs in by_corruption.items():
        corruptions[name] = {
            "family": vs[0].family,
            "extra": name in extras,
            "severities": [v.severity for v in vs],
            **{k: float(np.mean([v.metrics[k] for v in vs])) for k in VIEW_METRICS},
        }
    families: dict[str, dict[str, Any]] = {}
    for fam in dict.fromkeys(c["family"] for c in corruptions.values()):
        members = [c for n, c in corruptions.items() if c["family"] == fam]
        families[fam] = {k: float(np.mean([c[k] for c in members])) for k in GROUP_METRICS}
        families[fam]["corruptions"] = [n for n, c in corruptions.items() if c["family"] == fam]
    severities = sorted({v.severity for v in views})
    per_severity = {
        str(s): {k: float(np.mean([v.metrics[k] for v in views if v.severity == s])) for k in GROUP_METRICS}
        for s in severities
    }
    summary: dict[str, Any] = {
        "corruptions": corruptions,
        "families": families,
        "per_severity": per_severity,
        "severities": severities,
        "clean_accuracy": clean_accuracy,
    }
    for label, names in (("15", benchmark), ("19", (*benchmark, *extras))):
        if all(n in corruptions for n in names):
            summary[f"mean_accuracy_{label}"] = float(np.mean([corruptions[n]["accuracy"] for n in names]))
            summary[f"mean_ece_{label}"] = float(np.mean([corruptions[n]["ece"] for n in names]))
    if "mean_accuracy_15" in summary:
        summary["mean_corruption_error_unnormalized"] = 1.0 - summary["mean_accuracy_15"]
    summary["mean_accuracy_selected"] = float(np.mean([c["accuracy"] for c in corruptions.values()]))
    if baseline is not None:
        summary.update(baseline_errors(views, clean_accuracy, baseline, benchmark))
    return summary


def baseline_errors(views, clean_accuracy: float, baseline, benchmark: Sequence[str]) -> dict:
    """CE and relative CE against a baseline report's corruption views (`errors_against`)."""
    base = {(v.corruption, v.severity): 1 - v.metrics["accuracy"] for v in baseline.views if v.kind == "corruption"}
    described = {"model": baseline.model.path, "sha256": baseline.model.sha256}
    return errors_against(views, clean_accuracy, base, 1 - baseline.clean.metrics["accuracy"], described, benchmark)


def alexnet_errors(views, clean_accuracy: float, benchmark: Sequence[str]) -> dict:
    """CE and relative CE against AlexNet's published ImageNet-C errors (metrics/alexnet.py): the
    benchmark's own normalisation, for the `imagenet` corruption set."""
    from macs_audit.metrics import alexnet

    described = {"model": alexnet.NAME, "clean_error_source": alexnet.CLEAN_ERROR_SOURCE}
    return errors_against(views, clean_accuracy, alexnet.errors_by_cell(), alexnet.CLEAN_ERROR, described, benchmark)


def errors_against(
    views,
    clean_accuracy: float,
    base: dict[tuple[str, int], float],
    base_clean_err: float,
    described: dict,
    benchmark: Sequence[str],
) -> dict:
    """CE_c = sum_s E_sc / sum_s E^base_sc and
    relative CE_c = sum_s (E_sc - E_clean) / sum_s (E^base_sc - E^base_clean),
    each averaged over the `benchmark` corruptions both hold (docs/method.md §2); `base` maps
    (corruption, severity) to the baseline's error."""
    ours = {(v.corruption, v.severity): 1 - v.metrics["accuracy"] for v in views}
    ce, rel = {}, {}
    for name in benchmark:
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
        "baseline": described,
        "ce": ce,
        "relative_ce": rel,
        "mean_corruption_error": float(np.mean(defined_ce)) if defined_ce else None,
        "relative_mean_corruption_error": float(np.mean(defined_rel)) if defined_rel else None,
        "baseline_corruptions": sorted(ce),
    }
