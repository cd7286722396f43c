"""Selective prediction: how much risk remains when the model may abstain on its least confident inputs.

The model keeps the k most confident of N predictions (max-softmax confidence) and abstains on the rest;
coverage is k/N and the selective risk r(k/N) is the error rate among the kept ones. Definitions (Geifman and
El-Yaniv 2017; Geifman et al. 2019):

- AURC: the mean of r(k/N) over k = 1..N (the area under the risk-coverage curve as a Riemann sum, as in
  Geifman et al.'s code; torch-uncertainty's AURC integrates the same points with the trapezoid rule and
  rescales by 1/(1 - 1/N), a difference of order 1/N);
- E-AURC: AURC less that of the oracle ranking (every correct prediction before every wrong one) on the same
  predictions, so 0 is a perfect ranking at this accuracy; the exact finite-N oracle, not its large-N
  approximation err + (1 - err) ln(1 - err);
- risk at coverage c: r(ceil(cN)/N), the error rate of the ceil(cN) most confident (torch-uncertainty's RiskAtxCov);
- coverage at risk x: the largest k/N with r(k/N) <= x, 0 when no coverage reaches it (torch-uncertainty's
  CovAtxRisk, which gives NaN there);
- misclassification AUROC: the AUROC of the confidence for correct (positive) against wrong predictions
  (ties count half, metrics.ranking).

Ties: predictions of equal confidence cannot be told apart by a threshold, so within a tie group the errors
are spread evenly (the expectation over the orders of the tied predictions). The curve, and every number
above, then depends neither on the input order nor on how a sort breaks ties; without ties it is the plain
sorted curve.
"""

from __future__ import annotations

import math

import numpy as np

from macs_audit.errors import InputError
from macs_audit.metrics.ranking import auroc

RISK_AT_COVERAGE = (0.8, 0.9, 0.95)
COVERAGE_AT_RISK = (0.01, 0.05)
CURVE_POINTS = 100  # the stored risk-coverage curve: coverage 1%, 2%, ..., 100%
CONVENTION = (
    "max-softmax confidence; keep the k most confident of N, risk r = error rate of the kept; AURC = mean of "
    "r(k/N) over k = 1..N; E-AURC = AURC - AURC of the oracle ranking; risk at coverage c = r(ceil(cN)/N); "
    "coverage at risk x = largest k/N with r <= x (0 if none); tied confidences share their errors evenly; "
    "misclassification AUROC: confidence, correct as positive, ties count half"
)


def _name(value: float) -> str:
    return f"{round(100 * value):d}"


RISK_KEYS = {c: f"risk_at_{_name(c)}_coverage" for c in RISK_AT_COVERAGE}
COVERAGE_KEYS = {r: f"coverage_at_{_name(r)}_risk" for r in COVERAGE_AT_RISK}


def risk_curve(confidence: np.ndarray, correct: np.ndarray) -> np.ndarray:
    """r(k/N) for k = 1..N: the error rate of the k most confident predictions, ties spread evenly."""
    confidence = np.asarray(confidence, dtype=np.float64)
    n = len(confidence)
    if n == 0 or len(correct) != n:
        raise InputError(f"selective prediction needs one correctness per confidence, got {n} and {len(correct)}")
    order = np.argsort(-confidence, kind="stable")
    c = confidence[order]
    errors = np.cumsum(~np.asarray(correct, dtype=bool)[order])
    ends = np.flatnonzero(np.r_[c[1:] != c[:-1], True])  # the last position of each tie group
    starts = np.r_[0, ends[:-1] + 1]
    before = np.r_[0, errors[ends][:-1]]  # errors ranked above the group
    rate = (errors[ends] - before) / (ends - starts + 1)  # the group's error rate
    group = np.repeat(np.arange(len(ends)), ends - starts + 1)
    k = np.arange(1, n + 1)
    return (before[group] + (k - starts[group]) * rate[group]) / k


def oracle_aurc(n: int, n_errors: int) -> float:
    """AURC of the ranking that puts all N - E correct predictions before the E wrong ones."""
    k = np.arange(1, n + 1)
    return float((np.maximum(0, k - (n - n_errors)) / k).mean())


def risk_at_coverage(risk: np.ndarray, coverage: float) -> float:
    """r(ceil(cN)/N) on a curve from `risk_curve` (c in (0, 1])."""
    n = len(risk)
    k = max(1, math.ceil(round(coverage * n, 9)))  # round: 0.9 x 1000 must be 900, not 900.0000000001
    return float(risk[min(k, n) - 1])


def coverage_at_risk(risk: np.ndarray, target: float) -> float:
    """The largest coverage k/N whose risk is at most `target`; 0 when none is."""
    admissible = np.flatnonzero(risk <= target)
    return float((admissible[-1] + 1) / len(risk)) if len(admissible) else 0.0


def curve_points(risk: np.ndarray, points: int = CURVE_POINTS) -> dict[str, list[float]]:
    """The curve at coverage 1/points, 2/points, ..., 1 (what a plot draws)."""
    coverage = [(i + 1) / points for i in range(points)]
    return {"coverage": coverage, "risk": [risk_at_coverage(risk, c) for c in coverage]}


def selective_metrics(confidence: np.ndarray, correct: np.ndarray) -> dict[str, float]:
    """AURC, E-AURC, risk at 80/90/95% coverage, coverage at 1/5% risk and the misclassification AUROC (left
    out when every prediction is right or every one wrong: it is undefined)."""
    correct = np.asarray(correct, dtype=bool)
    risk = risk_curve(confidence, correct)
    aurc = float(risk.mean())
    out = {"aurc": aurc, "e_aurc": aurc - oracle_aurc(len(risk), int((~correct).sum()))}
    out.update({key: risk_at_coverage(risk, c) for c, key in RISK_KEYS.items()})
    out.update({key: coverage_at_risk(risk, r) for r, key in COVERAGE_KEYS.items()})
    detection = auroc(confidence, correct)
    if detection is not None:
        out["misclassification_auroc"] = detection
    return out
