"""Split conformal prediction sets: fitted on a labelled calibration part, they hold the true class with
probability at least the target coverage 1 - alpha on exchangeable data (Vovk et al. 2005; Angelopoulos and
Bates 2021, "A Gentle Introduction to Conformal Prediction").

Scores (higher: the class fits worse), from the softmax p of the logits in float64, classes ranked by p
descending (equal probabilities by class index), u a seeded Uniform(0, 1) draw per image:

- LAC (least ambiguous set-valued classifier, Sadinle et al. 2019): s(x, y) = 1 - p_y.
- APS (adaptive prediction sets, Romano et al. 2020), randomised as the paper, TorchCP's APS() and MAPIE's
  include_last_label="randomized" define it: s(x, y) = the mass of the classes ranked above y + u p_y.
- RAPS (regularised APS, Angelopoulos et al. 2021): the APS score + penalty x max(0, rank(y) - k_reg), rank
  from 1. Unless given, k_reg and the penalty are chosen by the paper's rule on a seeded 30% of the calibration
  part (k_reg: the ceil((n+1)(1-alpha))-th smallest true-class rank; the penalty: of 0.001, 0.01, 0.1, 0.2,
  0.5 the one whose sets are smallest there), and the threshold is fitted on the other 70%.
- APS, deterministic (`aps_deterministic`, not reported by default): the APS score with u = 1, the mass of y
  and every class ranked above it (TorchCP's APS(randomized=False)); its sets are several times larger than
  the randomised ones at the same coverage and are empty for the most confident images, so they cannot be
  compared with published APS figures.

Every set is the exact inversion of its score, {j : s(x, j) <= q} (one u per image for all its classes, so
an APS or RAPS set is a top-ranked prefix); sets may be empty. The randomised scores draw u from the audit's
seed and the image's position, so an image keeps its u in every view of the data set.

The threshold q is the ceil((n + 1)(1 - alpha))-th smallest of the n calibration scores (the finite-sample
quantile ceil((n + 1)(1 - alpha)) / n); when that rank exceeds n, q is infinite and every set holds every class.
On exchangeable data the coverage then lies in [1 - alpha, 1 - alpha + 1 / (n + 1)] on average over draws of the
calibration part (the upper end needs scores without ties, which the randomised scores have).
Class-conditional (Mondrian) LAC (`lac_class_conditional`, Vovk 2012) fits one threshold per class on that
class's calibration images, so the guarantee holds for every class, not only on average.

On the scored part (data the thresholds were not fitted on): the empirical coverage (fraction of sets holding
the true class) with its 95% Clopper-Pearson interval, the mean set size, and the lowest coverage among the
classes (the worst class: coverage is promised on average, not per class) with its interval and image count.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator

import numpy as np

from macs_audit.errors import InputError, UsageError
from macs_audit.metrics.conventions import softmax_with_log
from macs_audit.seeding import derive_seed

METHODS = ("lac", "aps", "raps")  # the marginal methods reported by default, each at its own threshold
CLASS_CONDITIONAL = {"lac_class_conditional": "lac"}  # Mondrian methods and the score they threshold per class
REPORTED = (*METHODS, *CLASS_CONDITIONAL)
SCORES = ("lac", "aps", "raps", "aps_deterministic")  # the scores class_scores computes
RANKED = ("aps", "raps", "aps_deterministic")  # the scores that sum over each row's classes ranked (`descending`)
RANDOMISED = ("aps", "raps")
DEFAULT_COVERAGE = 0.9
DEFAULT_SEED = 0  # the randomised scores' seed where the caller gives none
RAPS_PENALTIES = (0.001, 0.01, 0.1, 0.2, 0.5)  # the paper's grid for its size-optimising penalty
# A given --raps penalty's ceiling: above 1 one rank past k_reg already costs more than all the probability, so
# larger ones change nothing but could overflow (penalty x rank) to inf.
MAX_RAPS_PENALTY = 100.0
RAPS_TUNING_FRACTION = 0.3  # of the calibration part, for k_reg and the penalty (the paper's pct_paramtune)
INTERVAL_LEVEL = 0.95
CONVENTION = (
    "split conformal on the calibration split (softmax of the raw logits; ranks by p, ties by class index; "
    "u ~ U(0,1) per image, seeded): LAC s = 1 - p_y; APS (randomised, Romano et al.) s = mass ranked above y "
    "+ u p_y; RAPS s = APS + penalty (rank - k_reg)+ with k_reg and penalty by the paper's rule on 30% of the "
    "calibration part; class-conditional LAC: one threshold per class; sets = {j : s(x, j) <= threshold}; "
    "threshold = the ceil((n+1)(1-alpha))-th smallest calibration score (every class when above n); "
    "coverage with a 95% Clopper-Pearson interval, mean set size and the lowest per-class coverage on the "
    "held-out part"
)


class Threshold(float):
    """A fitted threshold q, a float wherever one is read (the report, the gate), that also carries what its
    score needs to be recomputed on other data: the randomised scores' `seed`, and RAPS's `k_reg` and `penalty`.
    """

    seed: int = DEFAULT_SEED
    k_reg: int = 0
    penalty: float = 0.0

    def __new__(cls, value: float, seed: int = DEFAULT_SEED, k_reg: int = 0, penalty: float = 0.0) -> Threshold:
        out = super().__new__(cls, value)
        out.seed, out.k_reg, out.penalty = seed, k_reg, penalty
        return out


def check_coverage(coverage: float) -> float:
    if not 0 < coverage < 1:
        raise UsageError(f"--coverage must lie strictly between 0 and 1, got {coverage:g}")
    return coverage


def uniforms(n: int, seed: int = DEFAULT_SEED) -> np.ndarray:
    """The randomised scores' u of n images (positions 0..n-1), from `seed`."""
    return np.random.default_rng(derive_seed("conformal", seed)).random(n)


def descending(probabilities: np.ndarray) -> np.ndarray:
    """Each row's classes by decreasing probability, ties by class index (N, K): the ranking APS and RAPS sum in.
    The costly step of their scores on many classes: computed once per set of probabilities and passed on."""
    return np.argsort(-np.asarray(probabilities, dtype=np.float64), axis=1, kind="stable")


def class_scores(  # noqa: PLR0913 (the scores' parameters, and the ranking when the caller has it)
    probabilities: np.ndarray,
    method: str,
    u: np.ndarray | None = None,
    *,
    k_reg: int = 0,
    penalty: float = 0.0,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """The score s(x, j) of every class j (N, K) under `method`; `u` (N,) for the randomised scores
    (default: uniforms(N)); `order`: `descending(probabilities)` where the caller has it."""
    p = np.asarray(probabilities, dtype=np.float64)
    if method == "lac":
        return 1.0 - p
    if method not in SCORES:
        raise UsageError(f"unknown conformal method {method!r}; choose from {', '.join(SCORES)}")
    order = descending(p) if order is None else order
    ranked = np.take_along_axis(p, order, axis=1)
    if method == "aps_deterministic":
        ranked_scores = np.cumsum(ranked, axis=1)
    else:
        u = uniforms(len(p)) if u is None else np.asarray(u, dtype=np.float64)
        ranked_scores = np.cumsum(ranked, axis=1) - ranked + u[:, None] * ranked  # mass above + u p
        if method == "raps":
            ranks = np.arange(1, p.shape[1] + 1, dtype=np.float64)
            ranked_scores = ranked_scores + penalty * np.maximum(ranks - k_reg, 0.0)[None, :]
    out = np.empty_like(p)
    np.put_along_axis(out, order, ranked_scores, axis=1)
    return out


def true_class_scores(probabilities: np.ndarray, labels: np.ndarray, method: str, u=None, **params) -> np.ndarray:
    scores = class_scores(probabilities, method, u, **params)
    return scores[np.arange(len(labels)), np.asarray(labels, dtype=np.int64)]


def conformal_threshold(scores: np.ndarray, coverage: float) -> float:
    """The ceil((n + 1) coverage)-th smallest score; infinity when that exceeds n."""
    n = len(scores)
    if n == 0:
        raise InputError("conformal prediction needs at least one calibration sample")
    rank = math.ceil(round((n + 1) * coverage, 9))  # round: (n + 1) x 0.9 must not become rank + 1 by rounding
    return float(np.sort(scores)[rank - 1]) if rank <= n else math.inf


def prediction_sets(
    probabilities: np.ndarray,
    threshold: float,
    method: str,
    u: np.ndarray | None = None,
    order: np.ndarray | None = None,
) -> np.ndarray:
    """Boolean (N, K): which classes each input's set holds. A Threshold's seed gives the default `u`; its
    k_reg and penalty RAPS's score; `order`: `descending(probabilities)` where the caller has it."""
    p = np.asarray(probabilities, dtype=np.float64)
    seed = getattr(threshold, "seed", DEFAULT_SEED)
    if method in RANDOMISED and u is None:
        u = uniforms(len(p), seed)
    if method == "raps" and isinstance(threshold, Threshold):
        scores = class_scores(p, method, u, k_reg=threshold.k_reg, penalty=threshold.penalty, order=order)
    else:
        scores = class_scores(p, method, u, order=order)
    return scores <= threshold


def clopper_pearson(successes: int, n: int, level: float = INTERVAL_LEVEL) -> list[float]:
    """The exact binomial (Clopper-Pearson) interval of successes / n: quantiles of beta distributions."""
    # The inverse regularised incomplete beta function is the beta quantile itself (the same values as
    # scipy.stats.beta.ppf), without importing scipy.stats (half a second of a default audit).
    from scipy.special import betaincinv

    alpha = 1 - level
    low = float(betaincinv(successes, n - successes + 1, alpha / 2)) if successes > 0 else 0.0
    high = float(betaincinv(successes + 1, n - successes, 1 - alpha / 2)) if successes < n else 1.0
    return [low, high]


def set_statistics(sets: np.ndarray, labels: np.ndarray) -> dict:
    """Coverage (with its Clopper-Pearson interval), mean set size, and the worst class's coverage (over the
    classes present; its interval and image count) and index."""
    labels = np.asarray(labels, dtype=np.int64)
    covered = sets[np.arange(len(labels)), labels]
    present, of_class = np.unique(labels, return_inverse=True)
    counts = np.bincount(of_class)
    hits = np.bincount(of_class, weights=covered)
    per_class = hits / counts  # one pass, not one per class
    worst = int(np.argmin(per_class))
    return {
        "coverage": float(covered.mean()),
        "coverage_interval": clopper_pearson(int(covered.sum()), len(labels)),
        "mean_set_size": float(sets.sum(axis=1).mean()),
        "worst_class_coverage": float(per_class[worst]),
        "worst_class": int(present[worst]),
        "worst_class_n": int(counts[worst]),
        "worst_class_coverage_interval": clopper_pearson(int(round(hits[worst])), int(counts[worst])),
    }


def _split_for_tuning(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(tuning, threshold) positions of a calibration part of n: a seeded RAPS_TUNING_FRACTION for RAPS's
    parameters, the rest for its threshold."""
    order = np.random.default_rng(derive_seed("raps tuning", seed)).permutation(n)
    cut = int(round(RAPS_TUNING_FRACTION * n))
    return np.sort(order[:cut]), np.sort(order[cut:])


def raps_parameters(
    p: np.ndarray, labels: np.ndarray, u: np.ndarray, coverage: float, order: np.ndarray | None = None
) -> tuple[int, float]:
    """(k_reg, penalty) by Angelopoulos et al.'s rule on these (tuning) images: k_reg the finite-sample
    `coverage` quantile of the true class's rank; the penalty of RAPS_PENALTIES whose sets, fitted and scored
    here, are smallest on average (ties: the smaller penalty)."""
    order = descending(p) if order is None else order
    ranks = np.argmax(order == np.asarray(labels)[:, None], axis=1) + 1
    k = conformal_threshold(ranks.astype(np.float64), coverage)
    k_reg = int(k) if math.isfinite(k) else p.shape[1]
    best, best_size = RAPS_PENALTIES[0], math.inf
    for penalty in RAPS_PENALTIES:
        scores = class_scores(p, "raps", u, k_reg=k_reg, penalty=penalty, order=order)
        q = conformal_threshold(scores[np.arange(len(labels)), labels], coverage)
        size = float((scores <= q).sum(axis=1).mean())
        if size < best_size:
            best, best_size = penalty, size
    return k_reg, best


def fit_thresholds(
    logits: np.ndarray,
    labels: np.ndarray,
    coverage: float = DEFAULT_COVERAGE,
    *,
    seed: int = DEFAULT_SEED,
    u: np.ndarray | None = None,
    raps: tuple[int, float] | None = None,
) -> dict[str, float]:
    """Each marginal method's Threshold from calibration logits and labels (class-conditional methods:
    `fit_class_thresholds`). `u`: the images' draws (default uniforms(n, seed)); `raps`: (k_reg, penalty)
    given, else chosen on a seeded 30% of these images and the threshold fitted on the rest."""
    check_coverage(coverage)
    p, _ = softmax_with_log(logits)
    labels = np.asarray(labels, dtype=np.int64)
    u = uniforms(len(p), seed) if u is None else u
    order = descending(p)
    out: dict[str, float] = {}
    for method in METHODS:
        if method != "raps":
            scores = true_class_scores(p, labels, method, u, order=order)
            out[method] = Threshold(conformal_threshold(scores, coverage), seed)
            continue
        rest = np.arange(len(p))
        if raps is None:
            tuning, rest = _split_for_tuning(len(p), seed)
            raps = (
                raps_parameters(p[tuning], labels[tuning], u[tuning], coverage, order[tuning])
                if len(tuning)
                else (0, 0.0)
            )
        k_reg, penalty = raps
        scores = true_class_scores(
            p[rest], labels[rest], "raps", u[rest], k_reg=k_reg, penalty=penalty, order=order[rest]
        )
        out["raps"] = Threshold(conformal_threshold(scores, coverage), seed, int(k_reg), float(penalty))
    return out


def fit_class_thresholds(logits: np.ndarray, labels: np.ndarray, coverage: float) -> dict[str, list[float]]:
    """Each class-conditional method's thresholds, one per class (infinite for a class with too few
    calibration images for its rank, or none)."""
    p, _ = softmax_with_log(logits)
    labels = np.asarray(labels, dtype=np.int64)
    out = {}
    for method, score in CLASS_CONDITIONAL.items():
        scores = true_class_scores(p, labels, score)
        out[method] = [
            conformal_threshold(scores[labels == c], coverage) if (labels == c).any() else math.inf
            for c in range(p.shape[1])
        ]
    return out


def class_conditional_sets(probabilities: np.ndarray, thresholds: list[float], method: str) -> np.ndarray:
    return class_scores(probabilities, CLASS_CONDITIONAL[method]) <= np.asarray(thresholds)[None, :]


def evaluate_sets(
    logits: np.ndarray,
    labels: np.ndarray,
    thresholds: dict[str, float],
    u: np.ndarray | None = None,
    class_thresholds: dict[str, list[float]] | None = None,
) -> dict[str, dict]:
    """Each method's set statistics on the scored part's logits and labels (not the calibration part's);
    `u`: these images' draws (default: from each Threshold's seed)."""
    if len(labels) == 0:
        raise InputError("conformal prediction needs at least one held-out sample")
    return {m: set_statistics(sets, labels) for m, sets in method_sets(logits, thresholds, u, class_thresholds)}


def method_sets(
    logits: np.ndarray,
    thresholds: dict[str, float],
    u: np.ndarray | None = None,
    class_thresholds: dict[str, list[float]] | None = None,
) -> Iterator[tuple[str, np.ndarray]]:
    """(method, its prediction sets (N, K) bool) for each marginal method at its threshold, then each
    class-conditional method at its per-class thresholds."""
    p, _ = softmax_with_log(logits)
    order = descending(p) if any(method in RANKED for method in thresholds) else None
    for method, q in thresholds.items():
        yield method, prediction_sets(p, q, method, u, order)
    for method, per_class in (class_thresholds or {}).items():
        yield method, class_conditional_sets(p, per_class, method)


@dataclasses.dataclass
class SplitConformal:
    """Thresholds fitted on the `fit` positions of a data set, scored on its `scored` positions; `evaluate`
    scores any view of the same data set (a corruption keeps every image's position, and its draw u)."""

    coverage: float
    thresholds: dict[str, float]
    scored: np.ndarray  # positions
    labels: np.ndarray  # the scored positions' labels
    u: np.ndarray | None = None  # the scored positions' draws
    class_thresholds: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    split: str = ""  # how the fit positions were drawn, for the report

    @classmethod
    def fit(
        cls,
        logits: np.ndarray,
        labels: np.ndarray,
        *,
        fit: np.ndarray,
        scored: np.ndarray,
        coverage: float,
        seed: int = DEFAULT_SEED,
        raps: tuple[int, float] | None = None,
        split: str = "",
    ) -> SplitConformal:
        u = uniforms(len(labels), seed)
        thresholds = fit_thresholds(logits[fit], labels[fit], coverage, seed=seed, u=u[fit], raps=raps)
        per_class = fit_class_thresholds(logits[fit], labels[fit], coverage)
        return cls(coverage, thresholds, scored, labels[scored], u[scored], per_class, split)

    def evaluate(self, logits: np.ndarray) -> dict[str, dict]:
        """Each method's statistics on the scored positions of `logits` (all positions of the data set)."""
        return evaluate_sets(logits[self.scored], self.labels, self.thresholds, self.u, self.class_thresholds)

    def covered(self, logits: np.ndarray) -> dict[str, np.ndarray]:
        """Per marginal method, whether each scored position's set holds its label ((len(scored),) bool)."""
        rows = np.arange(len(self.labels))
        sets = method_sets(logits[self.scored], self.thresholds, self.u)
        return {method: chosen[rows, self.labels] for method, chosen in sets}

    def records(self, logits: np.ndarray) -> dict[str, dict]:
        """The report's entry per method: its threshold (null: every class; the class-conditional methods'
        per class in `class_thresholds`), RAPS's k_reg and penalty, and the statistics of `evaluate`."""
        out = {}
        for method, stats in self.evaluate(logits).items():
            q = self.thresholds.get(method)
            entry: dict = {"threshold": float(q) if q is not None and math.isfinite(q) else None}
            if method == "raps" and isinstance(q, Threshold):
                entry.update(k_reg=q.k_reg, penalty=q.penalty)
            if method in self.class_thresholds:
                entry["class_thresholds"] = [t if math.isfinite(t) else None for t in self.class_thresholds[method]]
            out[method] = {**entry, **stats}
        return out


def summarize_views(per_view: dict[str, dict[str, dict]]) -> dict[str, dict]:
    """Per method, over views: the mean coverage and set size, and the lowest coverage with its view."""
    out = {}
    methods = [m for m in REPORTED if all(m in stats for stats in per_view.values())]
    for method in methods:
        coverage = {view: stats[method]["coverage"] for view, stats in per_view.items()}
        lowest = min(coverage, key=coverage.__getitem__)
        out[method] = {
            "coverage": float(np.mean(list(coverage.values()))),
            "mean_set_size": float(np.mean([stats[method]["mean_set_size"] for stats in per_view.values()])),
            "lowest_coverage": coverage[lowest],
            "lowest_view": lowest,
        }
        interval = per_view[lowest][method].get("coverage_interval")
        if interval is not None:  # the lowest view's own Clopper-Pearson interval
            out[method]["lowest_coverage_interval"] = interval
    return out
