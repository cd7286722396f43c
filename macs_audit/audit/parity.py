"""Deployment parity: a reference model scored on the same images as the audited (candidate) model, in the same
pass over the data. `ParityRecorder` is the inference loop's observer (`runner.evaluate_view`): for every batch
of every view the candidate predicts, it runs the reference on the same images and keeps both logits until the
view's result is made (`runner.view_result`), which asks it for the candidate's bootstrap intervals
(`intervals`): it computes them as a solo audit does and the two models' paired statistics on the same
resamples (metrics.bootstrap.paired_bootstrap), summarises the view (metrics.parity) and drops its logits, so
one view's logits are held at a time. `run_audit(..., reference=)` drives it and the Report's `parity` section
is its `section()`. A shift set is compared in the shift section's default, restricted convention."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from macs_audit.audit.calibration import Split
from macs_audit.data.label_space import MappedSource
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators, bootstrap, conformal, parity, resampling
from macs_audit.models.predictor import Predictor
from macs_audit.report import ModelInfo, Parity, ParityView
from macs_audit.views.view import View

REFERENCE_INFO = ("path", "format", "backend", "device", "provider", "sha256")


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two paths name one file (a copy of it is another file)."""
    try:
        return Path(a).resolve() == Path(b).resolve() or Path(a).samefile(b)
    except OSError:
        return False


def check_pair(reference: Predictor, candidate: Predictor) -> None:
    """Fail unless the two models can be scored on the same images: other files, the same class count and input
    size. The same file twice is a usage error (a copy of it is allowed and gives differences of zero)."""
    ref_path, cand_path = reference.info.get("path"), candidate.info.get("path")
    if ref_path and cand_path and same_file(ref_path, cand_path):
        raise UsageError(f"--reference {ref_path} is the model being audited; give the model it was built from")
    if reference.num_classes is not None and candidate.num_classes is not None:
        if reference.num_classes != candidate.num_classes:
            raise InputError(
                f"the reference has {reference.num_classes} classes but the candidate has {candidate.num_classes}"
            )
    ref_size, cand_size = tuple(reference.config.input_size), tuple(candidate.config.input_size)
    if ref_size != cand_size:
        raise InputError(
            f"the reference takes {ref_size[0]}x{ref_size[1]} images but the candidate takes "
            f"{cand_size[0]}x{cand_size[1]}: parity compares the two on the same images"
        )


class ParityRecorder:
    """The reference's half of the audit: called with every batch the candidate scored (`observe`), it scores
    the same images with the reference; a view is summarised when the candidate's intervals of it are made
    (`intervals`). `shift_sets`: the shift sets the audit scores, whose views are compared restricted to their
    classes, each model's accumulator of the restricted logits made by `restricted_accumulator` (the shift
    section's: a copy of the candidate then gives the same sums)."""

    def __init__(
        self,
        reference: Predictor,
        labels: np.ndarray,
        num_classes: int,
        split: Split | None,
        *,
        coverage: float,
        resamples: int,
        seed: int,
        shift_sets: tuple[MappedSource, ...] = (),
        restricted_accumulator: Callable[[MappedSource, np.ndarray, np.ndarray], accumulators.CalibrationAccumulator]
        | None = None,
    ):
        self.reference, self.labels, self.num_classes = reference, np.asarray(labels), num_classes
        self.split, self.coverage, self.resamples, self.seed = split, coverage, resamples, seed
        if shift_sets and restricted_accumulator is None:
            raise ValueError("shift sets are compared restricted: give their restricted_accumulator")
        self.shift_sets = {mapped.name: mapped for mapped in shift_sets}
        self.restricted_accumulator = restricted_accumulator
        self.thresholds: dict[str, dict[str, float]] | None = None
        self.views: list[ParityView] = []
        self._view: View | None = None
        self._batches: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []  # (start, ref, cand, labels)

    def observe(self, view: View, start: int, images: np.ndarray, labels: np.ndarray, logits: np.ndarray) -> None:
        """One batch of `view` at data-set position `start`, and the candidate's logits on it."""
        if self._view is not None and view.name != self._view.name:
            raise AssertionError(f"parity: view {self._view.name} was scored but not summarised")
        self._view = view
        if not isinstance(images, np.ndarray) and self.reference.backend != "torch":
            images = images.cpu().numpy()  # a torch candidate's device-resident batch, for onnxruntime
        reference = self.reference.predict(images)
        if reference.shape != logits.shape:
            raise InputError(f"the reference outputs {reference.shape[1]} classes but the candidate {logits.shape[1]}")
        self._batches.append((start, reference, np.asarray(logits), np.asarray(labels)))

    def intervals(
        self,
        view: View,
        acc: accumulators.CalibrationAccumulator,
        resamples: int,
        seed: int,
        estimates: dict[str, float],
    ) -> dict[str, list[float]]:
        """The candidate's bootstrap intervals of `view` (`acc`, its `estimates`), as bootstrap.bootstrap_intervals
        gives them; the view's parity summary made on the same resamples. A grid cell's candidate gets no
        intervals (`resamples` 0): both models' means are then resampled `self.resamples` times from `seed`."""
        if self._view is None or view.name != self._view.name:  # a view the reference did not score
            return bootstrap.bootstrap_intervals(acc, resamples, seed, estimates=estimates)
        batches = sorted(self._batches, key=lambda b: b[0])
        self._view, self._batches = None, []
        reference = np.concatenate([b[1] for b in batches])
        candidate = np.concatenate([b[2] for b in batches])
        labels = np.concatenate([b[3] for b in batches])  # the batches' own: a view may read another source
        if view.kind == "clean" and self.split is not None:
            self.thresholds = {
                side: conformal.fit_thresholds(logits[self.split.fit], labels[self.split.fit], self.coverage)
                for side, logits in (("reference", reference), ("candidate", candidate))
            }
        sets, set_columns, within = self._sets(view, reference, candidate, labels)
        mapped = self.shift_sets.get(view.name) if view.kind == "shift" else None
        if mapped is not None and self.restricted_accumulator is not None:
            # The restricted convention: the set's classes' logits, the labels as the set's classes.
            to_class = np.full(mapped.space.num_outputs, -1)
            to_class[mapped.space.outputs] = np.arange(len(mapped.space.outputs))
            labels = to_class[labels]
            reference_acc = self.restricted_accumulator(mapped, reference, labels)
            reference, candidate = mapped.space.restrict(reference), mapped.space.restrict(candidate)
        else:  # batch by batch, as the loop accumulated the candidate's: a copy of it gives the same sums
            reference_acc = accumulators.CalibrationAccumulator(acc.num_classes)
            for _, logits, _, batch_labels in batches:
                reference_acc.update(logits, batch_labels)
        per_sample = parity.agreement(reference, candidate, labels)
        statistic = parity.paired_statistic(
            reference_acc,
            acc,
            errors=resamples > 0,
            columns={"agreement": per_sample["agree"], **set_columns},
            within=dict.fromkeys(set_columns, within),
        )
        n = len(labels)
        intervals, resampled = bootstrap.paired_bootstrap(acc, resamples, seed, statistic, estimates=estimates)
        if not resampled and self.resamples > 0 and n >= bootstrap.MIN_BOOTSTRAP_SAMPLES:
            # A grid cell, which the candidate does not resample: the means alone, on draws of the same seed.
            resampled = resampling.resampled(n, self.resamples, seed, lambda counts: statistic(counts, {}))
        if sets is not None:
            parity.add_set_intervals(sets, {k: v for k, v in resampled.items() if k in set_columns})
        summary = parity.agreement_summary(per_sample)
        self.views.append(
            ParityView.of(
                name=view.name,
                kind=view.kind,
                corruption=view.corruption,
                severity=view.severity,
                n=n,
                agreement=summary["agreement"],
                agreement_interval=parity.column_interval(resampled["agreement"]) if "agreement" in resampled else None,
                correct_to_wrong=summary["correct_to_wrong"],
                wrong_to_correct=summary["wrong_to_correct"],
                mean_abs_logit_difference=summary["mean_abs_logit_difference"],
                max_abs_logit_difference=summary["max_abs_logit_difference"],
                mean_kl=summary["mean_kl"],
                metrics=parity.differences(reference_acc.compute(), estimates, resampled),
                conformal=sets,
            )
        )
        return intervals

    def _sets(self, view: View, reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray) -> tuple:
        """(the view's conformal entries, their per-image difference columns, the images they are over) at both
        models' thresholds, or (None, {}, None) without a calibration split: the split's scored part of a view of
        the clean images, every image of a shift set (scored on every output, as the shift section scores them)."""
        if self.thresholds is None or self.split is None:
            return None, {}, None
        within = np.zeros(len(labels), dtype=bool)
        if view.kind == "shift":
            within[:] = True
        elif len(labels) == len(self.labels):
            within[self.split.scored] = True
        else:
            return None, {}, None
        sets, columns = parity.conformal_sets(reference, candidate, labels, self.thresholds, within)
        return sets, columns, within

    def section(self) -> Parity:
        """The Report's parity section, the views in the order they were summarised."""
        return Parity.of(
            reference=ModelInfo.of(**{k: self.reference.info[k] for k in REFERENCE_INFO if k in self.reference.info}),
            bootstrap_resamples=self.resamples,
            seed=self.seed,
            views=self.views,
        )
