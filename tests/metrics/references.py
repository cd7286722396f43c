"""torch-uncertainty's metric modules, loaded by file: the package's own __init__ imports Lightning, which costs
tens of seconds and is not what the tests compare against (the metric modules need only torch and torchmetrics)."""

import importlib.util
from pathlib import Path

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
