"""Out-of-distribution detection: does a score computed from the logits tell in-distribution inputs from
inputs of another data set?

Scores (higher means "more in-distribution"), from the logits z in float64:

- `msp`: the maximum softmax probability (Hendrycks and Gimpel 2017);
- `max_logit`: max_j z_j (Hendrycks et al. 2022);
- `energy`: logsumexp_j z_j, the negative free energy at temperature 1 (Liu et al. 2020);
- `gen`: -sum over the top min(100, K) softmax probabilities of p^0.1 (1 - p)^0.1, the generalized entropy
  (Liu et al. 2023).

For a model that outputs probabilities the predictor hands over log-probabilities, so `max_logit` is then
max log p (the MSP's ranking) and `energy` is 0 for every input (no information).

Metrics, with the in-distribution samples as the positive class: AUROC; AUPR, the average precision of
detecting in-distribution inputs ("AUPR-In" of Hendrycks and Gimpel); FPR at 95% TPR, the fraction of
out-of-distribution inputs still accepted when the threshold keeps 95% of the in-distribution ones (as Liu
et al. report it). In-distribution is positive because the scores are confidences: the threshold that matters
is the one keeping most of the real traffic. torch-uncertainty labels the out-of-distribution inputs 1 and
feeds them an OOD score (its FPR95 is then the fraction of in-distribution inputs flagged at 95% OOD recall);
scikit-learn takes whichever labelling it is given. AUROC is the same under either convention; AUPR and FPR
at 95% TPR are not. Ties: metrics.ranking.

Intervals: percentile bootstrap, the in- and out-of-distribution samples each resampled with replacement
(the two sets are sampled separately, so each resample keeps their sizes); the three scores are measured on
the same resamples.
"""

from __future__ import annotations

import numpy as np

from macs_audit.errors import InputError
from macs_audit.metrics.conventions import softmax_with_log
from macs_audit.metrics.ranking import Ranking, curve_statistics
from macs_audit.metrics.resampling import DRAWS_PER_CHUNK, draw_counts

SCORES = ("msp", "max_logit", "energy", "gen")
GEN_GAMMA = 0.1  # Liu et al. 2023's gamma
GEN_TOP_CLASSES = 100  # ... and M (their ImageNet setting), capped at the number of classes
HISTOGRAM_BINS = 30  # of each score's in- and out-of-distribution histograms (the HTML's plots)
TPR_LEVEL = 0.95
METRIC_KEYS = ("auroc", "aupr", "fpr95")
CONVENTION = (
    "scores from the logits (float64): msp = max softmax, max_logit = max z, energy = logsumexp z (temperature 1), "
    "gen = -sum of p^0.1 (1 - p)^0.1 over the top min(100, K) softmax probabilities, "
    "higher = in-distribution; in-distribution is the positive class: AUROC, AUPR = average precision of the "
    "in-distribution class (AUPR-In), FPR95 = fraction of OOD inputs accepted at 95% in-distribution TPR; "
    "tied scores enter the curves as one threshold; percentile bootstrap resampling each set separately"
)


def scores(logits: np.ndarray) -> dict[str, np.ndarray]:
    """Each detector's score per sample (higher: more in-distribution)."""
    z = np.asarray(logits, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] < 1:
        raise InputError(f"expected logits of shape (N, K), got {z.shape}")
    p, _ = softmax_with_log(z)
    return {"msp": p.max(axis=1), "max_logit": z.max(axis=1), "energy": energy(z), "gen": gen_scores(z)}


def energy(logits: np.ndarray) -> np.ndarray:
    """logsumexp_j z_j per row, float64 (`ood.scores`' energy)."""
    z = np.asarray(logits, dtype=np.float64)
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1))


def gen_scores(logits: np.ndarray, gamma: float = GEN_GAMMA, top: int = GEN_TOP_CLASSES) -> np.ndarray:
    """GEN: -sum over the top min(`top`, K) softmax probabilities of p^gamma (1 - p)^gamma (Liu et al. 2023).

    In logs, so that neither tail rounds away: 1 - p of the largest probability is the sum of the others'
    exp(z_j - z_max) over 1 plus that sum (a confident sample's 1 - p is far below float64's resolution of 1)."""
    z = np.asarray(logits, dtype=np.float64)
    n, k = z.shape
    rows, best = np.arange(n), z.argmax(axis=1)
    shifted = z - z[rows, best][:, None]
    others = np.exp(shifted)
    others[rows, best] = 0.0
    rest = others.sum(axis=1)  # sum of exp(z_j - z_max) over the other classes
    log_p = shifted - np.log1p(rest)[:, None]
    with np.errstate(divide="ignore"):  # rest 0: 1 - p is 0 in float64 (a gap of over 745 between logits)
        log_q = np.log1p(-np.exp(log_p))  # log(1 - p): exact where p <= 1/2, every class but the largest
        log_q[rows, best] = np.log(rest) - np.log1p(rest)
    terms = np.exp(gamma * (log_p + log_q))
    m = min(top, k)
    if m < k:
        terms = np.take_along_axis(terms, np.argpartition(z, k - m, axis=1)[:, k - m :], axis=1)
    return -terms.sum(axis=1)


def detection_metrics(score_in: np.ndarray, score_out: np.ndarray) -> dict[str, float]:
    """AUROC, AUPR (in-distribution positive) and FPR at 95% TPR of one score."""
    if len(score_in) == 0 or len(score_out) == 0:
        raise InputError("OOD detection needs in-distribution and out-of-distribution samples")
    stats = curve_statistics(*_pooled(score_in, score_out), TPR_LEVEL)
    return {"auroc": float(stats["auroc"][0]), "aupr": float(stats["aupr"][0]), "fpr95": float(stats["fpr_at_tpr"][0])}


def _pooled(score_in: np.ndarray, score_out: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.r_[score_in, score_out], np.r_[np.ones(len(score_in), bool), np.zeros(len(score_out), bool)]


def bootstrap_intervals(
    scores_in: dict[str, np.ndarray],
    scores_out: dict[str, np.ndarray],
    n_resamples: int,
    seed: int,
    level: float = 0.95,
) -> dict[str, dict[str, list[float]]]:
    """Per score, percentile intervals of AUROC, AUPR and FPR95; {} for `n_resamples` 0 or fewer than two samples
    a side. Every score is measured on the same resamples (one set of draws per side)."""
    n_in, n_out = len(next(iter(scores_in.values()))), len(next(iter(scores_out.values())))
    if n_resamples <= 0 or min(n_in, n_out) < 2:
        return {}
    rng_in, rng_out = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(2))
    rows, dtype = max(1, DRAWS_PER_CHUNK // (n_in + n_out)), np.min_scalar_type(max(n_in, n_out)).type
    parts: dict[str, dict[str, list[np.ndarray]]] = {name: {key: [] for key in METRIC_KEYS} for name in scores_in}
    chunks = zip(
        draw_counts(n_in, n_resamples, rng_in, rows, dtype),
        draw_counts(n_out, n_resamples, rng_out, rows, dtype),
        strict=True,
    )
    rankings = {name: Ranking.of(*_pooled(scores_in[name], scores_out[name])) for name in scores_in}
    for counts in chunks:
        for name, ranking in rankings.items():
            stats = ranking.statistics(TPR_LEVEL, counts)
            for key, stat in zip(METRIC_KEYS, ("auroc", "aupr", "fpr_at_tpr"), strict=True):
                parts[name][key].append(stats[stat])
    alpha = (1 - level) / 2
    return {
        name: {
            key: [float(v) for v in np.quantile(np.concatenate(values), [alpha, 1 - alpha])]
            for key, values in by.items()
        }
        for name, by in parts.items()
    }


def ood_section(
    logits_in: np.ndarray, logits_out: np.ndarray, n_resamples: int = 1000, seed: int = 0
) -> dict[str, dict]:
    """For every score of SCORES: its metrics and their intervals (what the report's `ood.scores` holds)."""
    return scores_section(scores(logits_in), scores(logits_out), n_resamples, seed)


def scores_section(
    scores_in: dict[str, np.ndarray], scores_out: dict[str, np.ndarray], n_resamples: int = 1000, seed: int = 0
) -> dict[str, dict]:
    """Per score (the logit scores, the feature detectors'), its metrics and their intervals, every score measured
    on the same bootstrap resamples."""
    intervals = bootstrap_intervals(scores_in, scores_out, n_resamples, seed)
    return {
        name: {**detection_metrics(scores_in[name], scores_out[name]), "intervals": intervals.get(name, {})}
        for name in scores_in
    }


def histograms(scores_in: dict[str, np.ndarray], scores_out: dict[str, np.ndarray]) -> dict[str, dict]:
    """Each score's in- and out-of-distribution counts over HISTOGRAM_BINS shared bins (the HTML plots them)."""
    out = {}
    for name, inside in scores_in.items():
        pooled = np.concatenate([inside, scores_out[name]])
        lo, hi = float(pooled.min()), float(pooled.max())
        edges = np.linspace(lo, hi if hi > lo else lo + 1, HISTOGRAM_BINS + 1)
        out[name] = {
            "edges": edges.tolist(),
            "in": np.histogram(inside, edges)[0].astype(float).tolist(),
            "out": np.histogram(scores_out[name], edges)[0].astype(float).tolist(),
        }
    return out
