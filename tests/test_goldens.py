"""Behaviour pinned by goldens (tests/goldens/make_goldens.py): the sample model's report on a
small subset with every section filled, and the bytes of the full corruption grid of 1,000 images."""

import json

import pytest
from goldens import make_goldens as goldens

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not goldens.SAMPLE_ONNX.exists(), reason="sample model not built")]


@pytest.fixture(scope="module")
def computed():
    return goldens.compute()


def test_corruption_grid_bytes_match_the_golden(computed):
    digest, _ = computed
    assert digest == (goldens.HERE / "grid_sha256.txt").read_text().strip()


def test_sample_report_matches_the_golden(computed):
    _, report = computed
    expected = json.loads((goldens.HERE / "sample_report.json").read_text())
    assert json.loads(json.dumps(report, sort_keys=True)) == expected
