"""export --precision's core (deployment.py) on the sample CIFAR-10 model with the real converters: FP16 and INT8
builds audited against the float model on a 500-image subset of the built-in test set; the parity section's
agreement, flips and paired intervals against a direct numpy computation from both models' own predictions;
and a deliberately broken candidate (logits scaled by 3, two classes swapped) failing the parity gate."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from fixtures.broken_models import scaled_logits, swapped_classes

from macs_audit.auditing import AuditOptions, run_audit
from macs_audit.data.loading import DataSpec, load_data
from macs_audit.deployment import BuildSpec, Calibration, ParityAudit, build_precision
from macs_audit.gating.checks import run_gate
from macs_audit.gating.config import parse_config
from macs_audit.metrics import parity
from macs_audit.models.predictor import load_predictor
from macs_audit.pixels import to_unit_float

SAMPLE = Path(__file__).resolve().parents[1] / "sample_models" / "resnet9_c10_ce.onnx"
AUDIT = DataSpec(None, limit=500, seed=0)
OPTIONS = AuditOptions(bootstrap=200, sensitivity_samples=0, calibrators=())
GATE = {"parity": {"min_agreement": 0.98, "max_ece_increase": 0.01, "max_nll_increase": 0.02}}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    folder = tmp_path_factory.mktemp("builds")
    reference = folder / "float.onnx"
    reference.write_bytes(SAMPLE.read_bytes())
    (folder / "float.json").write_bytes(SAMPLE.with_suffix(".json").read_bytes())
    calibration = Calibration(DataSpec(None, limit=2000, seed=1), images=128, seed=1)
    return {
        "fp16": build_precision(reference, BuildSpec("fp16"), audit=ParityAudit(AUDIT, OPTIONS)),
        "int8": build_precision(reference, BuildSpec("int8", calibration), audit=ParityAudit(AUDIT, OPTIONS)),
    }


def predictions(path, source):
    model = load_predictor(path)
    images = to_unit_float(source.images(np.arange(len(source))))  # the views' one rounding rule
    return model.predict(images)  # one batch of 500, as the audit's batches of 500 run them


@pytest.mark.parametrize("precision", ["fp16", "int8"])
def test_the_parity_audit_matches_numpy_on_both_models_predictions(builds, precision):
    built = builds[precision]
    assert built.path.name == f"float.{precision}.onnx" and built.report.model.num_classes == 10
    assert built.calibration_images == (128 if precision == "int8" else None)
    source, _ = load_data(AUDIT, (32, 32))
    reference, candidate = predictions(built.reference, source), predictions(built.path, source)
    labels = source.labels
    clean = built.report.parity.view("clean")
    agree = reference.argmax(1) == candidate.argmax(1)
    assert clean.agreement == pytest.approx(agree.mean()) and clean.agreement >= 0.95
    assert clean.correct_to_wrong == np.sum((reference.argmax(1) == labels) & ~(candidate.argmax(1) == labels))
    # The paired intervals: the same resamples of the 500 images for both models, those of the candidate's own
    # intervals of the clean view (drawn from the audit's seed).
    n, resamples = len(labels), OPTIONS.bootstrap
    draws = np.random.default_rng(OPTIONS.seed).integers(0, n, size=(resamples, n))

    def nll(logits):
        z = logits.astype(np.float64) - logits.max(1, keepdims=True)
        return np.log(np.exp(z).sum(1)) - z[np.arange(n), labels]

    per_sample = {
        "accuracy": (candidate.argmax(1) == labels).astype(float) - (reference.argmax(1) == labels),
        "nll": nll(candidate) - nll(reference),
    }
    for name, column in per_sample.items():
        entry = clean.metrics[name]
        assert entry["difference"] == pytest.approx(column.mean(), abs=1e-9)
        expected = np.quantile(column[draws].mean(axis=1), [0.025, 0.975])
        assert entry["interval"] == pytest.approx(list(expected), abs=1e-9), name
    agree_ci = np.quantile(agree[draws].mean(axis=1), [0.025, 0.975])
    assert clean.agreement_interval == pytest.approx(list(agree_ci))
    summary = parity.agreement_summary(parity.agreement(reference, candidate, labels))
    assert clean.max_abs_logit_difference == pytest.approx(summary["max_abs_logit_difference"], rel=1e-5)
    assert run_gate(built.report, parse_config(GATE)).passed


def test_broken_candidates_fail_the_parity_gate(builds, tmp_path):
    reference = builds["fp16"].reference
    source, _ = load_data(AUDIT, (32, 32))
    float_model = load_predictor(reference)
    failures = {}
    for name, path in {
        "scaled": scaled_logits(reference, tmp_path / "scaled.onnx"),
        "swapped": swapped_classes(reference, tmp_path / "swapped.onnx", 10, 3, 5),
    }.items():
        candidate = load_predictor(path, {"num_classes": 10, "input_size": (32, 32)})
        report = run_audit(
            candidate, source, AuditOptions(bootstrap=0, sensitivity_samples=0, calibrators=()), reference=float_model
        ).report
        failures[name] = {c.name for c in run_gate(report, parse_config(GATE)).failures}
    assert failures["scaled"] == {"parity.clean.max_ece_increase", "parity.clean.max_nll_increase"}
    assert "parity.clean.min_agreement" in failures["swapped"]


def test_a_build_reads_image_folders_with_the_models_whole_pipeline(tmp_path):
    """The INT8 calibration images and the parity audit of a build read an image folder as `evaluate` does: the
    model's crop_pct, interpolation and crop_offset (its sidecar's here), not its size and crop alone."""
    from conftest import linear_onnx
    from fixtures.shift_trees import image_tree

    from macs_audit.models.export import write_sidecar

    folder = image_tree(tmp_path / "photos", [f"c{i}" for i in range(10)], per_class=2)
    reference = linear_onnx(tmp_path / "m.onnx")
    write_sidecar(
        reference.with_suffix(".json"), {"crop_pct": 0.875, "interpolation": "bicubic", "crop_offset": "floor"}
    )
    data = DataSpec(folder)
    options = AuditOptions(bootstrap=0, sensitivity_samples=0, calibrators=(), calibration_split=0)
    spec = BuildSpec("int8", Calibration(data, images=10, seed=0))
    built = build_precision(reference, spec, audit=ParityAudit(data, options))
    pipeline = built.report.data.pipeline  # the build's metadata carries the sidecar's values on
    assert "(bicubic from metadata)" in pipeline and "offset floored" in pipeline, pipeline


def test_an_int8_build_is_for_the_gpu_where_it_is_audited_on_one_and_for_x86_cpus_otherwise(tmp_path):
    """An INT8 build's target: the one named, else the GPU's for a GPU provider, else x86-64 CPUs' (the build runs on
    the CPU: without audit data the candidate is not loaded); a target for another precision is refused."""
    from conftest import linear_onnx, tiny_images

    from macs_audit.deployment import check_build
    from macs_audit.errors import UsageError
    from macs_audit.models.precision import INT8_TARGET_KEY

    reference = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(40)
    np.savez(tmp_path / "calibration.npz", x=x, y=y)
    calibration = Calibration(DataSpec(tmp_path / "calibration.npz"), images=20)
    built = {}
    for name, provider, target in (("cpu", None, None), ("cuda", "cuda", None), ("named", "tensorrt", "arm")):
        out = tmp_path / f"{name}.onnx"
        built[name] = build_precision(reference, BuildSpec("int8", calibration, target, provider), out)
        metadata = {p.key: p.value for p in onnx.load(str(out)).metadata_props}
        assert metadata[INT8_TARGET_KEY] == built[name].int8_target
    assert [built[name].int8_target for name in ("cpu", "cuda", "named")] == ["x86", "gpu", "arm"]
    assert check_build("fp16", None) == "fp16"
    for precision in ("fp16", "fp32"):
        with pytest.raises(UsageError, match=f"--int8-target is for --precision int8, not {precision}"):
            check_build(precision, None, "x86")
