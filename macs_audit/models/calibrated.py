"""Writing a model with a fitted post-hoc calibrator applied, so the calibrated model is an ordinary model file.

The calibrator is any fitted one of `macs_audit.calibrators` (the `Calibrator` protocol of
`calibration_map.py`); this layer reads its fields and never imports the calibrators. ONNX stays ONNX, the
map appended to the graph (`calibrated_onnx.py`); a torch model gets the map folded into its classifier or a
TorchScript wrapper around it (`calibrated_torch.py`). The method, its summary and the fit data go into the
model's metadata (ONNX `macs_audit.calibration`) or its sidecar (`calibration`).
"""

from __future__ import annotations

from pathlib import Path

from macs_audit.atomic import atomic_path
from macs_audit.errors import InputError
from macs_audit.models.calibrated_onnx import fold_calibrator_onnx
from macs_audit.models.calibrated_torch import (
    calibration_wrapper,
    fold_linear_torch,
    fold_temperature_torch,
    foldable,
    temperature_wrapper,
    wrapper_description,
)
from macs_audit.models.calibration_map import (
    Calibrator,
    calibration_record,
    check_method,
    fitted_temperature,
    linear_map,
)
from macs_audit.models.export import weights_path, write_sidecar, write_weights


def write_calibrated(
    model: Path, predictor, calibrator: Calibrator, out: Path, fit_data: dict | None = None, name: str | None = None
) -> Path:
    """The calibrated model file `name` (default: MODEL's stem) in OUT, in the input's format family (ONNX stays
    ONNX), with its sidecar.

    `calibrator` is any fitted calibrator; `fit_data` (a small JSON-ready dict: source, n, ...) goes into the
    metadata with the calibrator's summary. ONNX: `fold_calibrator_onnx`. torch: folded into the classifier
    where the map allows it (`foldable`), written as safetensors (or the pickled module it came as); else a
    TorchScript wrapper (`.pt`). The sidecar's `calibration.folded_into` says which."""
    check_method(calibrator)
    stem = name or model.stem
    if predictor.num_classes is not None and predictor.num_classes != calibrator.n_classes:
        raise InputError(
            f"the calibrator was fitted on {calibrator.n_classes} classes but {model} has {predictor.num_classes}"
        )
    # What the calibrated model declares: only values someone set (a default written would read as declared).
    meta = predictor.config.as_metadata(declared_only=True)
    example_shape = (4, len(predictor.config.mean), *predictor.config.input_size)
    calibration = calibration_record(calibrator, fit_data)
    calibration.update({"from": model.name, "from_sha256": predictor.info["sha256"]})
    if calibrator.method == "temperature":
        calibration["temperature"] = fitted_temperature(calibrator)  # the key readers of a temperature sidecar know
    probabilities = predictor.output.kind == "probabilities"
    if predictor.backend == "onnxruntime":
        path = out / f"{stem}.onnx"
        fold_calibrator_onnx(model, path, calibrator, meta, probabilities=probabilities, record=calibration)
        return path
    import torch

    from macs_audit.models.backend import library_warnings, one_line

    net = predictor.model.cpu().eval()
    fmt = predictor.info["format"]
    if fmt == "torchscript" and calibrator.method == "temperature" and not probabilities:
        path = out / f"{stem}.pt"  # no Python head to edit: script a wrapper that divides
        with atomic_path(path) as tmp, library_warnings(False):
            torch.jit.save(torch.jit.script(temperature_wrapper(net, fitted_temperature(calibrator))), str(tmp))
        calibration["folded_into"] = "TorchScript wrapper (logits / T)"
    elif fmt != "torchscript" and not probabilities and foldable(net, calibrator):
        example = torch.randn(*example_shape, generator=torch.Generator().manual_seed(0))
        if calibrator.method == "temperature":
            scaled, where = fold_temperature_torch(net, fitted_temperature(calibrator), example)
        else:
            scaled, where = fold_linear_torch(net, *linear_map(calibrator)[:2], example)
        calibration["folded_into"] = where
        path = weights_path(out, stem, fmt)  # safetensors, or the pickled module it came as
        write_weights(scaled, path, fmt)
    else:  # the map does not fold into a linear head: script the model and the map together
        path = out / f"{stem}.pt"
        with library_warnings(False):
            try:
                scripted = torch.jit.script(calibration_wrapper(net, calibrator, probabilities))
            except Exception as exc:  # TorchScript rejects many Python constructs, each with its own error
                raise InputError(
                    f"cannot script {model.name} with its {calibrator.method} calibration for TorchScript "
                    f"({one_line(exc, 160)}); export the model to ONNX and calibrate that instead"
                ) from None
            with atomic_path(path) as tmp:
                torch.jit.save(scripted, str(tmp))
        calibration["folded_into"] = wrapper_description(calibrator)
        if probabilities:
            meta["output"] = "logits"
    write_sidecar(path.with_suffix(".json"), {**meta, "calibration": calibration})
    return path
