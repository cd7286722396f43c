"""Accuracy and calibration per slice of the data, the slices that differ from the rest, and the multicalibration
error (docs/method.md, "Slices").

A slice is the images of one value of a categorical column, or of one quantile bin of a numeric column (a
metadata column, or a property of the images: metrics/image_properties.py; a numeric column of at most `bins`
distinct values, a code or a count, slices by value). Images without a value in a column
belong to none of its slices. Each slice of at least `min_size` images is scored:

- its accuracy, ECE, NLL, mean confidence and overconfidence (mean confidence less accuracy), with 95% bootstrap
  intervals drawn as every view's are (metrics/bootstrap.py: percentile intervals for the means, the
  bias-corrected interval for the ECE); each conformal method's coverage on the slice's images the sets were
  scored on, with its Clopper-Pearson interval;
- two gaps to the rest of the data (every image not in the slice), each a two-sample comparison of disjoint
  sets: the accuracy gap (Newcombe's hybrid score interval; the pooled two-proportion z-test) and the
  overconfidence gap (Welch's normal interval and test on the per-image confidence less correctness). The
  overconfidence gap, not an ECE gap, is tested: a binned ECE of fewer images is larger by noise alone, so a
  small random slice would always look worse calibrated than the rest.
- every test of every scored slice (two a slice) is corrected together for multiple comparisons: Holm's step-down
  (the family-wise error rate) or Benjamini-Hochberg (the false discovery rate) at `level`; a slice is
  `significant` when either of its tests is after the correction.

Slices smaller than `min_size`, or whose rest is, are listed with their size, not scored. The multicalibration error
is the largest |sum over a confidence bin's images of (confidence - correct)| / slice size over every scored slice
and the whole data set and every one of the 15 equal-width bins: the slice and bin where calibration is worst,
weighted by how much of the slice the bin holds (a bin-mass-weighted l-infinity multicalibration error, after
Hebert-Johnson et al. 2018, whose alpha conditions on the bin as well).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from macs_audit.errors import UsageError
from macs_audit.metrics.accumulators import N_BINS, bin_index, ece_from_bins
from macs_audit.metrics.bootstrap import MIN_BOOTSTRAP_SAMPLES, bias_corrected_ends, percentile_ends
from macs_audit.metrics.conformal import clopper_pearson
from macs_audit.metrics.conventions import SLICE_CORRECTIONS
from macs_audit.metrics.resampling import concatenated, map_in_order
from macs_audit.seeding import derive_seed

CORRECTIONS = SLICE_CORRECTIONS  # name -> (who, the error rate it controls)
DEFAULT_BINS = 5  # quantile bins of a numeric column: quintiles
DEFAULT_MIN_SIZE = 100  # images a slice needs to be scored
LEVEL = 0.05  # of the corrected tests
GAPS = ("accuracy", "overconfidence")  # the two tested differences to the rest of the data
Z95 = 1.959963984540054
RESAMPLE_ROWS = 250  # resamples drawn and scored at once (at most 2**25 draw counts: 256 MiB)
# Pieces scored at once: gathering a slice's counts is memory-bound and single-threaded, so two pieces in flight
# use two cores (40 slices of 10,000 images: 0.8 s with one, 0.5 s with two); each piece at most 256 MiB.
SLICE_THREADS = 2
CONVENTIONS = {
    "slices": (
        "a categorical column's values, or a numeric column's quantile bins [lo, hi) (the last [lo, hi]); images "
        "without a value are in none of the column's slices; the rest of a slice is every other image"
    ),
    "slice_intervals": (
        "95% bootstrap intervals per slice as every view's (percentile; the ECE bias-corrected); conformal "
        "coverage on the slice's scored images with its Clopper-Pearson interval"
    ),
    "slice_gaps": (
        "slice less rest: accuracy gap with Newcombe's hybrid score interval and the pooled two-proportion z-test; "
        "overconfidence (confidence - accuracy) gap with Welch's normal interval and test; intervals at 95% each, "
        "not corrected"
    ),
    "multicalibration_error": (
        "max over scored slices and the whole data, and over the 15 equal-width confidence bins, of "
        "|sum over the slice's images in the bin of (confidence - correct)| / slice size"
    ),
}


@dataclasses.dataclass(frozen=True)
class Slice:
    """The images (positions) of one value of a column, or one quantile bin (`bounds`) of a numeric column."""

    column: str
    value: str
    members: np.ndarray  # int64 positions, ascending
    bounds: tuple[float, float] | None = None


@dataclasses.dataclass(frozen=True)
class Scores:
    """Per image of the data set: the top-1 confidence, whether it is right, the NLL of the true class; and per
    conformal method whether the image's set holds its label, on the positions the sets were scored on."""

    confidence: np.ndarray
    correct: np.ndarray
    nll: np.ndarray
    covered: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # method -> (len(scored),) bool
    scored: np.ndarray | None = None  # the positions `covered` is of


def check_slice_settings(bins: int, min_size: int, correction: str) -> None:
    """UsageError naming the option that is out of range."""
    if bins < 2:
        raise UsageError(f"--slice-bins must be at least 2 (quantile bins of a numeric column), got {bins}")
    if min_size < 2:
        raise UsageError(f"--min-slice-size must be at least 2 images, got {min_size}")
    if correction not in CORRECTIONS:
        raise UsageError(f"--slice-correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")


def define_slices(columns: Mapping[str, np.ndarray], bins: int) -> list[Slice]:
    """The slices of each column in order: a float column's quantile bins (edges at its values' quantiles
    0, 1/bins, ..., 1; repeated edges merged, so a column of many ties gets fewer bins), or its values where it has
    at most `bins` distinct ones; another column's values in sorted order."""
    out: list[Slice] = []
    for column, values in columns.items():
        out.extend(_numeric_slices(column, values, bins) if values.dtype.kind == "f" else _value_slices(column, values))
    return out


def _numeric_slices(column: str, values: np.ndarray, bins: int) -> list[Slice]:
    known = np.flatnonzero(np.isfinite(values))
    if len(known) == 0:
        return []
    distinct = np.unique(values[known])
    if len(distinct) <= bins:  # a few values (a code, a count): each its own slice
        return [Slice(column, _number(v), known[values[known] == v], (float(v), float(v))) for v in distinct.tolist()]
    edges = np.unique(np.quantile(values[known], np.linspace(0, 1, bins + 1)))
    which = np.searchsorted(edges[1:-1], values[known], side="right")  # bin b holds [edges[b], edges[b + 1])
    shown = _edges(edges)
    out = []
    for b in range(len(edges) - 1):
        lo, hi = float(edges[b]), float(edges[b + 1])
        closing = "]" if b == len(edges) - 2 else ")"
        out.append(Slice(column, f"[{shown[b]}, {shown[b + 1]}{closing}", known[which == b], (lo, hi)))
    return [s for s in out if len(s.members)]


def _number(value: float) -> str:
    """A value a slice is named by, exactly: 3 for 3.0, 10001, 0.25 (so that two values never share a name)."""
    return str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)


def _edges(edges: np.ndarray) -> list[str]:
    """Bin edges written with 4 significant digits, or as many more as tell every edge from the next."""
    for digits in range(4, 18):
        texts = [f"{e:.{digits}g}" for e in edges.tolist()]
        if len(set(texts)) == len(texts):
            return texts
    return [repr(e) for e in edges.tolist()]


def _value_slices(column: str, values: np.ndarray) -> list[Slice]:
    present = np.flatnonzero(np.array([v is not None for v in values], dtype=bool))
    texts = np.asarray([str(v) for v in values[present]], dtype=object)
    order = np.argsort(texts, kind="stable")
    uniques, starts = np.unique(texts[order], return_index=True)
    ends = [*starts[1:], len(order)]
    return [
        Slice(column, str(u), np.sort(present[order[a:b]]))
        for u, a, b in zip(uniques.tolist(), starts.tolist(), ends, strict=True)
    ]


def analyse_slices(
    scores: Scores,
    slices: list[Slice],
    *,
    min_size: int = DEFAULT_MIN_SIZE,
    correction: str = "holm",
    level: float = LEVEL,
    resamples: int = 1000,
    seed: int = 0,
) -> dict:
    """Every slice scored against the rest (module docstring): `scored` (sorted by the accuracy gap, worst first),
    `small` (those below `min_size`: column, value, n), `tests` (how many were corrected together) and
    `multicalibration`."""
    n = len(scores.confidence)
    correct = scores.correct.astype(np.float64)
    residual = scores.confidence - correct  # overconfidence per image
    scored_mask = np.zeros(n, dtype=bool)
    if scores.scored is not None:
        scored_mask[scores.scored] = True
    covered_all = {m: _spread(c, scores.scored, n) for m, c in scores.covered.items()}
    big = [s for s in slices if _scorable(s, n, min_size)]
    small = [
        {"column": s.column, "value": s.value, "n": int(len(s.members)), **_why_small(s, n, min_size)}
        for s in slices
        if not _scorable(s, n, min_size)
    ]
    names = [(s.column, s.value) for s in slices]
    assert len(set(names)) == len(names), "two slices of one name"  # define_slices names each slice apart
    totals = (correct.sum(), residual.sum(), (residual**2).sum())
    records = [_slice_record(s, scores, correct, residual, totals, scored_mask, covered_all) for s in big]
    drawn = _resampled_slices(scores.confidence, correct, scores.nll, big, resamples, derive_seed("slices", seed))
    for record, intervals in zip(records, _intervals([r["metrics"] for r in records], drawn), strict=True):
        record["intervals"] = intervals
    p_values = np.array([r["gaps"][g]["p_value"] for r in records for g in GAPS], dtype=np.float64)
    adjusted = adjust(p_values, correction)
    for i, record in enumerate(records):
        for j, gap in enumerate(GAPS):
            entry = record["gaps"][gap]
            entry["adjusted_p_value"] = float(adjusted[2 * i + j])
            entry["significant"] = bool(adjusted[2 * i + j] <= level)
        record["significant"] = any(record["gaps"][g]["significant"] for g in GAPS)
    records.sort(key=lambda r: (r["gaps"]["accuracy"]["gap"], -r["gaps"]["overconfidence"]["gap"]))
    return {
        "scored": records,
        "small": small,
        "tests": int(len(p_values)),
        "multicalibration": multicalibration_error(scores.confidence, correct, big, min_size),
    }


def _scorable(s: Slice, n: int, min_size: int) -> bool:
    """At least `min_size` images, and a rest of at least as many to compare them with (the tests' normal
    approximations need both sides: a rest of 3 images made a dominant category 'significant')."""
    return len(s.members) >= min_size and n - len(s.members) >= min_size


def _why_small(s: Slice, n: int, min_size: int) -> dict[str, str]:
    """{"rest": why} for a slice large enough whose rest is not (the small list's entries are otherwise small)."""
    if len(s.members) >= min_size:
        return {"rest": f"the other {n - len(s.members):,} images, fewer than {min_size:,}"}
    return {}


def _spread(values: np.ndarray, positions: np.ndarray | None, n: int) -> np.ndarray:
    """`values` of `positions` as an (n,) array, False elsewhere."""
    out = np.zeros(n, dtype=bool)
    if positions is not None:
        out[positions] = values
    return out


def _slice_record(  # noqa: PLR0913 (the per-image arrays each slice reads)
    s: Slice,
    scores: Scores,
    correct: np.ndarray,
    residual: np.ndarray,
    totals: tuple[float, float, float],
    scored_mask: np.ndarray,
    covered_all: dict[str, np.ndarray],
) -> dict:
    m = s.members
    n_in, n_out = len(m), len(correct) - len(m)
    conf, hit, res = scores.confidence[m], correct[m], residual[m]
    metrics = {
        "accuracy": float(hit.mean()),
        "ece": _ece(conf, hit),
        "nll": float(scores.nll[m].mean()),
        "mean_confidence": float(conf.mean()),
        "overconfidence": float(res.mean()),
    }
    in_scored = scored_mask[m]
    coverage = {
        method: {
            "coverage": float(covered[m][in_scored].mean()),
            "coverage_interval": clopper_pearson(int(covered[m][in_scored].sum()), int(in_scored.sum())),
            "n": int(in_scored.sum()),
        }
        for method, covered in covered_all.items()
        if in_scored.any()
    }
    hits_out = totals[0] - hit.sum()
    res_out_sum, res_out_sq = totals[1] - res.sum(), totals[2] - (res**2).sum()
    return {
        "column": s.column,
        "value": s.value,
        "bounds": list(s.bounds) if s.bounds is not None else None,
        "n": int(n_in),
        "metrics": metrics,
        "intervals": {},
        "coverage": coverage or None,
        "gaps": {
            "accuracy": accuracy_gap(int(hit.sum()), n_in, int(round(hits_out)), n_out),
            "overconfidence": mean_gap(res, res_out_sum, res_out_sq, n_out),
        },
    }


def _ece(confidence: np.ndarray, correct: np.ndarray) -> float:
    """The views' ECE (accumulators.ece_from_bins) of these images."""
    which = bin_index(confidence)
    count = np.bincount(which, minlength=N_BINS)
    conf_sum = np.bincount(which, weights=confidence, minlength=N_BINS)
    hit_sum = np.bincount(which, weights=correct, minlength=N_BINS)
    return ece_from_bins(count, conf_sum, hit_sum, len(confidence))


def _resampled_slices(
    confidence: np.ndarray, correct: np.ndarray, nll: np.ndarray, slices: list[Slice], resamples: int, seed: int
) -> dict[str, np.ndarray]:
    """Each slice's accuracy, NLL, mean confidence, overconfidence and ECE on `resamples` bootstrap resamples of
    the whole data set, metric -> (resamples, slices): one set of draw counts for every slice, so that a slice's
    size varies from resample to resample as it would in another sample of the data. {} without resamples."""
    if resamples <= 0 or len(confidence) < MIN_BOOTSTRAP_SAMPLES or not slices:
        return {}
    # Per slice, its images grouped by confidence bin: each group's count, correctness, confidence and NLL sums
    # are one product with the group's draw counts, and the slice's sums are the groups' sums. In float32: the
    # counts are exact there, and the sums' rounding (about 1e-6 of them) is far below the resampling's spread;
    # it halves what the products read (40 slices of 10,000 images: 0.29 s against 0.40 s).
    values = np.column_stack([np.ones_like(confidence), correct, confidence, nll]).astype(np.float32)
    which = bin_index(confidence)
    # Each slice's images in bin order, and where each bin's run of them ends.
    ordered = [s.members[np.argsort(which[s.members], kind="stable")] for s in slices]
    ends = [np.searchsorted(which[m], np.arange(N_BINS + 1)) for m in ordered]

    n = len(confidence)
    rows = max(1, min(RESAMPLE_ROWS, 2**25 // n))

    def statistic(piece: int) -> dict[str, np.ndarray]:
        """The piece's resamples, drawn here (each piece its own generator of `seed`: the pieces' draws run on
        every core): each image's draw counts then a whole row, so that a slice's images' counts are read at once."""
        m = min(rows, resamples - piece * rows)
        draws = np.random.default_rng([seed, piece]).integers(0, n, size=(m, n), dtype=np.int32)
        counts = np.empty((m, n), dtype=np.float32)
        for row, drawn in zip(counts, draws, strict=True):
            row[:] = np.bincount(drawn, minlength=n)
        by_image = np.ascontiguousarray(counts.T)
        sums = np.empty((len(slices), 4, m, N_BINS), dtype=np.float64)
        for i, (members, bounds) in enumerate(zip(ordered, ends, strict=True)):
            drawn, own = by_image[members], values[members]
            for b in range(N_BINS):
                sums[i, :, :, b] = own[bounds[b] : bounds[b + 1]].T @ drawn[bounds[b] : bounds[b + 1]]
        size, hits, conf, nll_sum = sums.sum(axis=3).transpose(1, 2, 0)  # each (rows, slices)
        size[size == 0] = np.nan  # a small slice no image of a resample falls in: that resample has no value
        return {
            "accuracy": hits / size,
            "nll": nll_sum / size,
            "mean_confidence": conf / size,
            "overconfidence": (conf - hits) / size,
            "ece": np.abs(sums[:, 1] - sums[:, 2]).sum(axis=2).T / size,
        }

    # Pieces of RESAMPLE_ROWS resamples (not resampling's default of a quarter of a million counts): a slice's 15
    # products per piece are few and large then, where a few rows each would be mostly the loop's overhead.
    return concatenated(list(map_in_order(statistic, range(-(-resamples // rows)), SLICE_THREADS)))


def _intervals(estimates: list[dict[str, float]], drawn: dict[str, np.ndarray]) -> list[dict[str, list[float]]]:
    """Each slice's 95% intervals from its metrics' resampled values (`drawn`: metric -> (resamples, slices)): the
    percentile interval, the ECE's bias-corrected as every view's (metrics/bootstrap.py), over the resamples that
    hold any of its images (all of them but for a slice of a few images); none from fewer than two."""
    if not drawn:
        return [{} for _ in estimates]
    valid = np.isfinite(drawn["accuracy"])  # (resamples, slices): the resamples holding any of a slice's images
    # Every slice's at once where every resample holds it (any slice of more than a few images).
    ends = {name: percentile_ends(values) for name, values in drawn.items()}  # each (2, slices)
    ends["ece"] = bias_corrected_ends(np.array([m["ece"] for m in estimates]), drawn["ece"])
    out = []
    for i, metrics in enumerate(estimates):
        held = valid[:, i]
        if held.all():
            out.append({name: [float(v) for v in ends[name][:, i]] for name in metrics})
        elif held.sum() >= 2:
            own = {name: percentile_ends(values[held, i]) for name, values in drawn.items()}
            own["ece"] = bias_corrected_ends(np.asarray(metrics["ece"]), drawn["ece"][held, i])
            out.append({name: [float(v) for v in own[name]] for name in metrics})
        else:
            out.append({})
    return out


def _wilson(successes: int, n: int) -> tuple[float, float]:
    """Wilson's 95% score interval of successes / n."""
    p = successes / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 / (1 + Z95**2 / n) * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n))
    return centre - half, centre + half


def _two_sided(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2))


def accuracy_gap(hits_in: int, n_in: int, hits_out: int, n_out: int) -> dict:
    """The slice's accuracy less the rest's: Newcombe's (1998) hybrid score interval (method 10) and the pooled
    two-proportion z-test's two-sided p-value."""
    p1, p2 = hits_in / n_in, hits_out / n_out
    (l1, u1), (l2, u2) = _wilson(hits_in, n_in), _wilson(hits_out, n_out)
    gap = p1 - p2
    low = gap - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = gap + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    pooled = (hits_in + hits_out) / (n_in + n_out)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n_in + 1 / n_out))
    p_value = _two_sided(gap / se) if se > 0 else 1.0
    return {"gap": float(gap), "interval": [float(low), float(high)], "p_value": float(p_value)}


def mean_gap(inside: np.ndarray, outside_sum: float, outside_squares: float, n_out: int) -> dict:
    """The slice's mean of a per-image value less the rest's (given by its sum and sum of squares): Welch's
    normal 95% interval and two-sided p-value."""
    n_in = len(inside)
    mean_in, mean_out = float(inside.mean()), outside_sum / n_out
    var_in = float(inside.var(ddof=1)) if n_in > 1 else 0.0
    var_out = max(outside_squares - n_out * mean_out**2, 0.0) / (n_out - 1) if n_out > 1 else 0.0
    se = math.sqrt(var_in / n_in + var_out / n_out)
    gap = mean_in - mean_out
    p_value = _two_sided(gap / se) if se > 0 else (1.0 if gap == 0 else 0.0)
    return {"gap": float(gap), "interval": [float(gap - Z95 * se), float(gap + Z95 * se)], "p_value": float(p_value)}


def adjust(p_values: np.ndarray, correction: str) -> np.ndarray:
    """p-values adjusted for the family of all of them: Holm's step-down (max over the sorted prefix of
    (m - i) p_(i)) or Benjamini-Hochberg's (min over the sorted suffix of m p_(i) / (i + 1)), capped at 1."""
    m = len(p_values)
    if m == 0:
        return p_values
    order = np.argsort(p_values, kind="stable")
    ranked = p_values[order]
    if correction == "holm":
        stepped = np.maximum.accumulate((m - np.arange(m)) * ranked)
    elif correction == "bh":
        stepped = np.minimum.accumulate((m * ranked / np.arange(1, m + 1))[::-1])[::-1]
    else:
        raise UsageError(f"unknown correction {correction!r}; choose one of {', '.join(CORRECTIONS)}")
    out = np.empty(m)
    out[order] = np.minimum(stepped, 1.0)
    return out


def multicalibration_error(confidence: np.ndarray, correct: np.ndarray, slices: list[Slice], min_size: int) -> dict:
    """The largest |sum over a slice's images in a confidence bin of (confidence - correct)| / slice size, over
    the whole data and every slice of at least `min_size` images, with where it is (module docstring)."""
    which = bin_index(confidence)
    residual = confidence - correct
    edges = np.linspace(0, 1, N_BINS + 1)
    best: dict[str, Any] = {"error": -1.0}
    for column, value, members in [(None, None, np.arange(len(confidence)))] + [
        (s.column, s.value, s.members) for s in slices if len(s.members) >= min_size
    ]:
        per_bin = np.abs(np.bincount(which[members], weights=residual[members], minlength=N_BINS)) / len(members)
        b = int(np.argmax(per_bin))
        if per_bin[b] > best["error"]:
            best = {
                "error": float(per_bin[b]),
                "column": column,
                "value": value,
                "bin": [float(edges[b]), float(edges[b + 1])],
                "n": int(len(members)),
            }
    best["min_size"] = int(min_size)
    return best
