"""torchrun-sharded evaluate (gloo, 2 CPU processes) equals single-process evaluate, with the OOD and unlabeled
passes (their logits gathered in data-set order like the views')."""

import numpy as np
import pytest
from conftest import linear_onnx, tiny_images
from torchrun import evaluate_alone_and_sharded

ARGS = [
    "--batch-size",
    "16",
    "--perturbations",
    "all",
    "--corruptions",
    "gaussian_noise,zoom_blur",
    "--severities",
    "1,4",
    "--sensitivity-samples",
    "20",
    "--bootstrap",
    "100",
    "--quiet",
]


# The ranks compute every sample's logits, probabilities and per-sample terms exactly as one process does (the same
# batches through the same kernels); only the float64 accumulators' sums are added in another order (per rank, then
# all-reduced). Two orders of a sum of N terms differ by at most (N - 1) u sum|t_i| (u = 2^-53), so a mean of N
# terms by at most N u max|t|; a few operations downstream of the sums (a division, |.|, sqrt, a bootstrap's
# weighted sum) add a few u each. Bound: 8 N u max(1, |value|), N = 137 (100 images plus the 37 OOD/unlabeled
# ones): 1.2e-13 relative. MEASURED: 5.6e-16 relative at most (the bound is the worst case, the error ~sqrt(N) u).
SUMMED = 100 + 37
FLOAT_TOLERANCE = 8 * SUMMED * 2.0**-53


def compare(a, b, path=""):
    """Every count identical, every float within FLOAT_TOLERANCE x max(1, |value|); returns the paths that differ."""
    diffs = []
    if isinstance(a, dict):
        for key in a:
            diffs += compare(a[key], b[key], f"{path}/{key}")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            diffs += compare(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and isinstance(b, float):
        if abs(a - b) > FLOAT_TOLERANCE * max(1.0, abs(b)):
            diffs.append(path)
    elif a != b:
        diffs.append(path)
    return diffs


def test_the_tolerance_allows_summation_order_and_nothing_more():
    """A sum in another order (measured on this report's sizes) passes; a change in the 12th digit of a value
    of 8 (a logit norm) fails, as does any count."""
    terms = np.random.default_rng(0).uniform(0, 20, SUMMED)
    forward, pairwise = float(sum(terms.tolist())), float(np.sum(terms[::-1]))
    assert compare({"x": forward / SUMMED}, {"x": pairwise / SUMMED}) == []
    # one ulp of a value near 1e4 (a Lipschitz estimate's scale) is 1.8e-12: a fixed 1e-12 would fail it
    assert compare({"x": 1e4}, {"x": float(np.nextafter(1e4, 2e4))}) == []
    assert compare({"x": 8.0 + 1e-11}, {"x": 8.0}) == ["/x"]
    assert compare({"n": 100}, {"n": 101}) == ["/n"]


@pytest.mark.slow
def test_sharded_evaluate_equals_single_process(tmp_path):
    model = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(100, seed=4)  # 7 batches of 16: ranks get 4 and 3 batches, the last one short
    np.savez(tmp_path / "d.npz", x=x, y=y)
    np.savez(tmp_path / "ood.npz", x=tiny_images(37, seed=5)[0][:, ::-1])  # labels not needed: x only
    trust = ["--ood-data", str(tmp_path / "ood.npz"), "--unlabeled", str(tmp_path / "ood.npz")]
    a, b = evaluate_alone_and_sharded([str(model), "--data", str(tmp_path / "d.npz"), *ARGS, *trust], tmp_path)
    assert b["runtime"]["world_size"] == 2
    diffs = compare(a, b)
    assert set(diffs) == {"/runtime/world_size", "/created"} - ({"/created"} if a["created"] == b["created"] else set())
    assert {v["kind"] for v in b["views"]} == {"perturbation", "corruption"}
    assert b["ood"]["n_out"] == b["unlabeled"]["n"] == 37 and b["conformal"]["corruption_mean"] is not None
