"""How a recomputed sample report is compared with the golden (tests/goldens/sample_report.json).

The report is computed from onnxruntime's float32 logits and from corrupted images, and neither is
bit-reproducible across CPUs: onnxruntime, torch, MKL and numpy pick kernels (and summation orders)
by the instruction set they find. Two sources of change are legitimate:

1. float32 rounding of the logits, about 1e-6 relative (tests/goldens/perturb.py stands in for it);
2. corrupted images a grey level apart on a few pixels: zoom, defocus, glass and motion blur,
   elastic_transform, contrast and spatter compute in float32 and round to uint8, and a value
   within rounding of .5 rounds either way (test_goldens.py bounds these: at most 1 grey level).

Everything else is exact: strings, integers, list lengths, keys, and the floats that are counts
divided by n (accuracy, coverage, set sizes, bin edges: compared to 1e-12 relative, the repr of a
ratio of integers).

Each float tolerance below is derived, not guessed. MEASURED is the largest change of any field of
that name between this code's report on one machine (Intel Xeon, AVX-512) and: 12 seeds of 1e-6
relative logit noise; the golden, computed on the developers' machine; the same machine with
torch, MKL, OpenBLAS and numpy forced to their AVX2 kernels (ATEN_CPU_CAPABILITY=avx2,
MKL_ENABLE_INSTRUCTIONS=AVX2, OPENBLAS_CORETYPE=Haswell, NPY_DISABLE_CPU_FEATURES="X86_V4
AVX512_ICL AVX512_SPR"); and torch forced to its scalar kernels (ATEN_CPU_CAPABILITY=default).
Each tolerance is at least 4x its MEASURED value (the margin for a CPU not among those), rounded
up to a 1-2-2.5-5 step, and the calibration errors' stays at or below 2.5e-4, so that a change of
1e-3 in an ECE fails with a 4x margin (test_goldens.py checks both).

Discontinuous fields. A sample whose confidence sits within rounding of one of the 15 equal-width
bin edges can land in either bin; two samples of (nearly) equal confidence, one right and one
wrong, can swap ranks. Such an event moves a count by one and can make a binned or rank-based
statistic jump. Where the report shows the event (the reliability counts, the clean view's
risk-coverage curve), the stable quantity is compared (cumulative counts within one per event)
and the jump's bound is added to the tolerance of the statistics it can move, for that view only.
Where the report cannot show it (equal-mass bins, per-class bins, the sweep's bin count of
corruption views), only the smooth tolerance applies: such a jump needs a right and a wrong sample
whose confidences differ by less than their change (about 1e-6 under logit noise) at one of the 14
boundaries of a view's equal-mass bins: about 1 in 100 per pair of machines over the report's 23
views, none in the 16 comparisons measured (one bin-edge crossing was, and is handled above). Were
it to happen, it would show as a difference in those fields of one view only, well over the tolerance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tol:
    abs: float = 0.0
    rel: float = 0.0

    def allows(self, got: float, want: float, extra: float = 0.0) -> bool:
        return abs(got - want) <= self.abs + self.rel * abs(want) + extra


EXACT = Tol(rel=1e-12)  # ratios of integers and constants: the same float up to repr
CALIBRATION = Tol(abs=2.5e-4)  # ECE family: MEASURED 6.9e-5 (elastic_transform, torch scalar kernels)

# by field name (the last key of a path; list indices ignored)
FLOATS: dict[str, Tol] = {
    # calibration errors in [0, 1] (also their bootstrap intervals, the corruption summary's means)
    "ece": CALIBRATION,
    "adaptive_ece": CALIBRATION,  # MEASURED 6.2e-5
    "ece_sweep": CALIBRATION,  # MEASURED 6.4e-5
    "smooth_ece": CALIBRATION,  # MEASURED 1.9e-5
    "sigma": CALIBRATION,  # smooth ECE's bandwidth, equal to it at the fixed point
    "classwise_ece": CALIBRATION,  # MEASURED 1.0e-5
    "l2_ece": CALIBRATION,  # MEASURED 6.3e-5
    "debiased_l2_ece": CALIBRATION,  # MEASURED 2.1e-5
    "mean_confidence": CALIBRATION,  # MEASURED 6.4e-5
    "mean_ece_15": CALIBRATION,  # means of the corruption views' ECE: MEASURED 4.6e-6
    "mean_ece_19": CALIBRATION,
    "mce": Tol(abs=5e-4),  # one bin's gap: MEASURED 1.2e-4 (zoom_blur), jumps handled below
    "brier": Tol(abs=5e-4),  # range [0, 2]: MEASURED 1.1e-4 (elastic_transform)
    "nll": Tol(abs=1.5e-3),  # MEASURED 3.0e-4 (zoom_blur); a fitted temperature's: FITTED below
    # logit scale, unbounded: MEASURED 4.7e-4 (mean_margin 2.74, zoom_blur) and 1.1e-3 (mean_logit_norm 11)
    "mean_margin": Tol(abs=1e-3, rel=4e-4),
    "mean_max_logit": Tol(abs=1e-3, rel=4e-4),
    "mean_logit_norm": Tol(abs=1e-3, rel=4e-4),
    "mean_margin_subset": Tol(abs=1e-3, rel=4e-4),
    # finite-difference sensitivity (step 1e-2: logit noise / 2h is amplified 50x): MEASURED 3.1e-4 relative
    # (median_flip_radius, logit noise), 1.8e-4 (lipschitz_error), 7e-5 (lipschitz, robustness_ratio)
    "lipschitz": Tol(rel=1.5e-3),
    "lipschitz_error": Tol(rel=1.5e-3),
    "median_flip_radius": Tol(rel=1.5e-3),
    "robustness_ratio": Tol(rel=1.5e-3),
    # conformal thresholds (quantiles of scores): MEASURED 1.3e-6 (LAC), 2.6e-10 (APS)
    "threshold": Tol(abs=1e-5),
    "class_thresholds": Tol(abs=1e-5),  # the class-conditional thresholds: the same quantiles, per class
    # a fitted temperature on 20 images (its optimum T = 0.019 sits where the fit is flat): MEASURED 4.5e-4
    # relative under logit noise, on the temperature and on the NLL it gives
    "temperature": Tol(rel=2e-3),
    # smooth reliability curves on a 101-point grid: MEASURED 1.4e-5 (density), 9.7e-6 (accuracy)
    "density": Tol(abs=1e-4),
    # one image's max softmax (clean.predictions' extremes): float32 logit rounding moves it by about 1e-7
    "confidence_min": Tol(abs=1e-5),
    "confidence_max": Tol(abs=1e-5),
    # the multicalibration error: one confidence bin's sum of (confidence - correct) over a slice's size, as an ECE
    "error": CALIBRATION,
    # selective prediction, rank based: see `_selective`
}
FITTED = Tol(rel=2e-3)  # NLL after a fitted temperature (or a vector scaling started from it): MEASURED 4.5e-4
FITTED_PATHS = ("/temperature_scaling/scaled/", "/calibrators/methods")
SMOOTH_ACCURACY = Tol(abs=1e-4)  # smooth_reliability/accuracy: MEASURED 9.7e-6
BIN_CONFIDENCE = Tol(abs=4e-3)  # one bin's mean confidence (bins of 1-3 samples): MEASURED 9.8e-4
# A bootstrap endpoint is an order statistic of the resampled statistic, which moves by at most the largest
# change of any resample; a resample holds one sample up to 7 times (P(count >= 8) < 1e-5 over 200 resamples).
RESAMPLE_MULTIPLICITY = 7
EXACT_NAMES = {
    "accuracy",
    "clean_accuracy",
    "top_class_share",
    "coverage",
    "lowest_coverage",
    "worst_class_coverage",
    "mean_set_size",
    "frac_margin_below_target",
    "robust_accuracy",
    "mean_corruption_error_unnormalized",
    "mean_accuracy_15",
    "mean_accuracy_19",
    "mean_accuracy_selected",
    "edges",
    "confidence",
    "mean",
    "std",
    "margin_target",
    "target_coverage",
    "fit_fraction",
    "coverage_interval",  # Clopper-Pearson intervals: functions of integer counts
    "worst_class_coverage_interval",
    "lowest_coverage_interval",
    "penalty",  # RAPS's penalty: a value of its grid
    "level",  # the slices' tests' level, a constant
    "bin",  # a confidence bin's edges
}


@dataclass
class Events:
    """What the report shows of one view's discrete events, and the extra tolerance they allow."""

    crossings: int = 0  # bin edges whose cumulative count differs from the golden's
    mce_jump: float = 0.0
    swaps: int = 0  # ranks of the clean risk-coverage curve whose error count differs
    swap_inverse_ranks: float = 0.0  # sum of 1/k over those ranks
    n: int = 0

    def extra(self, name: str, interval: bool) -> float:
        m = RESAMPLE_MULTIPLICITY if interval else 1
        if not self.n:
            return 0.0
        if name == "ece":  # a moved sample's (confidence - correct), |.| <= 1, leaves one bin's sum for another's
            return m * 2 * self.crossings / self.n
        if name == "mce":
            return 1.0 if interval and self.crossings else self.mce_jump
        if name in ("aurc", "e_aurc") and self.swaps:
            return m * self.swap_inverse_ranks / self.n
        return 0.0


@dataclass
class Comparison:
    problems: list[str] = field(default_factory=list)

    def fail(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")


def compare_reports(got: dict, want: dict) -> list[str]:
    """The differences between a recomputed stable report and the golden that the tolerances do not allow."""
    out = Comparison()
    events = {}
    for path, g, w in _views(got, want):
        events[path] = _view_events(out, path, g, w)
    summary = _summary_allowances(got, want, events)
    _walk(out, "", got, want, events, summary)
    return out.problems


def _views(got: dict, want: dict):
    if isinstance(want.get("clean"), dict):
        yield "/clean", got.get("clean") or {}, want["clean"]
    for i, (g, w) in enumerate(zip(got.get("views") or [], want.get("views") or [], strict=False)):
        yield f"/views[{i}]", g, w


def _cumsum(values) -> list[float]:
    total, out = 0.0, []
    for v in values:
        total += v
        out.append(total)
    return out


def _view_events(out: Comparison, path: str, got: dict, want: dict) -> Events:
    ev = Events(n=int((want.get("metrics") or {}).get("n") or 0))
    g, w = got.get("reliability"), want.get("reliability")
    if isinstance(g, dict) and isinstance(w, dict) and len(g.get("count", [])) == len(w.get("count", [])):
        gc, wc = g["count"], w["count"]
        cg, cw = _cumsum(gc), _cumsum(wc)
        moved = [abs(a - b) for a, b in zip(cg, cw, strict=True)]
        if cg[-1] != cw[-1] or max(moved) > 1:
            out.fail(f"{path}/reliability/count", f"{gc} against {wc}: more than one sample moved across a bin edge")
        ev.crossings = sum(d > 0 for d in moved)
        changed = [b for b in range(len(gc)) if gc[b] != wc[b]]
        if changed:
            ev.mce_jump = max(1.0 if min(gc[b], wc[b]) == 0 else 1.0 / min(gc[b], wc[b]) for b in changed)
        # stable per-edge sums: correct samples and total confidence of the bins below each edge
        for key, tol in (("accuracy", 0.0), ("mean_confidence", BIN_CONFIDENCE.abs)):
            sg = _cumsum(c * (v or 0.0) for c, v in zip(gc, g[key], strict=True))
            sw = _cumsum(c * (v or 0.0) for c, v in zip(wc, w[key], strict=True))
            for b, (a, z) in enumerate(zip(sg, sw, strict=True)):
                if abs(a - z) > moved[b] + tol * cw[b] + 1e-9:
                    out.fail(f"{path}/reliability/{key}", f"bins up to {b}: sum {a} against {z}")
    g, w = got.get("risk_coverage"), want.get("risk_coverage")
    if isinstance(g, dict) and isinstance(w, dict) and len(g["risk"]) == len(w["risk"]):
        for i, (a, z) in enumerate(zip(g["risk"], w["risk"], strict=True)):
            k = i + 1  # errors among the k most confident (tie groups share theirs: not always an integer)
            d = abs(a * k - z * k)
            if d > 1 + 1e-9:
                out.fail(f"{path}/risk_coverage/risk[{i}]", f"{a} against {z}: more than one error moved")
            elif d > 1e-9:
                ev.swaps += 1
                ev.swap_inverse_ranks += 1 / k
    return ev


def _summary_allowances(got: dict, want: dict, events: dict) -> dict:
    """The corruption summary's ECE values average the views' ECE: a jump in a view is allowed there too
    (per corruption: that view's; families and means: the largest of any corruption view, a valid bound
    for a mean)."""
    per = {}
    for i, view in enumerate(want.get("views") or []):
        if view.get("corruption"):
            per[view["corruption"]] = events.get(f"/views[{i}]", Events()).extra("ece", False)
    return {"per": per, "max": max(per.values(), default=0.0)}


VIEW_PARTS = ("reliability", "metrics", "intervals", "risk_coverage")  # a view's numbers, judged by its events


def _rule(path: str, name: str) -> Tol | None:
    if name == "nll" and path.startswith(FITTED_PATHS):
        return FITTED
    if name == "accuracy" and "/smooth_reliability/" in path:
        return SMOOTH_ACCURACY
    if name in EXACT_NAMES:
        return EXACT
    return FLOATS.get(name)


def _walk(out: Comparison, path: str, got, want, events: dict, summary: dict) -> None:
    if isinstance(want, dict):
        _walk_dict(out, path, got, want, events, summary)
    elif isinstance(want, list):
        if not isinstance(got, list) or len(got) != len(want):
            out.fail(path, f"length {len(got) if isinstance(got, list) else 'not a list'} against {len(want)}")
            return
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            _walk(out, f"{path}[{i}]", g, w, events, summary)
    else:
        _leaf(out, path, got, want, _summary_extra(path, summary))


def _walk_dict(out: Comparison, path: str, got, want: dict, events: dict, summary: dict) -> None:
    """A section: the same keys, each value walked, but a view's own numbers (its reliability, metrics, intervals
    and risk-coverage curve) judged against that view's events, and the calibrators' choice as `_selected` does."""
    if not isinstance(got, dict) or set(got) != set(want):
        missing = sorted(set(want) - set(got or {}))
        added = sorted(set(got or {}) - set(want)) if isinstance(got, dict) else "not a dict"
        out.fail(path or "/", f"keys differ: missing {missing}, added {added}")
        return
    calibrators = path.endswith("/calibrators")
    if calibrators and "selected" in want:
        _selected(out, path, got, want)
    for key in want:
        if calibrators and key == "selected":
            continue
        sub = f"{path}/{key}"
        view = events.get(sub.rsplit("/", 1)[0])  # the events of the view whose section this is, if any
        if view is None or key not in VIEW_PARTS:
            _walk(out, sub, got[key], want[key], events, summary)
        elif key == "reliability":
            _reliability(out, sub, got[key], want[key], view)
        elif key == "risk_coverage":
            _walk(out, f"{sub}/coverage", got[key]["coverage"], want[key]["coverage"], events, summary)
        else:
            _metrics(out, sub, got[key], want[key], view, interval=key == "intervals")


def _summary_extra(path: str, summary: dict) -> float:
    if not path.startswith("/corruption_summary/") or not (path.endswith("/ece") or "/mean_ece_" in path):
        return 0.0
    parts = path.split("/")
    if parts[2] == "corruptions":
        return summary["per"].get(parts[3], 0.0)
    return summary["max"]


def _name(path: str) -> str:
    last = path.rsplit("/", 1)[-1]
    return last.split("[", 1)[0]


def _leaf(out: Comparison, path: str, got, want, extra: float = 0.0) -> None:
    if isinstance(want, bool) or not isinstance(want, float) or not isinstance(got, float):
        if type(got) is not type(want) and not (isinstance(got, (int, float)) and isinstance(want, (int, float))):
            out.fail(path, f"{got!r} against {want!r}")
        elif got != want:
            out.fail(path, f"{got!r} against {want!r}")
        return
    if math.isnan(want) or math.isinf(want):
        if not (got == want or (math.isnan(got) and math.isnan(want))):
            out.fail(path, f"{got!r} against {want!r}")
        return
    rule = _rule(path, _name(path))
    if rule is None:
        out.fail(path, f"no tolerance is defined for this field ({got!r} against {want!r}): add one to tolerances.py")
    elif not rule.allows(got, want, extra):
        out.fail(path, f"{got!r} against {want!r} (tolerance {rule}, +{extra:g} for discrete events)")


def _metrics(out: Comparison, path: str, got: dict, want: dict, ev: Events, interval: bool) -> None:
    """A view's metrics or bootstrap intervals: the smooth tolerance plus what its events allow."""
    if set(got) != set(want):
        out.fail(path, f"keys differ: {sorted(set(got) ^ set(want))}")
        return
    for key in want:
        g, w = got[key], want[key]
        pairs = list(zip(g, w, strict=True)) if isinstance(w, list) and len(g) == len(w) else [(g, w)]
        if isinstance(w, list) and len(g) != len(w):
            out.fail(f"{path}/{key}", f"length {len(g)} against {len(w)}")
            continue
        for j, (a, z) in enumerate(pairs):
            sub = f"{path}/{key}" + (f"[{j}]" if isinstance(w, list) else "")
            if key in SELECTIVE:
                _selective(out, sub, key, a, z, want if not interval else None, ev)
            else:
                _leaf(out, sub, a, z, ev.extra(key, interval))


SELECTIVE = {
    "aurc",
    "e_aurc",
    "misclassification_auroc",
    "risk_at_80_coverage",
    "risk_at_90_coverage",
    "risk_at_95_coverage",
    "coverage_at_1_risk",
    "coverage_at_5_risk",
}


def _selective(out: Comparison, path: str, key: str, got, want, metrics: dict | None, ev: Events) -> None:
    """Rank-based: an adjacent swap of a right and a wrong sample of (nearly) equal confidence changes the
    errors among the k most confident by one at one rank k. Its effect, one swap allowed per view: AUROC
    1/(n_right n_wrong) (MEASURED: exactly that, 6.25e-4); AURC and E-AURC (1/N) sum of 1/k over the swapped
    ranks, where the clean curve shows them, else 1/N (k >= 1; MEASURED 1.6e-4, k = 61); risk at coverage c
    1/ceil(cN); coverage at a risk 1/N (MEASURED: 0.01, one sample)."""
    if not isinstance(want, float) or not isinstance(got, float):
        _leaf(out, path, got, want)
        return
    n = ev.n or 1
    if key == "misclassification_auroc":
        accuracy = (metrics or {}).get("accuracy")
        right = round(accuracy * n) if isinstance(accuracy, float) else 0
        allowance = 1.0 / (right * (n - right)) if 0 < right < n else 0.0
    elif key in ("aurc", "e_aurc"):
        allowance = (ev.swap_inverse_ranks if ev.swaps else 1.0) / n
    elif key.startswith("risk_at_"):
        coverage = int(key.split("_")[2]) / 100
        allowance = 1.0 / max(1, math.ceil(round(coverage * n, 9)))
    else:
        allowance = 1.0 / n
    if abs(got - want) > allowance + 1e-12:
        out.fail(path, f"{got!r} against {want!r} (one rank swap allows {allowance:g})")


def _reliability(out: Comparison, path: str, got: dict, want: dict, ev: Events) -> None:
    """Counts and per-edge sums are checked in `_view_events`; per-bin values only where no sample moved."""
    if set(got) != set(want):
        out.fail(path, f"keys differ: {sorted(set(got) ^ set(want))}")
        return
    _walk(out, f"{path}/edges", got["edges"], want["edges"], {}, {"per": {}, "max": 0.0})
    if ev.crossings:
        return
    if got["count"] != want["count"]:
        out.fail(f"{path}/count", f"{got['count']} against {want['count']}")
    for key, tol in (("accuracy", EXACT), ("mean_confidence", BIN_CONFIDENCE)):
        for b, (a, z) in enumerate(zip(got[key], want[key], strict=True)):
            if (a is None) != (z is None) or (z is not None and not tol.allows(a, z)):
                out.fail(f"{path}/{key}[{b}]", f"{a!r} against {z!r} (tolerance {tol})")


def _selected(out: Comparison, path: str, got: dict, want: dict) -> None:
    """The selected calibrator is an argmin of a score: where two methods' scores tie within that score's
    tolerance (temperature and vector scaling, started from the same map, can reach the same optimum), either
    is right."""
    select = want.get("select")
    scores = {m["method"]: (m.get("scores") or {}).get(select) for m in want.get("methods", [])}
    best = scores.get(want["selected"])
    if got.get("selected") == want["selected"]:
        return
    other = scores.get(got.get("selected"))
    tol = _rule(f"{path}/methods/scores/{select}", select) or EXACT
    if best is None or other is None or not tol.allows(other, best):
        out.fail(f"{path}/selected", f"{got.get('selected')!r} against {want['selected']!r}")
