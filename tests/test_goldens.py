"""Behaviour pinned by goldens (tests/goldens/make_goldens.py): the sample model's report on a small subset with
every section filled, and the full corruption grid of 1,000 images, compared within tolerances that cover
another CPU's float32 rounding (tests/goldens/tolerances.py; docs/development.md, "Portable tests").

`MACS_AUDIT_PERTURB_LOGITS=1e-6 pytest tests/test_goldens.py` computes the report from logits multiplied by
(1 + 1e-6 n), as a second machine would; `test_the_golden_holds_under_float32_logit_noise` does so always."""

import copy
import json

import numpy as np
import pytest
from goldens import make_goldens as goldens
from goldens.perturb import perturbed_logits, scale_from_env
from goldens.tolerances import compare_reports

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not goldens.SAMPLE_ONNX.exists(), reason="sample model not built")]


@pytest.fixture(scope="module")
def grid():
    return goldens.compute_grid()


@pytest.fixture(scope="module")
def golden_grid():
    return goldens.read_grid_hashes(), goldens.read_grid_reference()


@pytest.fixture(scope="module")
def report():
    scale = scale_from_env()
    with perturbed_logits(scale) as loaded:
        computed = goldens.compute_report()
    assert not scale or sum(p.calls for p in loaded) > 0, "MACS_AUDIT_PERTURB_LOGITS did not reach the model"
    return computed


@pytest.fixture(scope="module")
def golden_report():
    return goldens.stable_report(json.loads(goldens.REPORT_GOLDEN.read_text()))


def test_integer_exact_grid_arrays_match_their_hashes(grid, golden_grid):
    hashes, _ = grid
    assert set(golden_grid[0]) == set(goldens.INTEGER_EXACT)
    assert hashes == golden_grid[0]


def test_float_corruptions_within_one_grey_level(grid, golden_grid):
    assert goldens.compare_grid(*grid, *golden_grid) == []


def test_grid_comparison_fails_on_a_real_change(grid, golden_grid):
    hashes, reference = grid
    brighter = dict(reference)  # every value of one corruption one grey level up: within 1 level, on 100% of values
    brighter["fog@3/images"] = np.minimum(reference["fog@3/images"].astype(np.int64) + 1, 255).astype(np.uint8)
    assert any(p.startswith("fog@3/images") for p in goldens.compare_grid(hashes, brighter, *golden_grid))
    spread = dict(reference)  # a histogram whose values moved: 1% of one block one level darker
    histogram = reference["contrast@2/histogram"].copy()
    level = int(np.argmax(histogram[1:])) + 1
    moved = min(int(histogram[level]), int(0.01 * histogram.sum()))
    histogram[level] -= moved
    histogram[level - 1] += moved
    spread["contrast@2/histogram"] = histogram
    assert any(p.startswith("contrast@2/histogram") for p in goldens.compare_grid(hashes, spread, *golden_grid))
    changed = dict(hashes, **{"pixelate.npy": "0" * 64})
    assert goldens.compare_grid(changed, reference, *golden_grid) == ["pixelate.npy: sha256 differs"]


def test_sample_report_matches_the_golden(report, golden_report):
    assert compare_reports(report, golden_report) == []


def test_the_golden_holds_under_float32_logit_noise(golden_report):
    """Logits as another CPU computes them (1e-6 relative, tests/goldens/perturb.py): the golden still holds."""
    with perturbed_logits(1e-6, seed=7) as loaded:
        noisy = goldens.compute_report()
    assert len(loaded) == 1 and loaded[0].calls > 0  # the noise reached the model's every pass
    assert compare_reports(noisy, golden_report) == []


@pytest.mark.parametrize(
    "path",
    [
        ("clean", "metrics", "ece"),
        ("clean", "metrics", "adaptive_ece"),
        ("views", 0, "metrics", "ece"),  # a perturbation view
        ("views", 9, "metrics", "ece"),  # zoom_blur, whose images differ by a grey level across CPUs
        ("views", 17, "metrics", "smooth_ece"),
        ("temperature_scaling", "scaled", "ece"),
        ("corruption_summary", "mean_ece_19"),
        ("clean", "intervals", "ece", 1),
    ],
    ids=lambda p: "/".join(map(str, p)),
)
def test_an_ece_change_of_1e_3_fails(golden_report, path):
    """Each ECE's tolerance is under 1e-3 with a margin that covers the legitimate differences (test above):
    the golden with one ECE moved by 1e-3 fails on that field alone."""
    changed = copy.deepcopy(golden_report)
    node = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] += 1e-3
    problems = compare_reports(changed, golden_report)
    pointer = "".join(f"[{key}]" if isinstance(key, int) else f"/{key}" for key in path)
    assert len(problems) == 1 and problems[0].startswith(pointer + ":"), problems


def test_logits_off_by_1e_3_fail(golden_report):
    """A real regression at the logits (1e-3 relative, 1,000x float32 rounding; ECE moves by up to 5e-4) fails
    on the calibration errors, not only on the sensitive fields."""
    with perturbed_logits(1e-3, seed=7) as loaded:
        wrong = goldens.compute_report()
    assert loaded and loaded[0].calls > 0
    problems = compare_reports(wrong, golden_report)
    assert any(p.split(":")[0].endswith(("/ece", "/smooth_ece", "/debiased_l2_ece")) for p in problems), problems[:5]


def test_written_goldens_read_back(grid, report, tmp_path, monkeypatch):
    """make_goldens writes what the comparisons read: the same hashes, arrays and report, and a machine record."""
    for name in ("REPORT_GOLDEN", "GRID_HASHES", "GRID_REFERENCE", "MACHINE"):
        monkeypatch.setattr(goldens, name, tmp_path / getattr(goldens, name).name)
    goldens.write_grid(*grid)
    goldens.write_report(report)
    goldens.record_machine(goldens.GRID_HASHES.name)
    assert goldens.read_grid_hashes(goldens.GRID_HASHES) == grid[0]
    assert goldens.compare_grid(*grid, grid[0], goldens.read_grid_reference(goldens.GRID_REFERENCE)) == []
    assert compare_reports(report, goldens.stable_report(json.loads(goldens.REPORT_GOLDEN.read_text()))) == []
    assert set(json.loads(goldens.MACHINE.read_text())) == {goldens.GRID_HASHES.name}


def test_the_goldens_name_their_machines():
    records = json.loads(goldens.MACHINE.read_text())
    assert set(records) == {goldens.REPORT_GOLDEN.name, goldens.GRID_HASHES.name, goldens.GRID_REFERENCE.name}
    for name in (goldens.GRID_HASHES.name, goldens.GRID_REFERENCE.name):
        assert records[name]["cpu"]["model"] and "avx2" in records[name]["cpu"]["instruction_sets"]
        assert {"numpy", "torch", "pillow"} <= set(records[name]["versions"])
    here = goldens.machine()
    assert here["cpu"]["model"] and {"platform", "versions", "torch_cpu_capability"} <= set(here)
    strings = []

    def collect(value):
        if isinstance(value, dict | list):
            for item in value.values() if isinstance(value, dict) else value:
                collect(item)
        elif isinstance(value, str):
            strings.append(value)

    collect([here, records])
    assert not [s for s in strings if s.startswith(("/", "~")) or ":\\" in s or str(goldens.ROOT) in s]  # no paths
