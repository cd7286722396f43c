"""References the metrics are tested against: torch-uncertainty's metric modules, loaded by file (the package's own
__init__ imports Lightning, which costs tens of seconds and is not what the tests compare against: the metric modules
need only torch and torchmetrics), ECE-sweep by its definition, and data whose calibration is known
(`sample_with_calibration`, `CASES`)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest


def torch_uncertainty_module(name: str):
    """torch_uncertainty/metrics/classification/<name>.py as a module; the test fails if the package is absent."""
    spec = importlib.util.find_spec("torch_uncertainty")
    if spec is None or spec.origin is None:
        # A test dependency: missing, the references would silently not run, so the test fails instead.
        pytest.fail("torch-uncertainty is not installed: pip install -e '.[test]'")
    path = Path(spec.origin).parent / "metrics" / "classification" / f"{name}.py"
    module_spec = importlib.util.spec_from_file_location(f"torch_uncertainty_{name}", path)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def sweep_by_brute_force(confidence, correct, weights):
    """The definition on the data set written out (sample i repeated weights[i] times): every bin count from 2
    up, np.array_split's bins, until the accuracies first fall; the L1 ECE at the last monotone count."""
    index = np.repeat(np.arange(len(confidence)), weights)
    f, y = confidence[index], correct[index].astype(float)
    order = np.lexsort((y, f))
    f, y = f[order], y[order]
    n = len(f)

    def starts(bins):  # np.array_split's bins: the first n % bins of them hold one sample more
        sizes = np.full(bins, n // bins)
        sizes[: n % bins] += 1
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes

    best = 1
    for bins in range(2, n + 1):
        first, sizes = starts(bins)
        accuracy = np.add.reduceat(y, first) / sizes
        if np.any(accuracy[1:] < accuracy[:-1]):
            break
        best = bins
    first, _ = starts(best)
    return np.abs(np.add.reduceat(y, first) - np.add.reduceat(f, first)).sum() / n, best


def sample_with_calibration(n, seed, miscalibration):
    """Confidences f ~ Beta(5, 1.5); correct ~ Bernoulli(g(f)), g = `miscalibration` (one of CASES): g = identity is
    perfectly calibrated."""
    rng = np.random.default_rng(seed)
    f = rng.beta(5, 1.5, size=n)
    return f, rng.random(n) < miscalibration(f)


CASES = {
    "calibrated": lambda f: f,
    "overconfident": lambda f: f**2,
    "wavy": lambda f: np.clip(f + 0.1 * np.sin(12 * f), 0, 1),
}
