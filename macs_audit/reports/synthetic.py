"""Synthetic Reports with every section filled in, for tests and demos (no model, no data).

The numbers are made up but shaped like real ones: accuracy falls with corruption severity,
reliability bins are consistent with the given accuracy, intervals bracket the point estimates.
"""

from __future__ import annotations

import random

from macs_audit.report import Report, ViewResult

# name -> (family, one of the 15 benchmark corruptions?)
CORRUPTION_FAMILIES = {
    "gaussian_noise": ("noise", True), "shot_noise": ("noise", True), "impulse_noise": ("noise", True),
    "defocus_blur": ("blur", True), "glass_blur": ("blur", True), "motion_blur": ("blur", True),
    "zoom_blur": ("blur", True), "snow": ("weather", True), "frost": ("weather", True),
    "fog": ("weather", True), "brightness": ("weather", True), "contrast": ("digital", True),
    "elastic_transform": ("digital", True), "pixelate": ("digital", True), "jpeg_compression": ("digital", True),
    "speckle_noise": ("noise", False), "gaussian_blur": ("blur", False), "spatter": ("weather", False),
    "saturate": ("digital", False),
}
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def _metrics(accuracy: float, ece: float, n: int) -> dict[str, float]:
    confidence = min(accuracy + ece, 0.999)
    return {
        "n": n, "accuracy": accuracy, "ece": ece, "mce": min(3 * ece, 1.0), "adaptive_ece": 0.9 * ece,
        "classwise_ece": ece / 5, "nll": 0.2 + 2.5 * (1 - accuracy) + ece, "brier": 1.4 * (1 - accuracy) + ece / 2,
        "mean_confidence": confidence, "mean_margin": 8 * accuracy, "frac_margin_below_target": 1.1 * (1 - accuracy),
        "mean_logit_norm": 12 * accuracy, "mean_max_logit": 9 * accuracy,
    }


def _intervals(m: dict[str, float], half_width: float) -> dict[str, list[float]]:
    return {k: [m[k] - half_width * (1 + (k == "nll")), m[k] + half_width * (1 + (k == "nll"))]
            for k in ("accuracy", "ece", "nll")}


def _reliability(accuracy: float, ece: float, n: int, rng: random.Random) -> dict[str, list]:
    edges = [b / 15 for b in range(16)]
    weights = [0.0] * 15
    for b in range(15):  # mass piles up near the mean confidence, as for a trained model
        weights[b] = max(0.0, 1 - abs((b + 0.5) / 15 - min(accuracy + ece, 0.97)) * 3) ** 2 + 0.002
    total = sum(weights)
    count = [int(round(n * w / total)) for w in weights]
    conf = [None if c == 0 else (b + 0.3 + 0.4 * rng.random()) / 15 for b, c in enumerate(count)]
    acc = [None if c is None else max(0.0, min(1.0, c - ece * (0.5 + rng.random()))) for c in conf]
    return {"edges": edges, "count": count, "mean_confidence": conf, "accuracy": acc}


def synthetic_report(accuracy: float = 0.92, ece: float = 0.03, *, n: int = 10000, seed: int = 0,
                     intervals: bool = True, robustness: bool = True, corruptions: list[str] | None = None,
                     class_names: list[str] | None = None, model_path: str = "synthetic.onnx") -> Report:
    """A Report with clean, temperature, margin, perturbation, robustness and corruption sections.

    `corruptions`: names to include (default all 19; [] for none, which leaves corruption_summary None).
    """
    rng = random.Random(seed)
    names = list(CORRUPTION_FAMILIES) if corruptions is None else list(corruptions)
    clean_m = _metrics(accuracy, ece, n)
    clean = ViewResult("clean", "clean", clean_m, _intervals(clean_m, 0.005) if intervals else {},
                       _reliability(accuracy, ece, n, rng))
    views = []
    for name, drop in (("noise", 0.12), ("blur", 0.08), ("noise+blur", 0.2)):
        m = _metrics(accuracy - drop, ece + drop / 2, n)
        views.append(ViewResult(name, "perturbation", m, _intervals(m, 0.008) if intervals else {},
                                _reliability(m["accuracy"], m["ece"], n, rng)))
    per_corruption = {}
    for name in names:
        family, benchmark = CORRUPTION_FAMILIES.get(name, ("digital", False))
        accs, eces, nlls, briers = [], [], [], []
        for severity in range(1, 6):
            acc = max(0.1, accuracy - severity * (0.03 + 0.04 * rng.random()))
            m = _metrics(acc, ece + (accuracy - acc) / 3, n)
            views.append(ViewResult(f"{name}@{severity}", "corruption", m, {}, None, name, severity, family))
            accs.append(m["accuracy"]), eces.append(m["ece"]), nlls.append(m["nll"]), briers.append(m["brier"])
        per_corruption[name] = {"family": family, "extra": not benchmark, "severities": [1, 2, 3, 4, 5],
                                "accuracy": sum(accs) / 5,
                                "ece": sum(eces) / 5, "nll": sum(nlls) / 5, "brier": sum(briers) / 5}
    summary = _corruption_summary(per_corruption, views, accuracy) if per_corruption else None
    return Report(
        model={"path": model_path, "format": "onnx", "sha256": "0" * 64, "arch": "synthetic", "num_classes": 10,
               "output": "logits (declared)"},
        data={"source": "synthetic", "format": "builtin", "n": n, "num_classes": 10,
              "class_names": list(class_names or CIFAR10_CLASSES)},
        runtime={"device": "cpu", "provider": "CPUExecutionProvider", "batch_size": 500},
        conventions={"ece_bins": 15, "units": "fractions in [0,1] (not percent)", "margin_target": 1.0,
                     "bootstrap_resamples": 1000 if intervals else 0},
        seeds={"bootstrap": seed, "calibration_split": seed},
        clean=clean,
        temperature_scaling={
            "temperature": 1.6, "fit_fraction": 0.2, "n_fit": n // 5, "n_eval": n - n // 5,
            "raw": {"accuracy": accuracy, "ece": ece, "adaptive_ece": 0.9 * ece, "nll": clean_m["nll"], "brier": clean_m["brier"]},
            "scaled": {"accuracy": accuracy, "ece": ece / 3, "adaptive_ece": 0.3 * ece, "nll": clean_m["nll"] - 0.05,
                       "brier": clean_m["brier"] - 0.01},
        },
        margin_histogram={"edges": [float(e) for e in range(-10, 31)],
                          "counts": [int(n * 0.1 * 2.718 ** (-((e - 8) / 6) ** 2)) for e in range(-10, 30)]},
        views=views,
        robustness={"robust_accuracy": accuracy - 0.2, "robust_view": "noise+blur",
                    "sensitivity": {"lipschitz": 4.87, "lipschitz_error": 0.12, "n": 500, "mean_margin_subset": 2.3,
                                    "method": "finite-difference (8 random unit directions)", "median_flip_radius": 0.31,
                                    "units": "margin (logit) per unit L2 norm in [0,1] pixel space"},
                    "robustness_ratio": 0.47, "median_flip_radius": 0.31} if robustness else None,
        corruption_summary=summary,
        tool={"name": "macs-audit", "version": "0.1.0"},
        created="2025-01-01T00:00:00+00:00",
    )


def _corruption_summary(per_corruption: dict[str, dict], views: list[ViewResult], clean_accuracy: float) -> dict:
    """The shape robustness.summarize_corruptions writes (without a baseline)."""
    def mean(values):
        return sum(values) / len(values)

    benchmark = [c for c in per_corruption.values() if not c["extra"]]
    families: dict[str, dict] = {}
    for c in per_corruption.values():
        families.setdefault(c["family"], []).append(c)
    summary = {
        "corruptions": per_corruption,
        "families": {f: {"accuracy": mean([c["accuracy"] for c in cs]), "ece": mean([c["ece"] for c in cs]),
                         "corruptions": [n for n, c in per_corruption.items() if c["family"] == f]}
                     for f, cs in families.items()},
        "per_severity": {str(s): {k: mean([v.metrics[k] for v in views if v.severity == s]) for k in ("accuracy", "ece")}
                         for s in range(1, 6)},
        "severities": [1, 2, 3, 4, 5],
        "clean_accuracy": clean_accuracy,
        "source": "generated by macs-audit",
        "mean_accuracy_selected": mean([c["accuracy"] for c in per_corruption.values()]),
    }
    if len(benchmark) == 15:
        summary["mean_accuracy_15"] = mean([c["accuracy"] for c in benchmark])
        summary["mean_ece_15"] = mean([c["ece"] for c in benchmark])
        summary["mce_unnormalized"] = 1 - summary["mean_accuracy_15"]
    if len(per_corruption) == 19:
        summary["mean_accuracy_19"] = mean([c["accuracy"] for c in per_corruption.values()])
        summary["mean_ece_19"] = mean([c["ece"] for c in per_corruption.values()])
    return summary
