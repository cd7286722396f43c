"""The natural-shift sets (`--shift-data NAME=DIR`: ImageNet-A, -R, -Sketch, -V2, ...) as evaluation views.

Each set runs once through the model; its logits are scored under both conventions of a subset of the model's
classes (data/label_space.py maps them):

- restricted, the default: the softmax over the logits of the set's classes only (the timm and Hendrycks
  evaluation code); accuracy, every ECE, NLL, Brier and the rest, with their intervals;
- unrestricted: the softmax over every output, the labels as output indices; a top-1 outside the set is wrong.

The conformal sets fitted on the clean data's calibration split are scored on the unrestricted outputs (they
were fitted on every output's softmax), on every image of the set, where the clean data's classes are the
model's outputs in order (otherwise they were fitted over the data's classes, auditing/classes.py, and are not).
Each view holds the shift papers' RMS calibration error (metrics/rms_calibration.py) as every view does, from
200 images.

With `--real-labels`, the clean view's logits are also scored against the ImageNet ReaL labels
(`real_labels_section`, metrics/real_labels.py).
"""

from __future__ import annotations

import numpy as np

from macs_audit.auditing.classes import CHUNK, restricted_accumulator
from macs_audit.auditing.inference import Loop, ViewObserver, evaluate_view, view_result
from macs_audit.auditing.options import DEFAULT_CONTEXT, AuditOptions, RunContext
from macs_audit.data.label_space import MappedSource
from macs_audit.data.real_labels import RealLabelSets
from macs_audit.metrics import accumulators, conformal
from macs_audit.metrics import real_labels as real
from macs_audit.models.predictor import Predictor
from macs_audit.progress import ProgressFn
from macs_audit.report import RealLabels, Shift, ShiftSetResult
from macs_audit.views.view import CLEAN, View

RESTRICTED, UNRESTRICTED = "restricted", "unrestricted"
PREDICTIONS_FORMAT = "predictions"  # a saved set's format (auditing/saved.py)
SAVED_MAPPING = "position"  # a saved set's columns are the audited predictions' classes, in their order
CONVENTION = (
    "restricted (the default; every metric of shift.sets.*.restricted and shift.mean.restricted): softmax over "
    "the logits of the set's classes only, labels as the set's classes; unrestricted: softmax over every model "
    "output, labels as output indices, a top-1 outside the set counts as wrong; the conformal sets (fitted on "
    "the clean calibration split) are scored on every output"
)


def shift_view(name: str) -> View:
    """The view of a shift set: its images as they are (the model's preprocessing, read once)."""
    return View(name, "shift", CLEAN.transform)


def audit_shift_set(
    predictor: Predictor,
    mapped: MappedSource,
    options: AuditOptions,
    *,
    sets: conformal.SplitConformal | None = None,
    loop: Loop | None = None,
) -> ShiftSetResult:
    """One shift set through the model (this rank's batches under torchrun, gathered), scored both ways, as `loop`
    says (default: the audit's, in one process); the loop's observer sees its batches and pairs its statistic with
    the restricted view's (inference.view_result)."""
    loop = loop or Loop.of_audit(options, DEFAULT_CONTEXT)
    view = shift_view(mapped.name)
    in_outputs = mapped.in_model_labels()
    acc_all, logits = evaluate_view(
        predictor,
        in_outputs,
        mapped.space.num_outputs,
        loop,
        view=view,
        description=f"shift: {mapped.name}",
        keep_logits=True,
    )
    coverage = conformal.evaluate_sets(logits, in_outputs.labels, sets.thresholds) if sets is not None else None
    acc_subset = restricted_accumulator(mapped, logits, mapped.source.labels)
    progress = loop.progress
    restricted = view_result(view, acc_subset, options.bootstrap, options.seed, progress, observer=loop.observer)
    unrestricted = view_result(
        View(f"{mapped.name} ({UNRESTRICTED})", "shift", CLEAN.transform),
        acc_all,
        options.bootstrap,
        options.seed,
        progress,
        conformal=coverage,
    )
    return ShiftSetResult.of(
        source=mapped.source.name,
        format=mapped.source.format,
        n=len(mapped.source),
        num_classes=len(mapped.space.classes),
        num_outputs=mapped.space.num_outputs,
        mapped_by=mapped.space.mapped_by,
        restricted=restricted,
        unrestricted=unrestricted,
    )


def shift_means(results: dict[str, ShiftSetResult]) -> dict[str, dict[str, float]]:
    """Each convention's metrics averaged over the sets (a metric only where every set has it)."""
    means: dict[str, dict[str, float]] = {}
    for convention in (RESTRICTED, UNRESTRICTED):
        views = [getattr(r, convention) for r in results.values()]
        common = [k for k in views[0].metrics if all(k in v.metrics for v in views)]
        means[convention] = {k: float(np.mean([v.metrics[k] for v in views])) for k in common}
    return means


def audit_shift(
    predictor: Predictor,
    shift_sets: tuple[MappedSource, ...],
    options: AuditOptions,
    *,
    sets: conformal.SplitConformal | None = None,
    context: RunContext = DEFAULT_CONTEXT,
    observer: ViewObserver | None = None,
) -> tuple[Shift | None, dict]:
    """The shift section of `shift_sets` (None without any) and the conventions it adds; `observer` sees every
    set's batches (`audit_shift_set`)."""
    if not shift_sets:
        return None, {}
    loop = Loop.of_audit(options, context, observer)
    results = {mapped.name: audit_shift_set(predictor, mapped, options, sets=sets, loop=loop) for mapped in shift_sets}
    section = Shift.of(sets=results, mean=shift_means(results), default_convention=RESTRICTED)
    return section, {"shift": CONVENTION}


def saved_shift_section(
    saved: dict[str, tuple[str, np.ndarray, np.ndarray]],
    options: AuditOptions,
    *,
    sets: conformal.SplitConformal | None = None,
    progress: ProgressFn | None = None,
) -> tuple[Shift | None, dict]:
    """The shift section of shift sets' saved logits, name -> (source, logits (M, K), labels (M,)), labels of the
    audited classes (an audit of predictions: `--shift-predictions`). Every set's classes are all K of them, so
    the two conventions score the same softmax: both are given, as the model audit's section has them, and the
    clean sets are scored on every image."""
    if not saved:
        return None, {}
    results = {}
    for name, (source, logits, labels) in saved.items():
        acc = accumulators.CalibrationAccumulator(logits.shape[1])
        for start in range(0, len(labels), CHUNK):
            acc.update(logits[start : start + CHUNK], labels[start : start + CHUNK])
        coverage = conformal.evaluate_sets(logits, labels, sets.thresholds) if sets is not None else None
        views = {
            convention: view_result(
                View(label, "shift", CLEAN.transform),
                acc,
                options.bootstrap,
                options.seed,
                progress,
                conformal=coverage if convention == UNRESTRICTED else None,
            )
            for convention, label in ((RESTRICTED, name), (UNRESTRICTED, f"{name} ({UNRESTRICTED})"))
        }
        results[name] = ShiftSetResult.of(
            source=source,
            format=PREDICTIONS_FORMAT,
            n=len(labels),
            num_classes=logits.shape[1],
            num_outputs=logits.shape[1],
            mapped_by=SAVED_MAPPING,
            **views,
        )
    section = Shift.of(sets=results, mean=shift_means(results), default_convention=RESTRICTED)
    return section, {"shift": CONVENTION}


def real_labels_section(
    logits: np.ndarray,
    labels: np.ndarray,
    real_labels: RealLabelSets | None,
    *,
    resamples: int = 0,
    seed: int = 0,
) -> tuple[RealLabels | None, dict]:
    """The clean view's scores against the ReaL labels (None without them), with `resamples` bootstrap intervals,
    and the convention it adds."""
    if real_labels is None:
        return None, {}
    scores = real.real_scores(logits, labels, real_labels.sets, resamples, seed)
    return RealLabels.of(source=real_labels.source, **scores), {"real_labels": real.CONVENTION}
