"""The parity section's rows (`evaluate --reference`): each view's agreement and flips, then each metric's
paired difference between the candidate and the reference model, as plain rows of strings for the Markdown,
HTML and terminal formats (formats/layout.py titles them). Values and changes are written by
macs_audit.numbers, labels come from the metric registry."""

from __future__ import annotations

from macs_audit.metrics.registry import METRICS
from macs_audit.numbers import format_change, format_value
from macs_audit.report import Report

# The metrics a parity table shows (metrics.parity.DIFFERENCE_METRICS, in the registry's words).
PARITY_METRICS = ("accuracy", "ece", "smooth_ece", "nll", "brier")


def parity_header() -> list[str]:
    return ["view", "agree", "c->w", "w->c", "max |dz|", "mean KL", "d acc", "d ECE"]


def parity_rows(report: Report) -> list[list[str]]:
    """Every view of the parity section: agreement, flips, logit and KL differences, the two headline changes."""
    if report.parity is None:
        return []
    return [
        [
            view.name,
            format_value(view.agreement, True),
            f"{view.correct_to_wrong:,}",
            f"{view.wrong_to_correct:,}",
            format_value(view.max_abs_logit_difference, False),
            format_value(view.mean_kl, False),
            format_change(view.metrics["accuracy"]["difference"], True),
            format_change(view.metrics["ece"]["difference"], True),
        ]
        for view in report.parity.views
    ]


def _change_interval(ci: list[float] | None, percent: bool) -> str:
    """A paired interval of a change, in the change's unit without repeating it: `[-0.12, +0.40]`."""
    if not ci:
        return ""
    scale, decimals = (100, 2) if percent else (1, 4)
    return f"[{scale * ci[0]:+.{decimals}f}, {scale * ci[1]:+.{decimals}f}]"


def parity_difference_rows(report: Report) -> list[list[str]]:
    """The clean and perturbation views' differences with their paired intervals: a row per metric, then the
    conformal sets' coverage at the reference's threshold (`ref q`) and at the candidate's own (`own q`)."""
    if report.parity is None:
        return []
    rows = []
    for view in report.parity.views:
        if view.kind == "corruption":
            continue
        for name in PARITY_METRICS:
            entry, metric = view.metrics[name], METRICS[name]
            rows.append(
                [
                    view.name,
                    metric.label,
                    format_value(entry["reference"], metric.percent),
                    format_value(entry["candidate"], metric.percent),
                    format_change(entry["difference"], metric.percent),
                    _change_interval(entry.get("interval"), metric.percent),
                ]
            )
        for method, sets in (view.conformal or {}).items():
            for side, label in (("at_reference_threshold", "ref q"), ("at_own_threshold", "own q")):
                change = sets["differences"][f"coverage_{side}"]
                rows.append(
                    [
                        view.name,
                        f"{method.upper()} cov., {label}",
                        format_value(sets["reference"]["coverage"], True),
                        format_value(sets[f"candidate_{side}"]["coverage"], True),
                        format_change(change["difference"], True),
                        _change_interval(change.get("interval"), True),
                    ]
                )
    return rows
