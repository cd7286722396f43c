"""Trust beyond calibration: the conformal section (the sets fitted on the calibration split, scored on the clean
view and every other view), OOD detection against a second source and accuracy estimated without labels on an
unlabeled one. The selective-prediction metrics are in every view's metrics (`runner.view_result`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from macs_audit.audit.calibration import SPLIT
from macs_audit.audit.inference import evaluate_view
from macs_audit.audit.options import AuditOptions, workers
from macs_audit.distributed import SINGLE, Context
from macs_audit.metrics import conformal, label_free, ood, selective
from macs_audit.models.predictor import Predictor
from macs_audit.progress import ProgressFn, Stage, step
from macs_audit.report import Conformal, OODDetection, Unlabeled, ViewResult

OOD_STAGE = Stage("OOD detection", "resamples")
LABEL_FREE_STAGE = Stage("label-free estimates", "resamples")


@dataclasses.dataclass(frozen=True)
class TrustResult:
    """What selective prediction, conformal sets, OOD detection and the unlabeled estimate add to the Report."""

    conformal: Conformal | None = None
    ood: OODDetection | None = None
    unlabeled: Unlabeled | None = None
    conventions: dict = dataclasses.field(default_factory=dict)
    seeds: dict = dataclasses.field(default_factory=dict)
    target_logits: dict = dataclasses.field(
        default_factory=dict
    )  # "ood", "unlabeled": their logits, for --save-predictions


def conformal_section(
    logits: np.ndarray, labels: np.ndarray, sets: conformal.SplitConformal, view_results: list[ViewResult], seed: int
) -> Conformal:
    """The sets' thresholds and statistics on the clean view's scored part, and their mean over the corruption
    views (each view holds its own, `ViewResult.conformal`)."""
    corrupted = {v.name: v.conformal for v in view_results if v.kind == "corruption" and v.conformal}
    return Conformal.of(
        target_coverage=sets.coverage,
        n_calibration=len(labels) - len(sets.scored),
        n_eval=len(sets.scored),
        methods=sets.records(logits),
        split=sets.split or f"the temperature's: {SPLIT}",
        seed=seed,
        corruption_mean=conformal.summarize_views(corrupted) if corrupted else None,
    )


def audit_trust(
    predictor: Predictor,
    logits: np.ndarray,
    labels: np.ndarray,
    num_classes: int,
    options: AuditOptions,
    *,
    sets: conformal.SplitConformal | None,
    view_results: list[ViewResult],
    progress: ProgressFn | None = None,
    ctx: Context = SINGLE,
    temperature: float | None = None,
) -> TrustResult:
    """The conformal section from the clean logits (and the views' coverage); the OOD and unlabeled sources'
    passes (the label-free estimates on the scores of logits / `temperature`, the audit's, when it fitted one)."""
    conventions: dict = {"selective": selective.CONVENTION}
    seeds: dict = {}
    section = None
    if sets is not None:
        section = conformal_section(logits, labels, sets, view_results, options.seed)
        conventions["conformal"] = conformal.CONVENTION
    ood_section: OODDetection | None = None
    unlabeled: Unlabeled | None = None
    kept: dict = {}
    for purpose, target in (("ood", options.ood_source), ("unlabeled", options.unlabeled_source)):
        if target is None:
            continue
        _, target_logits = evaluate_view(
            predictor,
            target,
            num_classes,
            options.batch_size,
            progress=progress,
            description=f"{purpose} data",
            keep_logits=True,
            ctx=ctx,
            workers=workers(options, ctx),
            accumulate=False,
        )
        kept[purpose] = target_logits
        about: dict[str, Any] = {"source": target.name, "format": target.format}  # the JSON's first keys
        about.update(bootstrap_resamples=options.bootstrap, seed=options.seed)
        finish = step(progress, OOD_STAGE if purpose == "ood" else LABEL_FREE_STAGE, max(1, options.bootstrap))
        if purpose == "ood":
            scores = ood.ood_section(logits, target_logits, options.bootstrap, options.seed)
            finish()
            ood_section = OODDetection.of(**about, n_in=len(logits), n_out=len(target_logits), scores=scores)
            conventions["ood"] = ood.CONVENTION
        else:
            estimates = label_free.estimates(
                logits, labels, target_logits, options.bootstrap, options.seed, temperature=temperature
            )
            finish()
            accuracy = float((logits.argmax(axis=1) == labels).mean())
            unlabeled = Unlabeled.of(**about, n=len(target_logits), source_accuracy=accuracy, estimates=estimates)
            conventions["label_free"] = label_free.CONVENTION
        seeds[purpose] = options.seed
    return TrustResult(
        conformal=section,
        ood=ood_section,
        unlabeled=unlabeled,
        conventions=conventions,
        seeds=seeds,
        target_logits=kept,
    )
