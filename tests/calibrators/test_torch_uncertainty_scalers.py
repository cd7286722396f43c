"""Temperature, vector and matrix scaling against TorchUncertainty's scalers on the sample model's predictions.

TorchUncertainty (a test dependency) is loaded by file: its package __init__ imports Lightning, which its
scalers do not need; the two package modules they import from are stood in for while they load. Its
conventions, and so what is compared:
- TemperatureScaler fits 1/T by torch's LBFGS on the cross-entropy: the same optimum as ours.
- VectorScaler is per-class temperatures z / T_k without intercepts, a special case of our vector scaling
  (z * w + b, Guo et al.): fitted to convergence, ours reaches a fit NLL at least as low.
- MatrixScaler is W z + b without regularisation; ours adds ODIR (Kull et al.), so the unregularised fit
  reaches a fit NLL at least as low as ours, and both improve on the raw logits.
"""

import importlib.util
import sys
import types
from pathlib import Path

import numpy as np
import pytest

from macs_audit.calibrators.common import log_softmax, mean_nll
from macs_audit.calibrators.matrix import fit_matrix
from macs_audit.calibrators.temperature import fit_temperature
from macs_audit.calibrators.vector import fit_vector


@pytest.fixture(scope="module")
def scalers():
    spec = importlib.util.find_spec("torch_uncertainty")
    if spec is None or spec.origin is None:
        # A test dependency: missing, the references would silently not run, so the test fails instead.
        pytest.fail("torch-uncertainty is not installed: pip install -e '.[test]'")
    root = Path(spec.origin).parent / "post_processing"
    saved = {name: sys.modules.get(name) for name in _STAND_INS}
    try:
        package = types.ModuleType("torch_uncertainty")
        package.__path__ = [str(root.parent)]
        post_processing = types.ModuleType("torch_uncertainty.post_processing")
        post_processing.__path__ = [str(root)]
        sys.modules.update({"torch_uncertainty": package, "torch_uncertainty.post_processing": post_processing})
        post_processing.PostProcessing = _load(
            "torch_uncertainty.post_processing.abstract", root / "abstract.py"
        ).PostProcessing
        calibration = types.ModuleType("torch_uncertainty.post_processing.calibration")
        calibration.__path__ = [str(root / "calibration")]
        sys.modules["torch_uncertainty.post_processing.calibration"] = calibration
        return {
            name: getattr(
                _load(f"torch_uncertainty.post_processing.calibration.{module}", root / "calibration" / f"{module}.py"),
                name,
            )
            for module, name in (
                ("temperature_scaler", "TemperatureScaler"),
                ("vector_scaler", "VectorScaler"),
                ("matrix_scaler", "MatrixScaler"),
            )
        }
    finally:  # the stand-ins leave with the fixture; the loaded classes keep what they need
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


_STAND_INS = (
    "torch_uncertainty",
    "torch_uncertainty.post_processing",
    "torch_uncertainty.post_processing.abstract",
    "torch_uncertainty.post_processing.calibration",
    "torch_uncertainty.post_processing.calibration.scaler",
    "torch_uncertainty.post_processing.calibration.utils",
    "torch_uncertainty.post_processing.calibration.temperature_scaler",
    "torch_uncertainty.post_processing.calibration.vector_scaler",
    "torch_uncertainty.post_processing.calibration.matrix_scaler",
)


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def fitted_nll(scaler, logits: np.ndarray, labels: np.ndarray) -> float:
    """Fit a TorchUncertainty scaler on (logits, labels) and return its NLL there."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    z, y = torch.from_numpy(logits.astype(np.float32)), torch.from_numpy(labels)  # its parameters are float32
    scaler.fit(DataLoader(TensorDataset(z, y), batch_size=len(y)), progress=False)
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(scaler(z).double(), y))


def test_temperature_matches_torch_uncertainty(scalers, sample_split):
    import torch

    z, y = sample_split[0], sample_split[1]
    reference = scalers["TemperatureScaler"](model=None, max_iter=200)
    reference_nll = fitted_nll(reference, z, y)
    ours = fit_temperature(z, y)
    assert ours.temperature == pytest.approx(float(torch.as_tensor(reference.temperature[0]).detach()), rel=2e-3)
    assert mean_nll(ours.transform(z), y) <= reference_nll + 1e-6  # its fit runs in float32


def test_vector_scaling_with_intercepts_fits_at_least_as_well_as_per_class_temperatures(scalers, sample_split):
    z, y = sample_split[0], sample_split[1]
    reference_nll = fitted_nll(scalers["VectorScaler"](num_classes=10, model=None, max_iter=500), z, y)
    ours = mean_nll(fit_vector(z, y).transform(z), y)
    assert ours <= reference_nll + 1e-6
    assert reference_nll < mean_nll(log_softmax(z), y)  # both are real fits


def test_unregularised_matrix_scaling_fits_at_least_as_well_as_odir(scalers, sample_split):
    z, y = sample_split[0], sample_split[1]
    reference_nll = fitted_nll(scalers["MatrixScaler"](num_classes=10, model=None, max_iter=500), z, y)
    ours = mean_nll(fit_matrix(z, y).transform(z), y)
    assert reference_nll <= ours + 1e-6
    assert ours < mean_nll(log_softmax(z), y)
