"""Trust beyond calibration: the conformal section (the sets fitted on the calibration split, scored on the clean
view and every other view), OOD detection against a second source and accuracy estimated without labels on an
unlabeled one. The sources' passes through the model (`target_logits`) come apart from what is computed of the
logits (`audit_trust`), which an audit of saved logits shares. The selective-prediction metrics are in every
view's metrics (`inference.view_result`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from macs_audit.auditing.calibration import SPLIT
from macs_audit.auditing.inference import Loop, evaluate_view
from macs_audit.auditing.options import DEFAULT_CONTEXT, AuditInputs, AuditOptions, RunContext
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


@dataclasses.dataclass(frozen=True)
class Target:
    """A data set the trust half reads by the model's logits on it alone: the OOD data or the unlabeled images."""

    source: str  # its name, as the section records it
    format: str | None
    logits: np.ndarray


def target_logits(
    predictor: Predictor,
    inputs: AuditInputs,
    num_classes: int,
    options: AuditOptions,
    context: RunContext = DEFAULT_CONTEXT,
) -> dict[str, Target]:
    """The OOD and unlabeled sources of `inputs` through the model (their labels unused), by purpose. No observer
    sees their passes: they are no view of the audited data."""
    loop = Loop.of_audit(options, context)
    targets = {}
    for purpose, source in (("ood", inputs.ood_source), ("unlabeled", inputs.unlabeled_source)):
        if source is None:
            continue
        _, logits = evaluate_view(
            predictor, source, num_classes, loop, description=f"{purpose} data", keep_logits=True, accumulate=False
        )
        assert logits is not None
        targets[purpose] = Target(source.name, source.format, logits)
    return targets


def conformal_section(logits: np.ndarray, labels: np.ndarray, sets: conformal.SplitConformal, seed: int) -> Conformal:
    """The sets' thresholds and statistics on the clean view's scored part (`with_corruption_mean` adds their
    mean over the corruption views; each view holds its own, `ViewResult.conformal`)."""
    return Conformal.of(
        target_coverage=sets.coverage,
        n_calibration=len(labels) - len(sets.scored),
        n_eval=len(sets.scored),
        methods=sets.records(logits),
        split=sets.split or f"the temperature's: {SPLIT}",
        seed=seed,
        corruption_mean=None,
    )


def with_corruption_mean(section: Conformal | None, view_results: list[ViewResult]) -> Conformal | None:
    """`section` with the sets' mean statistics over the corruption views of `view_results`, where there are any."""
    corrupted = {v.name: v.conformal for v in view_results if v.kind == "corruption" and v.conformal}
    if section is None or not corrupted:
        return section
    return dataclasses.replace(section, corruption_mean=conformal.summarize_views(corrupted))


def audit_trust(
    logits: np.ndarray,
    labels: np.ndarray,
    options: AuditOptions,
    *,
    sets: conformal.SplitConformal | None,
    targets: dict[str, Target],
    progress: ProgressFn | None = None,
    temperature: float | None = None,
) -> TrustResult:
    """From the clean view's logits alone: the conformal section, OOD detection against `targets["ood"]` and the
    label-free estimates of `targets["unlabeled"]`'s accuracy (on the scores of logits / `temperature`, the
    audit's, when it fitted one)."""
    conventions: dict = {"selective": selective.CONVENTION}
    seeds: dict = {}
    section = None
    if sets is not None:
        section = conformal_section(logits, labels, sets, options.seed)
        conventions["conformal"] = conformal.CONVENTION
    ood_section: OODDetection | None = None
    unlabeled: Unlabeled | None = None
    for purpose, target in targets.items():
        about: dict[str, Any] = {"source": target.source, "format": target.format}  # the JSON's first keys
        about.update(bootstrap_resamples=options.bootstrap, seed=options.seed)
        finish = step(progress, OOD_STAGE if purpose == "ood" else LABEL_FREE_STAGE, max(1, options.bootstrap))
        if purpose == "ood":
            scores_in, scores_out = ood.scores(logits), ood.scores(target.logits)
            scores = ood.scores_section(scores_in, scores_out, options.bootstrap, options.seed)
            finish()
            ood_section = OODDetection.of(
                **about,
                n_in=len(logits),
                n_out=len(target.logits),
                scores=scores,
                histograms=ood.histograms(scores_in, scores_out),
            )
            conventions["ood"] = ood.CONVENTION
        else:
            estimates = label_free.estimates(
                logits, labels, target.logits, options.bootstrap, options.seed, temperature=temperature
            )
            finish()
            accuracy = float((logits.argmax(axis=1) == labels).mean())
            unlabeled = Unlabeled.of(**about, n=len(target.logits), source_accuracy=accuracy, estimates=estimates)
            conventions["label_free"] = label_free.CONVENTION
        seeds[purpose] = options.seed
    return TrustResult(
        conformal=section,
        ood=ood_section,
        unlabeled=unlabeled,
        conventions=conventions,
        seeds=seeds,
        target_logits={purpose: target.logits for purpose, target in targets.items()},
    )
