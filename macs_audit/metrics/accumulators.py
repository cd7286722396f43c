"""Calibration metrics as mergeable accumulators (one definition per metric).

Conventions (docs/method.md §2): softmax in float64 from the logits; 15 equal-width bins,
bin b holds confidences in (b/15, (b+1)/15], with 0 in the first bin and 1 in the last; Brier
summed over classes; NLL in nats; margins on raw logits against the true label.

`CalibrationAccumulator.update` takes one batch; `merge` adds another accumulator exactly
(fixed-size float64 sums plus the per-sample confidence/correctness/NLL arrays that equal-mass
ECE and the bootstrap need); `compute` returns the metrics of everything seen so far. The
functional `calibration_metrics(logits, labels, K)` is one update plus compute.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any

import numpy as np

from macs_audit import distributed
from macs_audit.errors import InputError
from macs_audit.metrics import estimators, l2_ece, rms_calibration, smooth_ece
from macs_audit.metrics.conventions import MARGIN_TARGET, N_BINS, softmax_with_log
from macs_audit.metrics.margins import logit_margin

CONVENTIONS = {
    "softmax": "float64, from the logits",
    "ece_bins": N_BINS,
    "ece_bin_edges": "equal width, (lo, hi]; confidence 0 in the first bin, 1 in the last",
    "adaptive_ece": (
        "15 equal-mass bins over sorted confidences (ties broken by correctness), sizes differ by at most one"
    ),
    "classwise_ece": "15 equal-width bins per class, averaged over classes (Kull et al. 2019)",
    "smooth_ece": (
        "Blasiok-Nakkiran smooth ECE: Gaussian kernel reflected at 0 and 1, bandwidth at the fixed point "
        "smECE = sigma on [0.001, 1] (solved to 1e-9), confidences on a 5,000-cell grid"
    ),
    "l2_ece": "sqrt of sum_b (n_b/N) (acc_b - conf_b)^2 over the adaptive ECE's 15 equal-mass bins (plug-in)",
    "debiased_l2_ece": "the L2 ECE less each bin's sampling variance acc_b (1 - acc_b) / (n_b - 1) (Kumar et al. 2019)",
    "rms_calibration_error": rms_calibration.CONVENTION,
    "ece_sweep": "L1 ECE over the most equal-mass bins whose accuracies rise monotonically (Roelofs et al. 2022)",
    "nll": "mean negative log-likelihood of the true class, nats",
    "brier": "mean over samples of the squared error summed over classes, range [0, 2]",
    "margin": "z[y] - max_{j != y} z[j] on raw logits, true label",
    "margin_target": MARGIN_TARGET,
    "units": "fractions in [0,1] (not percent)",
}


def bin_index(confidence: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """Bin of each confidence under the (lo, hi] convention; 0 -> first bin, 1 -> last."""
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    return np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)


def bin_indicator(confidence: np.ndarray, n_bins: int = N_BINS) -> np.ndarray:
    """(N, n_bins): 1 in each confidence's bin (`bin_index`), 0 elsewhere, for per-bin sums as one product."""
    indicator = np.zeros((len(confidence), n_bins))
    indicator[np.arange(len(confidence)), bin_index(confidence, n_bins)] = 1.0
    return indicator


def ece_from_bins(count: np.ndarray, conf_sum: np.ndarray, correct_sum: np.ndarray, total: int) -> float:
    nonzero = count > 0
    gap = np.abs(correct_sum[nonzero] - conf_sum[nonzero])  # n_b * |acc_b - conf_b|
    return float(gap.sum() / total)


def adaptive_ece(confidence: np.ndarray, correct: np.ndarray, n_bins: int = N_BINS) -> float:
    """Equal-mass ECE: contiguous groups of sorted confidences, sizes differing by at most one."""
    n = len(confidence)
    _, conf_sum, hit_sum = estimators.group_sums(estimators.SortedPrefix(confidence, correct), min(n_bins, n))
    return float(np.abs(hit_sum - conf_sum).sum() / n)


class Reduction(enum.Enum):
    """How a field of the accumulator combines: over batches (`merge`) and over torchrun ranks (`reduce`)."""

    SUM = "sum"  # a fixed-size float64/int64 sum: added
    GATHER = "gather"  # per-sample values, one array per batch: concatenated in data-set order


@dataclasses.dataclass(frozen=True)
class Field:
    """One field of the accumulator: its name, reduction, dtype and shape (() a number, "classes", "bins")."""

    name: str
    reduction: Reduction
    dtype: type
    dims: tuple[str, ...] = ()

    def zero(self, num_classes: int, n_bins: int):
        """The field's value before any sample: 0 (a Python number), zeros of its shape, or no batches."""
        if self.reduction is Reduction.GATHER:
            return []
        if not self.dims:
            return 0 if self.dtype is np.int64 else 0.0
        sizes = {"classes": num_classes, "bins": n_bins}
        return np.zeros(tuple(sizes[d] for d in self.dims), dtype=self.dtype)


_SUM, _GATHER = Reduction.SUM, Reduction.GATHER
# The one declaration of what an accumulator holds: construction, merge and the distributed reduce all
# read it, and an attribute not declared here cannot be set (the class's slots are these names).
FIELDS: tuple[Field, ...] = (
    Field("count", _SUM, np.int64),
    Field("correct_count", _SUM, np.int64),
    Field("nll_sum", _SUM, np.float64),
    Field("brier_sum", _SUM, np.float64),
    Field("margin_sum", _SUM, np.float64),
    Field("margin_below", _SUM, np.int64),
    Field("logit_norm_sum", _SUM, np.float64),
    Field("max_logit_sum", _SUM, np.float64),
    Field("bin_count", _SUM, np.int64, ("bins",)),
    Field("bin_conf_sum", _SUM, np.float64, ("bins",)),
    Field("bin_correct_sum", _SUM, np.float64, ("bins",)),
    Field("class_bin_count", _SUM, np.int64, ("classes", "bins")),
    Field("class_bin_prob_sum", _SUM, np.float64, ("classes", "bins")),
    Field("class_bin_hit_sum", _SUM, np.float64, ("classes", "bins")),
    # Per-sample state, kept only because equal-mass ECE and the bootstrap need it (`samples()` by these names).
    Field("confidence", _GATHER, np.float64),
    Field("correct", _GATHER, np.bool_),
    Field("nll", _GATHER, np.float64),
    Field("brier", _GATHER, np.float64),
    Field("margin", _GATHER, np.float64),
)
SUMS = tuple(f for f in FIELDS if f.reduction is Reduction.SUM)
GATHERED = tuple(f for f in FIELDS if f.reduction is Reduction.GATHER)


class CalibrationAccumulator:
    """Sums over samples for one view (all floating sums float64), in the fields of FIELDS."""

    __slots__ = ("num_classes", "n_bins", "margin_target", *(f.name for f in FIELDS))

    def __init__(self, num_classes: int, n_bins: int = N_BINS, margin_target: float = MARGIN_TARGET):
        self.num_classes, self.n_bins, self.margin_target = num_classes, n_bins, margin_target
        for field in FIELDS:
            setattr(self, field.name, field.zero(num_classes, n_bins))

    if TYPE_CHECKING:  # the fields are FIELDS' names: typed here as what they are read and written as

        def __getattr__(self, name: str) -> Any: ...

        def __setattr__(self, name: str, value: Any) -> None: ...

    def update(self, logits: np.ndarray, labels: np.ndarray) -> None:
        logits = np.asarray(logits)
        labels = np.asarray(labels, dtype=np.int64)
        n, k = logits.shape if logits.ndim == 2 else (None, None)
        if k != self.num_classes or len(labels) != n:
            raise InputError(
                f"expected logits of shape (N, {self.num_classes}) for {len(labels)} labels, got {logits.shape}"
            )
        if n == 0:
            return
        if labels.min() < 0 or labels.max() >= k:
            raise InputError(
                f"label {int(labels.max() if labels.max() >= k else labels.min())} is out of range for {k} classes"
            )
        if not np.isfinite(logits).all():
            raise InputError("the model produced NaN or infinite logits")
        p, log_p = softmax_with_log(logits)
        rows = np.arange(n)
        pred = p.argmax(axis=1)
        conf = p[rows, pred]
        hit = pred == labels
        p_label = p[rows, labels]
        nll = -log_p[rows, labels]
        del log_p
        z = logits.astype(np.float64)
        margin = logit_margin(z, labels)

        self.count += n
        self.correct_count += int(hit.sum())
        self.nll_sum += float(nll.sum())
        residual = p.copy()  # p - one-hot(label), squared in place
        residual[rows, labels] -= 1.0
        np.square(residual, out=residual)
        brier = residual.sum(axis=1)
        del residual
        self.brier_sum += float(brier.sum())
        self.margin_sum += float(margin.sum())
        self.margin_below += int((margin < self.margin_target).sum())
        self.logit_norm_sum += float(np.linalg.norm(z, axis=1).sum())
        self.max_logit_sum += float(z.max(axis=1).sum())
        b = bin_index(conf, self.n_bins)
        self.bin_count += np.bincount(b, minlength=self.n_bins)
        self.bin_conf_sum += np.bincount(b, weights=conf, minlength=self.n_bins)
        self.bin_correct_sum += np.bincount(b, weights=hit, minlength=self.n_bins)
        self._add_classwise(p, labels, p_label)
        self.confidence.append(conf)
        self.correct.append(hit)
        self.nll.append(nll)
        self.brier.append(brier)
        self.margin.append(margin)

    def _add_classwise(self, p: np.ndarray, labels: np.ndarray, p_label: np.ndarray) -> None:
        """Every (sample, class) probability into that class's bins.

        Few probabilities leave the first bin (at most n_bins - 1 a row: they sum to 1), so only those are binned:
        the first bin gets each class's count and sum less the others'. The hits are the labels' probabilities."""
        k, n_bins = self.num_classes, self.n_bins
        rows, classes = np.nonzero(p > np.linspace(0.0, 1.0, n_bins + 1)[1])
        above = p[rows, classes]
        flat = classes * n_bins + bin_index(above, n_bins)
        count = np.bincount(flat, minlength=k * n_bins).reshape(k, n_bins)
        # float64 even when no probability leaves the first bin (bincount of nothing is int64)
        prob_sum = np.bincount(flat, weights=above, minlength=k * n_bins).astype(np.float64).reshape(k, n_bins)
        count[:, 0] = len(p) - count[:, 1:].sum(axis=1)
        prob_sum[:, 0] = p.sum(axis=0) - prob_sum[:, 1:].sum(axis=1)
        self.class_bin_count += count
        self.class_bin_prob_sum += prob_sum
        self.class_bin_hit_sum += np.bincount(
            labels * n_bins + bin_index(p_label, n_bins), minlength=k * n_bins
        ).reshape(k, n_bins)

    def merge(self, other: "CalibrationAccumulator") -> "CalibrationAccumulator":
        """Add `other` into self (samples of `other` come after those of self)."""
        if (other.num_classes, other.n_bins, other.margin_target) != (
            self.num_classes,
            self.n_bins,
            self.margin_target,
        ):
            raise ValueError("cannot merge accumulators with different classes, bins or margin target")
        for field in SUMS:
            setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))
        for field in GATHERED:
            getattr(self, field.name).extend(getattr(other, field.name))
        return self

    def reduce(self, starts: list[int], ctx: distributed.Context) -> CalibrationAccumulator:
        """Under torchrun: every rank's sums added and per-sample arrays gathered in data-set order, so that
        each rank holds the whole data set (`starts[i]` is the data-set position of the i-th batch here)."""
        if not ctx.active:
            return self
        summed = distributed.all_reduce_sums([np.asarray(getattr(self, f.name), dtype=f.dtype) for f in SUMS], ctx)
        for field, value in zip(SUMS, summed, strict=True):
            setattr(self, field.name, value if field.dims else value.item())
        batches = list(zip(*(getattr(self, f.name) for f in GATHERED), strict=True))
        ordered = distributed.gather_in_order(batches, starts, ctx)
        for j, field in enumerate(GATHERED):
            setattr(self, field.name, [batch[j] for batch in ordered])
        return self

    # -- per-sample arrays (concatenated lazily) --
    def samples(self) -> dict[str, np.ndarray]:
        """The per-sample arrays (the GATHER fields), each concatenated over the batches."""
        return {f.name: np.concatenate(getattr(self, f.name) or [np.zeros(0, f.dtype)]) for f in GATHERED}

    def reliability(self) -> dict[str, list]:
        """Per-bin counts, mean confidence and accuracy: what a reliability diagram draws."""
        with np.errstate(invalid="ignore", divide="ignore"):
            conf = np.where(self.bin_count > 0, self.bin_conf_sum / self.bin_count, np.nan)
            acc = np.where(self.bin_count > 0, self.bin_correct_sum / self.bin_count, np.nan)
        return {
            "edges": np.linspace(0, 1, self.n_bins + 1).tolist(),
            "count": self.bin_count.tolist(),
            "mean_confidence": [None if np.isnan(v) else float(v) for v in conf],
            "accuracy": [None if np.isnan(v) else float(v) for v in acc],
        }

    def smooth_reliability(self) -> dict:
        """The smoothed reliability curve (smooth_ece.smooth_reliability) at smooth ECE's bandwidth."""
        s = self.samples()
        _, sigma = smooth_ece.smooth_ece(s["confidence"], s["correct"])
        return smooth_ece.smooth_reliability(s["confidence"], s["correct"], sigma)

    def compute(self) -> dict[str, float]:
        n = self.count
        if n == 0:
            raise InputError("no samples were evaluated (empty data set?)")
        gaps = np.abs(self.bin_correct_sum - self.bin_conf_sum)
        nonzero = self.bin_count > 0
        class_gap = np.abs(self.class_bin_hit_sum - self.class_bin_prob_sum)  # n_bk * |freq - mean p|
        s = self.samples()
        rms = rms_calibration.rms_calibration_error(s["confidence"], s["correct"])
        return {
            "n": n,
            "accuracy": self.correct_count / n,
            "ece": ece_from_bins(self.bin_count, self.bin_conf_sum, self.bin_correct_sum, n),
            "mce": float((gaps[nonzero] / self.bin_count[nonzero]).max()),
            "adaptive_ece": adaptive_ece(s["confidence"], s["correct"], self.n_bins),
            "classwise_ece": float(class_gap.sum() / n / self.num_classes),
            "smooth_ece": smooth_ece.smooth_ece(s["confidence"], s["correct"])[0],
            "l2_ece": l2_ece.l2_ece(s["confidence"], s["correct"], self.n_bins, debiased=False),
            "debiased_l2_ece": l2_ece.l2_ece(s["confidence"], s["correct"], self.n_bins),
            "ece_sweep": estimators.ece_sweep(s["confidence"], s["correct"])[0],
            **({} if rms is None else {"rms_calibration_error": rms}),  # none below 200 samples
            "nll": self.nll_sum / n,
            "brier": self.brier_sum / n,
            "mean_confidence": float(self.bin_conf_sum.sum() / n),
            "mean_margin": self.margin_sum / n,
            "frac_margin_below_target": self.margin_below / n,
            "mean_logit_norm": self.logit_norm_sum / n,
            "mean_max_logit": self.max_logit_sum / n,
        }


def calibration_metrics(logits: np.ndarray, labels: np.ndarray, num_classes: int) -> dict[str, float]:
    """Functional form: the metrics of one set of logits."""
    acc = CalibrationAccumulator(num_classes)
    acc.update(logits, labels)
    return acc.compute()
