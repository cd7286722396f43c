"""Real data no one here made: scikit-learn classifiers' probabilities on held-out splits of scikit-learn's own data
sets (load_digits: 1,797 handwritten digits, 10 classes; load_breast_cancer: 569 tumours, binary), audited through
`macs_audit.audit_predictions` and `macs-audit evaluate --predictions`, calibrated and gated. Each number against a
reference written here or taken from scikit-learn: the ECE against a direct numpy computation, the Brier score
against `sklearn.metrics.brier_score_loss`, the isotonic calibrator against `sklearn.isotonic.IsotonicRegression`,
the reliability curve against `sklearn.calibration.calibration_curve`.

Two digits classifiers: GaussianNB, badly calibrated (half its confidences exactly 1.0, a third of its probabilities
exactly 0: the ties, the bins' top edge and the probability floor), and a logistic regression on standardised
pixels (smooth probabilities); GaussianNB again for the tumours.
"""

import csv
import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from sklearn.calibration import calibration_curve
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.isotonic import IsotonicRegression
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss
from sklearn.model_selection import train_test_split
from sklearn.naive_bayes import GaussianNB
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from typer.testing import CliRunner

import macs_audit
from macs_audit.auditing.calibration import calibration_split
from macs_audit.calibrators.isotonic import fit_isotonic
from macs_audit.cli import app

BINS = 15
# The audit reads probabilities as log(max(p, FLOOR)) (macs_audit/scores.py), so its p is the file's p renormalised:
# a digits row of GaussianNB sums to 1 within 4e-10, which bounds the difference of every mean below.
TOLERANCE = 1e-9
CALIBRATION_SPLIT = 0.2  # the audit's default: the fraction the calibrators are fitted on
FLOOR = 1e-300  # macs_audit.scores.PROBABILITY_FLOOR, written out: the log of 0 is not taken


def held_out(x, y, model):
    """`model` fitted on a stratified half, and its probabilities and the labels of the other half."""
    x_fit, x_held, y_fit, y_held = train_test_split(x, y, test_size=0.5, random_state=0, stratify=y)
    return model.fit(x_fit, y_fit).predict_proba(x_held), y_held


@pytest.fixture(scope="module", params=["naive_bayes", "logistic"])
def digits(request):
    """(probabilities (899, 10), labels) of a digits classifier on held-out digits."""
    x, y = load_digits(return_X_y=True)
    model = GaussianNB() if request.param == "naive_bayes" else make_pipeline(StandardScaler(), LogisticRegression())
    return held_out(x, y, model)


@pytest.fixture(scope="module")
def digits_report(digits):
    p, y = digits
    return macs_audit.audit_predictions(p, y, kind="probabilities", bootstrap=100, calibrators=["isotonic"])


@pytest.fixture(scope="module")
def cancer():
    """(probability of malignant (285,), label: 1 malignant) of a GaussianNB on held-out tumours. scikit-learn's
    target is 0 for malignant; the positive class here is malignant."""
    x, target = load_breast_cancer(return_X_y=True)
    p, target_held = held_out(x, target, GaussianNB())
    return p[:, 0], (target_held == 0).astype(np.int64)


def bins(confidence: np.ndarray) -> list[np.ndarray]:
    """Each of the 15 equal-width bins' members: bin b holds confidences in (b/15, (b+1)/15], and 0 goes to the
    first (the method reference's convention)."""
    return [
        ((confidence > b / BINS) & (confidence <= (b + 1) / BINS)) | ((confidence == 0) & (b == 0)) for b in range(BINS)
    ]


def top_label_ece(p: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """(ECE, MCE) of the top label, written as the definition reads: sum_b n_b/N |acc_b - conf_b|, and the largest
    gap of a non-empty bin."""
    confidence, correct = p.max(axis=1), p.argmax(axis=1) == y
    ece, mce = 0.0, 0.0
    for inside in bins(confidence):
        if inside.any():
            gap = abs(correct[inside].mean() - confidence[inside].mean())
            ece += inside.sum() / len(y) * gap
            mce = max(mce, gap)
    return ece, mce


def sklearn_brier(y: np.ndarray, p: np.ndarray) -> float:
    """scikit-learn's multi-class Brier score (1.7 and later: not halved for more than two classes, range [0, 2]);
    before 1.7, which has only the binary form, the sum of the classes' one-vs-rest Briers (the same number)."""
    if "labels" in inspect.signature(brier_score_loss).parameters:
        return float(brier_score_loss(y, p, labels=range(p.shape[1])))
    return float(sum(brier_score_loss(y == k, p[:, k]) for k in range(p.shape[1])))


def both_classes(p1: np.ndarray) -> np.ndarray:
    return np.stack([1 - p1, p1], axis=1)


def reliability_of(report) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(counts, accuracy, mean confidence) of the report's reliability diagram, the empty bins left out of the two
    means (calibration_curve leaves them out)."""
    curve = report.clean.reliability
    count = np.asarray(curve.count)
    accuracy = np.array([a for a in curve.accuracy if a is not None], dtype=np.float64)
    confidence = np.array([c for c in curve.mean_confidence if c is not None], dtype=np.float64)
    return count, accuracy, confidence


def assert_reliability_is_sklearns(report, p: np.ndarray, y: np.ndarray) -> None:
    confidence, correct = p.max(axis=1), (p.argmax(axis=1) == y).astype(np.int64)
    prob_true, prob_pred = calibration_curve(correct, confidence, n_bins=BINS, strategy="uniform")
    count, accuracy, mean_confidence = reliability_of(report)
    np.testing.assert_array_equal(report.clean.reliability.edges, np.linspace(0, 1, BINS + 1))
    np.testing.assert_array_equal(count, [inside.sum() for inside in bins(confidence)])
    assert (count > 0).sum() == len(prob_true)
    np.testing.assert_allclose(accuracy, prob_true, rtol=0, atol=1e-12)  # counts of hits over counts: exact
    np.testing.assert_allclose(mean_confidence, prob_pred, rtol=0, atol=TOLERANCE)


def test_digits_ece_and_brier_equal_the_references(digits, digits_report):
    p, y = digits
    metrics = digits_report.clean.metrics
    ece, mce = top_label_ece(p, y)
    assert ece > 0.01  # a classifier the test can tell from a calibrated one
    np.testing.assert_allclose(metrics["ece"], ece, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(metrics["mce"], mce, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(metrics["accuracy"], (p.argmax(axis=1) == y).mean(), rtol=0, atol=1e-15)
    # macs-audit's Brier is the mean over samples of the squared error summed over the K classes, range [0, 2]
    # (conventions.brier). scikit-learn (1.7 and later) takes multi-class probabilities and, for more than two
    # classes, does not halve: the same normalisation. The one-hot sum is written out as well.
    assert digits_report.conventions.brier.startswith("mean over samples of the squared error summed over classes")
    onehot = np.eye(10)[y]
    np.testing.assert_allclose(metrics["brier"], ((p - onehot) ** 2).sum(axis=1).mean(), rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(metrics["brier"], sklearn_brier(y, p), rtol=0, atol=TOLERANCE)
    # One-vs-rest, class k's binary Brier (scikit-learn's, over [0, 1]) sums to the same over the classes.
    per_class = sum(brier_score_loss(y == k, p[:, k]) for k in range(10))
    np.testing.assert_allclose(metrics["brier"], per_class, rtol=0, atol=TOLERANCE)
    # NLL of probabilities: -log max(p_y, 1e-300) (a 0 at the label costs 690.8 nats, not infinity).
    nll = -np.log(np.maximum(p[np.arange(len(y)), y], FLOOR)).mean()
    np.testing.assert_allclose(metrics["nll"], nll, rtol=1e-12)


def test_digits_reliability_curve_is_sklearns(digits, digits_report):
    assert_reliability_is_sklearns(digits_report, *digits)


def test_confidences_on_the_bin_edges_go_to_the_bin_below():
    """Confidences exactly 8/15, ..., 15/15: the method reference puts c in (b/15, (b+1)/15] (Guo et al.), so each
    edge belongs to the bin below it and 1.0 to the last. calibration_curve's uniform strategy (scikit-learn 1.9)
    bins with np.searchsorted(inner edges, c, side="left"), the same (lo, hi] rule: the two agree on every edge.
    The [lo, hi) rule of np.digitize (torchmetrics and netcal's) would move every one of them up a bin."""
    edges = np.linspace(0, 1, BINS + 1)
    p1 = np.repeat(edges[8:], 3)  # 8 edges above 0.5, three samples each: confidence = p1
    y = np.tile([1, 1, 0], 8)  # two of three correct in every bin
    report = macs_audit.audit_predictions(p1, y, kind="probabilities", bootstrap=0, calibrators="none")
    count, accuracy, _ = reliability_of(report)
    np.testing.assert_array_equal(count, [0] * 7 + [3] * 8)  # edge b/15 in bin b - 1: bins 7 to 14
    np.testing.assert_array_equal(np.digitize(edges[8:], edges) - 1, np.arange(8, 16))  # [lo, hi): a bin up, 16 bins
    assert_reliability_is_sklearns(report, both_classes(p1), y)
    np.testing.assert_allclose(accuracy, 2 / 3, rtol=1e-15)
    np.testing.assert_allclose(report.clean.metrics["ece"], top_label_ece(both_classes(p1), y)[0], atol=1e-15)


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def isotonic_references(p: np.ndarray, y: np.ndarray, rows: np.ndarray) -> list[IsotonicRegression]:
    """scikit-learn's isotonic regression of each class's probability on its indicator, on `rows`."""
    return [
        IsotonicRegression(y_min=0, y_max=1, out_of_bounds="clip").fit(p[rows, k], (y[rows] == k).astype(float))
        for k in range(p.shape[1])
    ]


def test_isotonic_equals_sklearns(digits):
    """fit_isotonic's one-vs-rest maps are scikit-learn's IsotonicRegression (increasing, in [0, 1], clipped beyond
    the fitted range) on the same probabilities. Beyond it macs-audit floors each estimate at 0.01 / K and divides by
    the row's sum (a class with no positives above would otherwise give probability 0 and an infinite NLL):
    compared as that same step applied to scikit-learn's estimates.

    "The same probabilities": the softmax of the logits the audit reads the file's probabilities as, which differ
    from the file's by the rows' renormalisation (up to 4e-10 here). That is enough to matter: GaussianNB's
    confidences crowd below 1.0, where two fitted points 1e-10 apart can carry values 0.5 apart, and scikit-learn
    fitted on the file's own probabilities moves a few of GaussianNB's estimates by about 0.01."""
    p_file, y = digits
    z = np.log(np.maximum(p_file, FLOOR))  # the logits the audit reads probabilities as
    p = softmax(z)
    split = calibration_split(y, CALIBRATION_SPLIT, 0)
    assert split is not None
    fitted = fit_isotonic(z[split.fit], y[split.fit])
    references = isotonic_references(p, y, split.fit)
    for k, reference in enumerate(references):
        np.testing.assert_allclose(fitted.thresholds[k], reference.X_thresholds_, rtol=0, atol=1e-15)
        np.testing.assert_allclose(fitted.values[k], reference.y_thresholds_, rtol=0, atol=1e-12)
    for rows in (split.fit, split.scored):
        ours = fitted.one_vs_rest(z[rows])
        theirs = np.stack([r.predict(p[rows, k]) for k, r in enumerate(references)], axis=1)
        np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOLERANCE)
        floored = np.maximum(theirs, 0.01 / 10)
        np.testing.assert_allclose(
            np.exp(fitted.transform(z[rows])), floored / floored.sum(axis=1, keepdims=True), rtol=0, atol=TOLERANCE
        )


def test_the_audits_isotonic_row_is_sklearns_map_scored(digits, digits_report):
    """The report's isotonic calibrator: fitted on the audit's calibration split (n_fit) and scored on the rest; the
    same split fitted with scikit-learn and scored here gives the same accuracy, ECE and Brier."""
    p_file, y = digits
    p = softmax(np.log(np.maximum(p_file, FLOOR)))
    split = calibration_split(y, CALIBRATION_SPLIT, 0)
    assert split is not None
    section = digits_report.calibrators
    assert (section.n_fit, section.n_eval) == (len(split.fit), len(split.scored))
    row = next(m for m in section.methods if m["method"] == "isotonic")["scores"]
    references = isotonic_references(p, y, split.fit)
    q = np.stack([r.predict(p[split.scored, k]) for k, r in enumerate(references)], axis=1)
    q = np.maximum(q, 0.01 / 10)
    q /= q.sum(axis=1, keepdims=True)
    labels = y[split.scored]
    np.testing.assert_allclose(row["ece"], top_label_ece(q, labels)[0], rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(row["brier"], sklearn_brier(labels, q), rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(row["nll"], -np.log(q[np.arange(len(labels)), labels]).mean(), rtol=1e-12)
    np.testing.assert_allclose(row["accuracy"], (q.argmax(axis=1) == labels).mean(), rtol=0, atol=1e-15)


def test_a_calibration_map_is_sklearns_isotonic_and_gated(tmp_path, digits):
    """Calibrated: `calibrate_predictions` on half of the held-out digits (method isotonic; the map is chosen on a
    part and then fitted on all of the file), applied by `apply_calibration` to the other half's probabilities,
    equals scikit-learn's isotonic maps fitted on the same rows, floored and renormalised. The calibrated half is
    then audited, and a gate between the two ECEs passes the better one and fails the other."""
    p_file, y = digits
    fit, test = train_test_split(np.arange(len(y)), test_size=0.5, random_state=1, stratify=y)
    np.savez(tmp_path / "fit.npz", probabilities=p_file[fit], labels=y[fit])
    written = macs_audit.calibrate_predictions(
        tmp_path / "fit.npz", out=tmp_path / "map", method="isotonic", force_calibration=True
    )
    assert written["method"] == "isotonic" and written["fit"]["n_fitted_on"] == len(fit)
    calibrated = macs_audit.apply_calibration(tmp_path / "map" / "calibration_map.json", p_file[test])
    p = softmax(np.log(np.maximum(p_file, FLOOR)))
    references = isotonic_references(p, y, fit)
    expected = np.stack([r.predict(p[test, k]) for k, r in enumerate(references)], axis=1)
    expected = np.maximum(expected, 0.01 / 10)
    np.testing.assert_allclose(calibrated, expected / expected.sum(axis=1, keepdims=True), rtol=0, atol=TOLERANCE)

    options = {"kind": "probabilities", "bootstrap": 0, "calibrators": "none"}
    before = macs_audit.audit_predictions(p_file[test], y[test], **options)
    after = macs_audit.audit_predictions(calibrated, y[test], **options)
    eces = [top_label_ece(p_file[test], y[test])[0], top_label_ece(calibrated, y[test])[0]]
    for report, ece in zip((before, after), eces, strict=True):
        np.testing.assert_allclose(report.clean.metrics["ece"], ece, rtol=0, atol=TOLERANCE)
    bar = {"max_ece": sum(eces) / 2}
    assert [macs_audit.gate(r, bar).passed for r in (before, after)] == [e <= bar["max_ece"] for e in eces]
    assert eces[0] != eces[1]


def test_the_gate_passes_and_fails_where_the_numbers_say(digits, digits_report):
    ece = top_label_ece(*digits)[0]
    above = macs_audit.gate(digits_report, {"max_ece": ece + 1e-6})
    below = macs_audit.gate(digits_report, {"max_ece": ece - 1e-6, "min_accuracy": 0.5})
    assert above.passed and not below.passed
    assert [check.name for check in below.failures] == ["max_ece"]
    np.testing.assert_allclose(below.failures[0].observed, ece, rtol=0, atol=TOLERANCE)


def test_digits_through_the_cli_equal_the_references(tmp_path, digits):
    """`macs-audit evaluate --predictions FILE -o report.json` of an .npz of probabilities, class names and labels."""
    p, y = digits
    names = np.array([f"digit {k}" for k in range(10)])
    np.savez(tmp_path / "digits.npz", probabilities=p, labels=y, class_names=names)
    out = tmp_path / "report.json"
    args = [
        "evaluate",
        "--predictions",
        tmp_path / "digits.npz",
        "-o",
        out,
        "--bootstrap",
        "0",
        "--calibrators",
        "none",
    ]
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exit_code == 0, result.output
    report = macs_audit.load_report(out)
    assert report.data.class_names == list(names) and report.data.n == len(y)
    ece, _ = top_label_ece(p, y)
    np.testing.assert_allclose(report.clean.metrics["ece"], ece, rtol=0, atol=TOLERANCE)
    np.testing.assert_allclose(report.clean.metrics["brier"], sklearn_brier(y, p), atol=TOLERANCE)
    assert_reliability_is_sklearns(report, p, y)
    assert macs_audit.gate(report, {"max_ece": ece + 1e-6}).passed
    assert not macs_audit.gate(report, {"max_ece": ece - 1e-6}).passed


def test_binary_single_column_reports_both_classes(cancer):
    p1, y = cancer
    report = macs_audit.audit_predictions(p1, y, kind="probabilities", bootstrap=0, calibrators="none")
    assert report.data.num_classes == 2 and report.data.class_names == ["0", "1"]
    p = both_classes(p1)
    ece, mce = top_label_ece(p, y)
    metrics = report.clean.metrics
    np.testing.assert_allclose(metrics["ece"], ece, rtol=0, atol=1e-12)
    np.testing.assert_allclose(metrics["mce"], mce, rtol=0, atol=1e-12)
    # Binary: macs-audit sums the squared error over both classes, 2 (p - y)^2 per sample, range [0, 2];
    # scikit-learn's binary Brier is (p - y)^2 of the positive class, [0, 1] (its scale_by_half="auto").
    np.testing.assert_allclose(metrics["brier"], 2 * brier_score_loss(y, p1), rtol=1e-12)
    assert_reliability_is_sklearns(report, p, y)
    gate = macs_audit.gate(report, {"max_ece": ece + 1e-6, "max_brier": metrics["brier"] - 1e-6})
    assert not gate.passed and [check.name for check in gate.failures] == ["max_brier"]


def test_binary_csv_through_the_cli(tmp_path, cancer):
    """The same predictions as a CSV with a `label` and a `prob_malignant` column, through `python -m macs_audit
    evaluate` as a whole process: both classes reported, named from the column, the numbers of the arrays."""
    p1, y = cancer
    path = tmp_path / "cancer.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["label", "prob_malignant"])
        writer.writerows([int(label), repr(float(p))] for label, p in zip(y, p1, strict=True))
    out = tmp_path / "report.json"
    args = ["evaluate", "--predictions", str(path), "-o", str(out), "--bootstrap", "0", "--calibrators", "none"]
    done = subprocess.run([sys.executable, "-m", "macs_audit", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    data = json.loads(Path(out).read_text())
    assert data["data"]["num_classes"] == 2 and data["data"]["class_names"] == ["not malignant", "malignant"]
    assert data["model"]["output"] == "probabilities of class 1 (one column; a binary classifier)"
    ece, _ = top_label_ece(both_classes(p1), y)
    np.testing.assert_allclose(data["clean"]["metrics"]["ece"], ece, rtol=0, atol=1e-12)
    np.testing.assert_allclose(data["clean"]["metrics"]["brier"], 2 * brier_score_loss(y, p1), rtol=1e-12)
    arrays = macs_audit.audit_predictions(p1, y, kind="probabilities", bootstrap=0, calibrators="none")
    # The CSV's text holds each float's repr, which reads back to the same float: the same audit to the last bit.
    for name in ("accuracy", "ece", "brier", "nll", "adaptive_ece", "smooth_ece"):
        assert data["clean"]["metrics"][name] == arrays.clean.metrics[name], name
    report = macs_audit.load_report(out)
    assert macs_audit.gate(report, {"max_ece": ece + 1e-6}).passed
    assert not macs_audit.gate(report, {"max_ece": ece - 1e-6}).passed
