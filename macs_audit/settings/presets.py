"""Presets: named sets of defaults a command's `--preset` (or the spec's `preset = "..."`) puts under the spec and
the flags. A preset sets audit settings only, never the model's preprocessing (input size, mean, std, crop,
interpolation): those come from the model's own config or its flags, so that a preset never passes for a value
the model declares."""

from __future__ import annotations

from typing import Any

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "evaluate": {
        # A smoke test in CI: the clean view and the temperature, with fewer resamples.
        "quick": {"bootstrap": 200, "perturbations": "none", "sensitivity_samples": 0, "calibrators": "temperature"},
        # Everything the audit measures without extra data: every perturbation and the 15 benchmark corruptions.
        "full": {"perturbations": "all", "corruptions": "benchmark"},
        # An ImageNet-size model: the benchmark corruptions with ImageNet-C's parameters; the sensitivity's finite
        # differences cost a pass per direction at 224 px, so off.
        "imagenet": {"corruptions": "benchmark", "corruption_set": "imagenet", "sensitivity_samples": 0},
    },
    # MaCS presets: points on the trade-off map measured on a validation split (docs/finetune-experiment.md), with
    # the rule that picked each. "calibrated" is FinetuneOptions' defaults (finetune/options.py). They set MaCS's
    # hyperparameters: finetune refuses one with another --objective.
    "finetune": {
        "calibrated": {"lambda_c": 1.0, "bn_stats": "clean", "epochs": 1.0},
        "robust": {"lambda_c": 3.0, "bn_stats": "both", "epochs": 3.0},
    },
}
