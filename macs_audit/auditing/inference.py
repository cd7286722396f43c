"""The inference loop: one view of a source through a predictor into an accumulator (`evaluate_view`, run as a
`Loop` says), and the view's section of the Report from that accumulator (`view_result`), its bootstrap intervals
its own. An observer of the loop (the parity section's) sees every batch and gets the statistic it pairs with each
view's bootstrap run on the intervals' resamples. Fine-tuning's validation and `calibrate`'s fit read logits
through the same loop."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import numpy as np

from macs_audit import distributed
from macs_audit.auditing.classes import MappedAccumulator, scores_unrestricted, unrestricted_metrics
from macs_audit.auditing.options import AuditOptions, RunContext, workers
from macs_audit.data.batching import device_images, owned_starts, prefetched
from macs_audit.data.sources import Source
from macs_audit.distributed import SINGLE, Context
from macs_audit.errors import InputError
from macs_audit.metrics import accumulators, bootstrap, selective
from macs_audit.metrics.resampling import PairedStatistic
from macs_audit.models.predictor import Predictor
from macs_audit.progress import ProgressFn, Stage, step
from macs_audit.report import Reliability, ViewResult
from macs_audit.views import view as views
from macs_audit.views.corruptions.table import FAMILIES
from macs_audit.views.view import View


class ViewObserver(Protocol):
    """Sees every batch the loop scores (`observe`): the view, its data-set position, the view's images, the labels
    and the predictor's logits (auditing/parity.py scores a reference model on the same images, in the same pass);
    and computes a statistic of each view it saw paired with the view's own bootstrap (`view_result`): run on the
    very resamples of the view's intervals, and handed back with the view's result. A view it did not see gets no
    statistic (None) and is not handed back."""

    def observe(self, view: View, start: int, images: Any, labels: np.ndarray, logits: np.ndarray) -> None: ...

    def paired_statistic(
        self, view: View, acc: accumulators.CalibrationAccumulator, resamples: int
    ) -> PairedStatistic | None: ...

    def summarise(self, scored: ScoredView) -> None: ...


class FeatureSink(Protocol):
    """Takes the penultimate features of every batch the loop scores (auditing/features.py): `observe` each batch's
    (N, D) float32 features at its data-set position, then `finish` the pass, named by its stage (the view's name,
    or the pass's description: "ood data", "shift: NAME"), gathered across ranks."""

    def observe(self, start: int, features: np.ndarray) -> None: ...

    def finish(self, name: str, view: View, ctx: Context) -> None: ...


class PropertySink(Protocol):
    """Takes the images of every batch of a pass at their data-set position (metrics/image_properties.py)."""

    def observe(self, start: int, images: Any) -> None: ...


@dataclasses.dataclass(frozen=True)
class Loop:
    """How the loop runs a pass, the same for every pass of a run: `batch_size` images a model call, ImageFolder
    decoded by `workers` processes, this rank's shard under torch.distributed (`ctx`), every batch counted to
    `progress` and seen by `observer` (its statistic then paired with each view's bootstrap: `view_result`)."""

    batch_size: int
    workers: int = 0
    ctx: Context = SINGLE
    progress: ProgressFn | None = None
    observer: ViewObserver | None = None
    features: FeatureSink | None = None  # the predictor's features of every batch (it must give them: enabled)
    properties: PropertySink | None = None  # every batch's images, as the model gets them (the clean pass's)

    def show(self, view: View, start: int, images: Any, labels: np.ndarray, logits: np.ndarray) -> None:
        """A scored batch, to the observer and the property sink."""
        if self.observer is not None:
            self.observer.observe(view, start, images, labels, logits)
        if self.properties is not None:
            self.properties.observe(start, images)

    @classmethod
    def of_audit(cls, options: AuditOptions, context: RunContext, observer: ViewObserver | None = None) -> Loop:
        """The audit's passes: its batch size and decoding processes, its context's processes, progress and feature
        sink."""
        return cls(
            options.batch_size, workers(options, context.ctx), context.ctx, context.progress, observer, context.features
        )


def evaluate_view(
    predictor: Predictor,
    source: Source,
    num_classes: int,
    loop: Loop,
    *,
    view: View = views.CLEAN,
    description: str | Stage | None = None,
    keep_logits: bool = False,
    accumulate: bool = True,
):
    """Run one view over the whole source (this rank's shard under torch.distributed, then
    combined across ranks) as `loop` says; return (accumulator, logits or None). `accumulate=False` only predicts
    (an unlabeled source): the accumulator returned is then None. The loop's observer and property sink see
    every batch.

    A torch model on CUDA gets the whole split as one device tensor when it fits (views then run
    on the device with no host round trip), else page-locked host batches. A predictor restricted to a subset of
    its outputs (auditing/classes.py) fills a MappedAccumulator: the view scored unrestricted too."""
    mapped = scores_unrestricted(predictor) if accumulate else None
    acc = (
        (MappedAccumulator(mapped.space) if mapped is not None else accumulators.CalibrationAccumulator(num_classes))
        if accumulate
        else None
    )
    kept, starts = [], []
    done = 0
    ctx, progress = loop.ctx, loop.progress
    total = sum(min(loop.batch_size, len(source) - st) for st in owned_starts(source, loop.batch_size, ctx))
    stage = description if isinstance(description, Stage) else Stage(description or view.name)
    if progress:
        progress(stage, 0, total)  # the stage begins here: its time is its passes and their accumulation
    device = predictor.device
    torch_gpu = device.startswith("cuda") and predictor.backend == "torch"
    resident = device_images(source, device) if torch_gpu else None
    for start, images, labels in prefetched(
        source,
        loop.batch_size,
        view,
        ctx,
        resident=resident,
        pin=torch_gpu and resident is None,
        workers=loop.workers,
        overlap=device.startswith("cuda"),
    ):
        if mapped is not None and isinstance(acc, MappedAccumulator):
            logits = acc.update_both(_predict(mapped.inner, images, start, loop.features), labels)
        else:
            logits = _predict(predictor, images, start, loop.features)
            if logits.shape[1] != num_classes:
                raise InputError(f"the model outputs {logits.shape[1]} classes but the data has {num_classes}")
            if acc is not None:
                acc.update(logits, labels)
        loop.show(view, start, images, labels, logits)
        starts.append(start)
        if keep_logits:
            kept.append(logits)
        done += len(labels)
        if progress:
            progress(stage, done, total)
    if loop.features is not None:
        loop.features.finish(stage.name, view, ctx)
    if acc is not None:
        acc = acc.reduce(starts, ctx)
    if keep_logits:
        kept = distributed.gather_in_order(kept, starts, ctx)
    return acc, (np.concatenate(kept) if keep_logits else None)


def _predict(predictor: Any, images: Any, start: int, features: FeatureSink | None) -> np.ndarray:
    """The predictor's logits of a batch; with a feature sink, in the same call its features, which the sink takes."""
    if features is None:
        return predictor.predict(images)
    logits, taken = predictor.predict_with_features(images)
    features.observe(start, taken)
    return logits


def intervals_stage(view: View) -> Stage:
    return Stage(f"{view.name}: bootstrap intervals", "resamples")


@dataclasses.dataclass(frozen=True)
class ScoredView:
    """A view's section, and the values of a statistic paired with its bootstrap on the same resamples
    (metrics.bootstrap.paired_bootstrap; {} without one, or without intervals)."""

    result: ViewResult
    paired: dict[str, np.ndarray]


def view_result(
    view: View,
    acc: accumulators.CalibrationAccumulator,
    resamples: int,
    seed: int,
    progress: ProgressFn | None = None,
    *,
    conformal: dict | None = None,
    observer: ViewObserver | None = None,
) -> ViewResult:
    """The view's section of the Report: its metrics, selective-prediction metrics and reliability, and
    `conformal` (the calibration split's sets scored on the view, or None); with `resamples`, its bootstrap
    intervals, a stage of its own (`intervals_stage`). `observer` (the observer of the view's pass in
    `evaluate_view`) gets its statistic of the view computed on the resamples of the view's intervals and handed
    back to it (`ViewObserver`): the intervals are the view's own."""
    paired = observer.paired_statistic(view, acc, resamples) if observer is not None else None
    finish = step(progress if resamples > 0 and acc.count > 1 else None, intervals_stage(view), resamples)
    metrics = acc.compute()
    samples = acc.samples()
    metrics.update(selective.selective_metrics(samples["confidence"], samples["correct"]))
    intervals, paired_values = bootstrap.paired_bootstrap(acc, resamples, seed, paired, estimates=metrics)
    result = ViewResult(
        name=view.name,
        kind=view.kind,
        metrics=metrics,
        intervals=intervals,
        reliability=Reliability.from_dict(acc.reliability()),
        # Not per grid cell: 95 curves would double the report for a plot nobody draws.
        smooth_reliability=acc.smooth_reliability() if view.kind != "corruption" else None,
        corruption=view.corruption,
        severity=view.severity,
        family=FAMILIES[view.corruption] if view.corruption else None,
        risk_coverage=(
            selective.curve_points(selective.risk_curve(samples["confidence"], samples["correct"]))
            if view.kind == "clean"
            else None
        ),
        conformal=conformal,
        unrestricted=unrestricted_metrics(acc),
    )
    finish()
    if observer is not None and paired is not None:
        observer.summarise(ScoredView(result, paired_values))
    return result
