"""plan.py: an audit's settings parsed and checked before anything loads, every file it reads listed, then loaded
and run."""

from pathlib import Path

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images

from macs_audit.errors import UsageError
from macs_audit.plan import load_audit, plan_audit, run_planned
from macs_audit.settings.resolve import resolve


def _resolved(**given):
    return resolve("evaluate", given)


@pytest.mark.parametrize(
    "given,message",
    [
        ({}, r"give MODEL \(or the model in the spec's evaluate table"),
        ({"model": Path("m.onnx"), "corrupted_data": Path("c")}, "--corrupted-data / --cifar-c needs --corruptions"),
        ({"model": Path("m.onnx"), "frost_textures": Path("f")}, "--frost-textures needs --corruptions"),
        ({"model": Path("m.onnx"), "reference": Path("m.onnx")}, "is MODEL itself"),
        ({"model": Path("m.onnx"), "reference_config": Path("r.json")}, "give --reference MODEL too"),
        ({"model": Path("m.onnx"), "severities": "0-9"}, "severities must lie in 1-5"),
        ({"model": Path("m.onnx"), "calibrators": "platt"}, "platt"),
    ],
)
def test_a_bad_setting_fails_before_anything_loads(given, message):
    with pytest.raises(UsageError, match=message):
        plan_audit(_resolved(**given))


def test_the_plan_lists_every_file_it_reads(tmp_path):
    model, data, ood = tmp_path / "m.onnx", tmp_path / "d.npz", tmp_path / "o.npz"
    baseline = tmp_path / "base.json"
    plan = plan_audit(_resolved(model=model, data=data, ood_data=ood, corruption_baseline=baseline))
    files = {str(path) for path in plan.files()}
    assert {str(model), str(data), str(ood), str(baseline)} <= files


def test_planned_loaded_and_run_with_the_settings_recorded(tmp_path):
    model = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(60)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    plan = plan_audit(
        _resolved(model=model, data=tmp_path / "d.npz", bootstrap=0, perturbations="none", sensitivity_samples=0)
    )
    loaded = load_audit(plan)
    assert len(loaded.source) == 60 and loaded.reference is None and loaded.inputs.ood_source is None
    report = run_planned(plan, loaded).report
    assert report.data.n == 60 and report.views == []
    assert report.settings.options["bootstrap"] == {"value": 0, "source": "flag"}
    assert report.settings.options["seed"] == {"value": 0, "source": "default"}
