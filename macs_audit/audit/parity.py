"""Deployment parity: a reference model scored on the same images as the audited (candidate) model, in the same
pass over the data. `ParityRecorder` is the inference loop's observer (`runner.evaluate_view`): for every batch
of every view the candidate predicts, it runs the reference on the same images and keeps both logits until the
view ends; each view is then summarised (metrics.parity) and its logits dropped, so one view's logits are held
at a time. `run_audit(..., reference=)` drives it and the Report's `parity` section is its `section()`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from macs_audit.audit.calibration import Split
from macs_audit.errors import InputError, UsageError
from macs_audit.metrics import accumulators, conformal, parity
from macs_audit.models.predictor import Predictor
from macs_audit.report import ModelInfo, Parity, ParityView
from macs_audit.seeding import derive_seed
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
    the same images with the reference; a view is summarised when the next begins or at `section()`."""

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
    ):
        self.reference, self.labels, self.num_classes = reference, np.asarray(labels), num_classes
        self.split, self.coverage, self.resamples, self.seed = split, coverage, resamples, seed
        self.thresholds: dict[str, dict[str, float]] | None = None
        self.views: list[ParityView] = []
        self._view: View | None = None
        self._batches: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []  # (start, ref, cand, labels)

    def observe(self, view: View, start: int, images: np.ndarray, labels: np.ndarray, logits: np.ndarray) -> None:
        """One batch of `view` at data-set position `start`, and the candidate's logits on it."""
        if self._view is not None and view.name != self._view.name:
            self._finish()
        self._view = view
        if not isinstance(images, np.ndarray) and self.reference.backend != "torch":
            images = images.cpu().numpy()  # a torch candidate's device-resident batch, for onnxruntime
        reference = self.reference.predict(images)
        if reference.shape != logits.shape:
            raise InputError(f"the reference outputs {reference.shape[1]} classes but the candidate {logits.shape[1]}")
        self._batches.append((start, reference, np.asarray(logits), np.asarray(labels)))

    def _finish(self) -> None:
        view, batches = self._view, sorted(self._batches, key=lambda b: b[0])
        self._view, self._batches = None, []
        if view is None or not batches:
            return
        reference = np.concatenate([b[1] for b in batches])
        candidate = np.concatenate([b[2] for b in batches])
        labels = np.concatenate([b[3] for b in batches])  # the batches' own: a view may read another source
        if view.kind == "clean" and self.split is not None:
            self.thresholds = {
                side: conformal.fit_thresholds(logits[self.split.fit], labels[self.split.fit], self.coverage)
                for side, logits in (("reference", reference), ("candidate", candidate))
            }
        self.views.append(self._summarise(view, reference, candidate, labels))

    def _summarise(self, view: View, reference: np.ndarray, candidate: np.ndarray, labels: np.ndarray) -> ParityView:
        seed = derive_seed("parity", self.seed, view.name)
        per_sample = parity.agreement(reference, candidate, labels)
        summary = parity.agreement_summary(per_sample)
        accs = []
        for logits in (reference, candidate):
            acc = accumulators.CalibrationAccumulator(self.num_classes)
            acc.update(logits, labels)
            accs.append(acc)
        # The grid's cells get intervals of the means only, as the audit gives its cells none at all.
        metrics, columns = parity.metric_differences(
            accs[0],
            accs[1],
            self.resamples,
            seed,
            errors=view.kind != "corruption",
            columns={"agreement": per_sample["agree"]},
        )
        sets = None
        if self.thresholds is not None and self.split is not None and len(labels) == len(self.labels):
            scored = self.split.scored
            sets = parity.conformal_differences(
                reference[scored], candidate[scored], labels[scored], self.thresholds, self.resamples, seed
            )
        return ParityView.of(
            name=view.name,
            kind=view.kind,
            corruption=view.corruption,
            severity=view.severity,
            n=len(labels),
            agreement=summary["agreement"],
            agreement_interval=columns.get("agreement"),
            correct_to_wrong=summary["correct_to_wrong"],
            wrong_to_correct=summary["wrong_to_correct"],
            mean_abs_logit_difference=summary["mean_abs_logit_difference"],
            max_abs_logit_difference=summary["max_abs_logit_difference"],
            mean_kl=summary["mean_kl"],
            metrics=metrics,
            conformal=sets,
        )

    def section(self) -> Parity:
        """The Report's parity section, the last view summarised first."""
        self._finish()
        return Parity.of(
            reference=ModelInfo.of(**{k: self.reference.info[k] for k in REFERENCE_INFO if k in self.reference.info}),
            bootstrap_resamples=self.resamples,
            seed=self.seed,
            views=self.views,
        )
