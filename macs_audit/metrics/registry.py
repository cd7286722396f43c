"""The metric registry: every metric a Report holds, once, with its label, unit, direction and place.

The gate, `compare` and every output format read these rows; none of them writes a metric's label,
unit or direction itself. A new metric is one row here (plus the accumulator or audit section that
computes it), its unit, direction and place named by keyword (the row type is metrics/metric_row.py).
Plain Python, no numpy: reading a saved report loads nothing heavy for it.
"""

from __future__ import annotations

import functools

from macs_audit.metrics.metric_row import Metric, Place, Unit
from macs_audit.report import DEFAULT_ROBUST_VIEW

_CALIBRATION_SPLIT, _OOD_DATA, _UNLABELED_DATA = "--calibration-split F, F > 0", "--ood-data", "--unlabeled"
_OOD_SCORES = {
    "msp": "max softmax",
    "max_logit": "max logit",
    "energy": "energy",
    "gen": "GEN",
    # The feature-space detectors (metrics/feature_ood.py; --features, the model's penultimate features).
    "mahalanobis": "Mahalanobis",
    "rmds": "RMDS",  # relative Mahalanobis
    "knn": "KNN",
    "vim": "ViM",
    "react": "ReAct",
    "ash_s": "ASH-S",
}


# How tables name the conformal methods (metrics/conformal.py REPORTED); CC: class-conditional (Mondrian).
CONFORMAL_METHOD_LABELS = {"lac": "LAC", "aps": "APS", "raps": "RAPS", "lac_class_conditional": "LAC-CC"}
# (metric name stem, key, label, unit, higher is better) of each method's three conformal statistics.
_CONFORMAL_STATISTICS = (
    ("coverage", "coverage", "coverage", Unit.FRACTION, True),
    ("set_size", "mean_set_size", "mean set size", Unit.NUMBER, False),
    ("worst_class_coverage", "worst_class_coverage", "worst class's coverage", Unit.FRACTION, True),
)


def _conformal(
    name: str,
    method: str,
    key: str,
    label: str,
    *,
    unit: Unit,
    higher_is_better: bool,
    made_by: str,
    shown: str | None = None,  # the method as tables name it (CONFORMAL_METHOD_LABELS; default: its key in capitals)
) -> Metric:
    shown = shown or method.upper()
    # A set's size at a fixed coverage follows the probabilities' sharpness, which a temperature alone
    # rescales; what the sets guarantee, coverage, is judged against its target.
    return Metric(
        name,
        f"{label} ({shown})",
        unit=unit,
        higher_is_better=higher_is_better,
        place=Place.CONFORMAL,
        gate=True,
        key=f"{'corruption_mean' if 'corruptions' in name else 'methods'}.{method}.{key}",
        named=f"conformal {label} ({shown})",
        made_by=made_by,
        scale_dependent=key == "mean_set_size",
    )


def _bootstrapped(place: Place, name: str, label: str, named: str, at: str, higher_is_better: bool = True) -> Metric:
    """A gated fraction of report.ood or report.unlabeled: `at` is "<section entry>.<value>:<interval>"."""
    entry_value, interval = at.split(":")
    entry, _ = entry_value.rsplit(".", 1)
    return Metric(
        name,
        label,
        unit=Unit.FRACTION,
        higher_is_better=higher_is_better,
        place=place,
        gate=True,
        key=entry_value,
        interval=f"{entry}.{interval}",
        named=named,
        made_by=_OOD_DATA if place is Place.OOD else _UNLABELED_DATA,
    )


def _ood(score: str, key: str, label: str, higher_is_better: bool) -> Metric:
    name, scored = f"ood_{key}{'' if score == 'msp' else f'_{score}'}", f"{label}, {_OOD_SCORES[score]}"
    at = f"scores.{score}.{key}:intervals.{key}"
    return _bootstrapped(Place.OOD, name, scored, f"OOD {scored} score", at, higher_is_better)


def _estimate(estimator: str, label: str) -> Metric:
    name = f"estimated_accuracy{'' if estimator == 'atc_mc' else f'_{estimator}'}"
    at, named = f"estimates.{estimator}.accuracy:interval", f"estimated unlabeled accuracy ({label})"
    return _bootstrapped(Place.UNLABELED, name, f"estimated accuracy, {label}", named, at)


_ROBUST_VIEW, _SENSITIVITY = f"--perturbations {DEFAULT_ROBUST_VIEW}", "--sensitivity-samples N, N > 0"
_GRID_15, _GRID_19 = "--corruptions benchmark or all", "--corruptions all"
_SHIFT_DATA = "--shift-data NAME=DIR"
_BASELINE = "--corruptions with --corruption-baseline, or the imagenet set (AlexNet's errors)"

# The rows of one place: every view's metrics (report.clean.metrics), report.temperature_scaling,
# report.robustness, report.corruption_summary, and selective prediction (every view's metrics too).
_clean = functools.partial(Metric, place=Place.CLEAN)
_temperature = functools.partial(Metric, place=Place.TEMPERATURE)
_robustness = functools.partial(Metric, place=Place.ROBUSTNESS)
_corruption = functools.partial(Metric, place=Place.CORRUPTION)
_selective = functools.partial(Metric, place=Place.SELECTIVE)
_shift = functools.partial(Metric, place=Place.SHIFT, unit=Unit.FRACTION, made_by=_SHIFT_DATA)
_real = functools.partial(Metric, place=Place.REAL_LABELS, unit=Unit.FRACTION, made_by="--real-labels")

# In the order tables and `compare` list them.
METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        # Every view's metrics (report.clean.metrics and each entry of report.views).
        _clean("accuracy", "accuracy", unit=Unit.FRACTION, higher_is_better=True, gate=True),
        _clean("ece", "ECE", unit=Unit.FRACTION, higher_is_better=False, gate=True, note="15 bins"),
        _clean("mce", "MCE", unit=Unit.FRACTION, higher_is_better=False, gate=True),
        _clean("adaptive_ece", "adaptive ECE", unit=Unit.FRACTION, higher_is_better=False, gate=True),
        _clean("classwise_ece", "classwise ECE", unit=Unit.FRACTION, higher_is_better=False, gate=True),
        _clean("smooth_ece", "smooth ECE", unit=Unit.FRACTION, higher_is_better=False, gate=True),
        _clean("l2_ece", "L2 ECE", unit=Unit.FRACTION, higher_is_better=False, gate=True, note="15 equal-mass bins"),
        _clean("debiased_l2_ece", "debiased L2 ECE", unit=Unit.FRACTION, higher_is_better=False, gate=True),
        # The ImageNet-A/R and AugMix code's rule (metrics/rms_calibration.py), from 200 images.
        _clean(
            "rms_calibration_error",
            "RMS calibration error",
            unit=Unit.FRACTION,
            higher_is_better=False,
            gate=True,
            note="100-sample bins, Hendrycks et al.",
        ),
        _clean(
            "ece_sweep",
            "ECE-sweep",
            unit=Unit.FRACTION,
            higher_is_better=False,
            gate=True,
            note="monotone equal-mass bins",
        ),
        _clean("nll", "NLL", unit=Unit.NATS, higher_is_better=False, gate=True),
        _clean("brier", "Brier", unit=Unit.NUMBER, higher_is_better=False, gate=True),
        _clean("mean_confidence", "mean confidence", unit=Unit.FRACTION, higher_is_better=None, scale_dependent=True),
        _clean("mean_margin", "mean logit margin", unit=Unit.NUMBER, higher_is_better=True, scale_dependent=True),
        _clean(
            "frac_margin_below_target",
            "margin < target",
            unit=Unit.FRACTION,
            higher_is_better=False,
            scale_dependent=True,
        ),
        _clean(
            "mean_logit_norm",
            "mean ||z||_2",
            unit=Unit.NUMBER,
            higher_is_better=None,
            on_probabilities="mean ||log p||_2",
            scale_dependent=True,
        ),
        _clean(
            "mean_max_logit",
            "mean max logit",
            unit=Unit.NUMBER,
            higher_is_better=None,
            on_probabilities="mean max log p",
            scale_dependent=True,
        ),
        # report.temperature_scaling (its raw and scaled metrics are the clean ones above).
        _temperature(
            "temperature",
            "temperature T",
            unit=Unit.NUMBER,
            higher_is_better=None,
            made_by="--calibration-split F, F > 0",
            scale_dependent=True,
        ),
        # report.robustness; robust_ece is the robust view's ECE.
        _robustness(
            "robust_accuracy",
            "robust accuracy",
            unit=Unit.FRACTION,
            higher_is_better=True,
            gate=True,
            made_by=_ROBUST_VIEW,
        ),
        _robustness(
            "robust_ece", "robust-view ECE", unit=Unit.FRACTION, higher_is_better=False, gate=True, made_by=_ROBUST_VIEW
        ),
        _robustness(
            "robustness_ratio",
            "robustness ratio",
            unit=Unit.RATIO,
            higher_is_better=True,
            gate=True,
            note="mean margin / L^",
            made_by=_SENSITIVITY,
        ),
        _robustness(
            "median_flip_radius",
            "median flip radius",
            unit=Unit.NUMBER,
            higher_is_better=True,
            note="pixel L2",
            made_by=_SENSITIVITY,
        ),
        # L^, the mean norm of the margin's input gradient, under the report's key for it.
        _robustness(
            "mean_gradient_norm",
            "sensitivity L^",
            unit=Unit.NUMBER,
            higher_is_better=False,
            key="sensitivity.lipschitz",
            note="margin change per unit pixel L2",
            made_by=_SENSITIVITY,
            scale_dependent=True,
        ),
        # report.corruption_summary.
        _corruption(
            "corruption_accuracy",
            "mean accuracy, 15 benchmark corruptions x 5",
            unit=Unit.FRACTION,
            higher_is_better=True,
            gate=True,
            key="mean_accuracy_15",
            named="mean corruption accuracy (15 x 5)",
            short="corruption accuracy (15x5)",
            made_by=_GRID_15,
        ),
        _corruption(
            "corruption_accuracy_19",
            "mean accuracy, all 19 corruptions x 5",
            unit=Unit.FRACTION,
            higher_is_better=True,
            gate=True,
            key="mean_accuracy_19",
            named="mean corruption accuracy (19 x 5)",
            made_by=_GRID_19,
        ),
        _corruption(
            "corruption_ece",
            "mean ECE, 15 x 5",
            unit=Unit.FRACTION,
            higher_is_better=False,
            gate=True,
            key="mean_ece_15",
            named="mean corruption ECE (15 x 5)",
            made_by=_GRID_15,
        ),
        _corruption(
            "corruption_ece_19",
            "mean ECE, 19 x 5",
            unit=Unit.FRACTION,
            higher_is_better=False,
            gate=True,
            key="mean_ece_19",
            named="mean corruption ECE (19 x 5)",
            made_by=_GRID_19,
        ),
        # 1 - corruption_accuracy: shown in the summary table, not compared or gated twice.
        _corruption(
            "mean_corruption_error_unnormalized",
            "unnormalised mCE",
            unit=Unit.FRACTION,
            higher_is_better=False,
            compare=False,
            note="1 - mean accuracy 15 x 5",
            made_by=_GRID_15,
        ),
        # mCE, the mean Corruption Error, and its relative and unnormalised forms: named in full, not as the
        # Maximum Calibration Error (`mce` above).
        _corruption(
            "mean_corruption_error",
            "mCE relative to the corruption baseline",
            unit=Unit.ERROR_RATIO,
            higher_is_better=False,
            gate=True,
            made_by=_BASELINE,
        ),
        _corruption(
            "relative_mean_corruption_error",
            "relative mCE",
            unit=Unit.RATIO,
            higher_is_better=False,
            gate=True,
            made_by=_BASELINE,
        ),
        # Selective prediction on the max-softmax confidence, in every view's metrics (metrics/selective.py).
        _selective("aurc", "AURC", unit=Unit.FRACTION, higher_is_better=False, gate=True),
        _selective("e_aurc", "E-AURC", unit=Unit.FRACTION, higher_is_better=False, gate=True),
        _selective(
            "risk_at_80_coverage", "risk at 80% coverage", unit=Unit.FRACTION, higher_is_better=False, gate=True
        ),
        _selective(
            "risk_at_90_coverage", "risk at 90% coverage", unit=Unit.FRACTION, higher_is_better=False, gate=True
        ),
        _selective(
            "risk_at_95_coverage", "risk at 95% coverage", unit=Unit.FRACTION, higher_is_better=False, gate=True
        ),
        _selective("coverage_at_1_risk", "coverage at 1% risk", unit=Unit.FRACTION, higher_is_better=True, gate=True),
        _selective("coverage_at_5_risk", "coverage at 5% risk", unit=Unit.FRACTION, higher_is_better=True, gate=True),
        _selective(
            "misclassification_auroc", "misclassification AUROC", unit=Unit.FRACTION, higher_is_better=True, gate=True
        ),
        # report.conformal (metrics/conformal.py).
        _conformal(
            "conformal_coverage",
            "lac",
            "coverage",
            "coverage",
            unit=Unit.FRACTION,
            higher_is_better=True,
            made_by=_CALIBRATION_SPLIT,
        ),
        _conformal(
            "conformal_set_size",
            "lac",
            "mean_set_size",
            "mean set size",
            unit=Unit.NUMBER,
            higher_is_better=False,
            made_by=_CALIBRATION_SPLIT,
        ),
        _conformal(
            "conformal_worst_class_coverage",
            "lac",
            "worst_class_coverage",
            "worst class's coverage",
            unit=Unit.FRACTION,
            higher_is_better=True,
            made_by=_CALIBRATION_SPLIT,
        ),
        _conformal(
            "conformal_coverage_aps",
            "aps",
            "coverage",
            "coverage",
            unit=Unit.FRACTION,
            higher_is_better=True,
            made_by=_CALIBRATION_SPLIT,
        ),
        _conformal(
            "conformal_set_size_aps",
            "aps",
            "mean_set_size",
            "mean set size",
            unit=Unit.NUMBER,
            higher_is_better=False,
            made_by=_CALIBRATION_SPLIT,
        ),
        _conformal(
            "conformal_worst_class_coverage_aps",
            "aps",
            "worst_class_coverage",
            "worst class's coverage",
            unit=Unit.FRACTION,
            higher_is_better=True,
            made_by=_CALIBRATION_SPLIT,
        ),
        *(
            _conformal(
                f"conformal_{name}_raps",
                "raps",
                key,
                label,
                unit=unit,
                higher_is_better=higher,
                made_by=_CALIBRATION_SPLIT,
            )
            for name, key, label, unit, higher in _CONFORMAL_STATISTICS
        ),
        *(
            _conformal(
                f"conformal_{name}_class_conditional",
                "lac_class_conditional",
                key,
                label,
                unit=unit,
                higher_is_better=higher,
                made_by=_CALIBRATION_SPLIT,
                shown=CONFORMAL_METHOD_LABELS["lac_class_conditional"],
            )
            for name, key, label, unit, higher in _CONFORMAL_STATISTICS
        ),
        _conformal(
            "conformal_coverage_corruptions",
            "lac",
            "coverage",
            "coverage, corruptions",
            unit=Unit.FRACTION,
            higher_is_better=True,
            made_by=f"{_CALIBRATION_SPLIT} and --corruptions",
        ),
        _conformal(
            "conformal_lowest_coverage_corruptions",
            "lac",
            "lowest_coverage",
            "coverage, worst corruption",
            unit=Unit.FRACTION,
            higher_is_better=True,
            made_by=f"{_CALIBRATION_SPLIT} and --corruptions",
        ),
        # report.ood (metrics/ood.py): in-distribution is the positive class.
        *(
            _ood(score, key, label, higher)
            for score in _OOD_SCORES
            for key, label, higher in (
                ("auroc", "AUROC", True),
                ("aupr", "AUPR-In", True),
                ("fpr95", "FPR at 95% TPR", False),
            )
        ),
        # report.representation_shift (auditing/features.py): the --unlabeled or --shift-data set whose features lie
        # farthest from the clean evaluation features'.
        Metric(
            "representation_mmd",
            "largest MMD of the features",
            unit=Unit.NUMBER,
            higher_is_better=False,
            place=Place.REPRESENTATION,
            gate=True,
            key="largest.mmd",
            named="representation shift (features MMD)",
            made_by="--unlabeled or --shift-data, with the model's features (--features)",
        ),
        # report.shift (auditing/shift.py): means over the sets; per set under [gate.shift.<name>].
        _shift(
            "shift_accuracy",
            "mean accuracy, restricted",
            higher_is_better=True,
            gate=True,
            key="mean.restricted.accuracy",
            named="mean natural-shift accuracy (restricted)",
        ),
        _shift(
            "shift_ece",
            "mean ECE, restricted",
            higher_is_better=False,
            gate=True,
            key="mean.restricted.ece",
            named="mean natural-shift ECE (restricted)",
        ),
        # The shift papers' RMS calibration error (metrics/rms_calibration.py), which each shift view holds.
        _shift(
            "shift_rms_calibration_error",
            "mean RMS calibration error, restricted",
            higher_is_better=False,
            key="mean.restricted.rms_calibration_error",
            note="100-sample bins, Hendrycks et al.",
            short="RMS calibration error",
        ),
        _shift(
            "shift_accuracy_unrestricted",
            "mean accuracy, unrestricted",
            higher_is_better=True,
            key="mean.unrestricted.accuracy",
        ),
        _shift("shift_ece_unrestricted", "mean ECE, unrestricted", higher_is_better=False, key="mean.unrestricted.ece"),
        # report.real_labels (metrics/real_labels.py): a top-1 is right when it is any of the image's ReaL labels.
        _real(
            "real_accuracy",
            "ReaL accuracy",
            higher_is_better=True,
            gate=True,
            key="accuracy_real",
            interval="intervals.accuracy_real",
        ),
        _real(
            "real_accuracy_original",
            "original labels' accuracy",
            higher_is_better=True,
            key="accuracy_original",
            interval="intervals.accuracy_original",
        ),
        _real(
            "real_ece",
            "ECE against ReaL",
            higher_is_better=False,
            gate=True,
            key="ece_real",
            note="15 bins",
            interval="intervals.ece_real",
        ),
        _real(
            "real_rms_calibration_error",
            "RMS calibration error against ReaL",
            higher_is_better=False,
            key="rms_calibration_error_real",
        ),
        # report.unlabeled (metrics/label_free.py).
        _estimate("atc_mc", "ATC-MC"),
        _estimate("atc_ne", "ATC-NE"),
        _estimate("doc", "DoC"),
    ]
}

GATE_METRICS: dict[str, Metric] = {name: m for name, m in METRICS.items() if m.gate}

# The clean metrics each view is summarised by: its row in the view tables, and the means over
# severities each corruption holds in report.corruption_summary.corruptions (gated per corruption).
VIEW_METRICS: tuple[str, ...] = ("accuracy", "ece", "nll", "brier")
# The means per family and per severity of report.corruption_summary.
GROUP_METRICS: tuple[str, ...] = ("accuracy", "ece")
# What temperature_scaling.raw and .scaled hold.
TEMPERATURE_METRICS: tuple[str, ...] = ("accuracy", "ece", "adaptive_ece", "nll", "brier")


def in_place(place: Place) -> list[Metric]:
    """The metrics of one place, in registry order."""
    return [m for m in METRICS.values() if m.place is place]
