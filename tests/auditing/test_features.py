"""The features half of the audit (auditing/features.py): the feature detectors' scores beside the logit scores,
the representation shift of every set and view, the fit data, --features auto / on / off, and the gate key."""

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images

from macs_audit.auditing import AuditInputs, AuditOptions, run_audit
from macs_audit.data.sources import array_source
from macs_audit.errors import InputError
from macs_audit.gating import parse_config, run_gate
from macs_audit.metrics import feature_ood, two_sample
from macs_audit.models.predictor import load_predictor

CLASSES = [str(i) for i in range(10)]
OPTIONS = AuditOptions(batch_size=64, bootstrap=40, calibration_split=0.5, features="on", perturbations=("blur",))


@pytest.fixture(scope="module")
def audited(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("features")
    predictor = load_predictor(linear_onnx(tmp / "m.onnx", seed=3))
    x, y = tiny_images(400, seed=1)
    unlabeled = np.zeros(80, dtype=np.int64)
    inputs = AuditInputs(
        ood_source=array_source("ood", "npz", (tiny_images(80, seed=5)[0] // 4), unlabeled, CLASSES),
        unlabeled_source=array_source("target", "npz", tiny_images(80, seed=6)[0] // 2, unlabeled, CLASSES),
    )
    return run_audit(predictor, array_source("tiny", "npz", x, y, CLASSES), OPTIONS, inputs)


def test_the_feature_scores_stand_beside_the_logit_scores(audited):
    ood = audited.report.ood
    assert set(ood.scores) == {
        "msp",
        "max_logit",
        "energy",
        "gen",
        "mahalanobis",
        "rmds",
        "knn",
        "vim",
        "react",
        "ash_s",
    }
    record = ood.features
    assert record.fit == "the calibration split's fit part of --data" and record.n_fit + record.n_in == 400
    assert record.dimension == audited.head.weight.shape[1] and record.notes
    for name in ("mahalanobis", "knn"):
        entry = ood.scores[name]
        lo, hi = entry["intervals"]["auroc"]
        assert 0 <= lo <= entry["auroc"] <= hi <= 1
    assert set(ood.histograms) == set(ood.scores)
    assert sum(ood.histograms["knn"]["out"]) == 80 and sum(ood.histograms["knn"]["in"]) == record.n_in


def test_the_scores_are_the_detectors_on_the_kept_features(audited):
    """The section's KNN AUROC is the detectors' own on the features the audit kept (fitted on the split's fit part)."""
    from macs_audit.auditing import calibration_split
    from macs_audit.metrics import ood as ood_metrics

    features, logits, labels = audited.features, audited.logits, audited.labels
    split = calibration_split(labels, OPTIONS.calibration_split, OPTIONS.seed)
    head = audited.head
    fitted = feature_ood.fit_detectors(
        features["clean"][split.fit], labels[split.fit], logits[split.fit], head.weight, head.bias, names=["knn"]
    )
    inside = fitted.scores(features["clean"][split.scored], logits[split.scored])["knn"]
    outside = fitted.scores(features["ood"], audited.target_logits["ood"])["knn"]
    expected = ood_metrics.detection_metrics(inside, outside)["auroc"]
    assert audited.report.ood.scores["knn"]["auroc"] == pytest.approx(expected, abs=1e-12)


def test_every_set_and_view_is_tested_against_the_clean_features(audited):
    section = audited.report.representation_shift
    assert [(t.name, t.kind) for t in section.tests] == [
        ("ood", "ood"),
        ("unlabeled", "unlabeled"),
        ("blur", "perturbation"),
    ]
    ood = next(t for t in section.tests if t.name == "ood")
    assert ood.mmd > 0.1 and ood.p_value < 0.05  # darkened noise against the images
    direct = two_sample.mmd_test(
        audited.features["ood"], audited.features["clean"], seed=0, permutations=200, max_samples=500
    )
    assert ood.mmd2 == pytest.approx(direct["mmd2"], abs=1e-12)
    assert section.largest.name == "unlabeled"  # the gate's: the data sets only
    gate = parse_config({"max_representation_mmd": 10.0}, "t")
    assert run_gate(audited.report, gate).passed
    assert section.largest.mmd > 0.05  # the darkened target images
    assert not run_gate(audited.report, parse_config({"max_representation_mmd": 0.01}, "t")).passed


def test_auto_reads_none_where_the_model_gives_none_and_on_refuses(tmp_path):
    import onnxruntime as ort

    from macs_audit.models.in_memory import predictor_of

    session = ort.InferenceSession(str(linear_onnx(tmp_path / "m.onnx")), providers=["CPUExecutionProvider"])
    x, y = tiny_images(60)
    source = array_source("tiny", "npz", x, y, CLASSES)
    options = AuditOptions(bootstrap=0, features="auto")
    flags = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25]}
    report = run_audit(predictor_of(session, flags), source, options).report
    assert report.conventions.at("features").startswith("not read: ") and report.representation_shift is None
    with pytest.raises(InputError):
        run_audit(predictor_of(session, flags), source, AuditOptions(bootstrap=0, features="on"))
    off = run_audit(load_predictor(linear_onnx(tmp_path / "n.onnx")), source, AuditOptions(bootstrap=0)).report
    assert off.representation_shift is None and off.conventions.at("features") is None  # the library default: off


def test_fit_data_of_other_classes_is_refused(tmp_path):
    x, y = tiny_images(60)
    source = array_source("tiny", "npz", x, y, CLASSES)
    other = array_source("fit", "npz", x, y % 5, CLASSES[:5])
    inputs = AuditInputs(ood_source=source, feature_fit_source=other)
    with pytest.raises(InputError, match="--feature-fit-data fit has the classes 0, 1, 2, 3, ... "):
        run_audit(
            load_predictor(linear_onnx(tmp_path / "m.onnx")), source, AuditOptions(bootstrap=0, features="on"), inputs
        )
