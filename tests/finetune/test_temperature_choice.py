"""`finetune` folds a validation temperature only when it beats no temperature on a held-out part of that data
(calibrators.selection.choose_on_holdout, the rule `calibrate` follows): else T = 1, and the record says why."""

import numpy as np
import pytest
import torch
from conftest import fit_right_held_wrong, tiny_images

from macs_audit.calibrators.temperature import optimal_temperature
from macs_audit.data.sources import array_source
from macs_audit.finetune.run import validation_temperature
from macs_audit.models.export import write_sidecar
from macs_audit.models.predictor import load_torch_predictor
from macs_audit.pixels import to_unit_float

pytestmark = pytest.mark.usefixtures("one_torch_thread")
SIZE = 8


class ColourNet(torch.nn.Module):
    """Global average pooling and a linear layer: predictions that follow the images' mean colour."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 10)
        rng = np.random.default_rng(0)
        with torch.no_grad():
            self.fc.weight.copy_(torch.from_numpy(rng.normal(0, 3, (10, 3))))
            self.fc.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def predictor(tmp_path_factory):
    folder = tmp_path_factory.mktemp("start")
    torch.jit.save(torch.jit.script(ColourNet().eval()), str(folder / "start.pt"))
    sidecar = {"input_size": [SIZE, SIZE], "num_classes": 10, "mean": [0.5] * 3, "std": [0.25] * 3}
    write_sidecar(folder / "start.json", sidecar)
    return load_torch_predictor(folder / "start.pt", {}, "cpu", False)


def scores(predictor, x: np.ndarray) -> np.ndarray:
    """The predictor's logits of uint8 NHWC images, as the audit reads them (its preprocessing), float64."""
    return predictor.predict(to_unit_float(x)).astype(np.float64)


def test_a_temperature_that_does_not_beat_no_temperature_is_not_folded(predictor):
    """Validation data whose held-out part (the documented split: stratified_split(labels, 0.3, seed 0)) the
    model gets wrong and whose fitted part it gets right: T fitted on the right part sharpens the model, the
    held-out part punishes it, so the T to fold is 1 and `kept_uncalibrated` says why. With the model's own top
    classes as labels both parts reward the sharpening: the fitted T is folded."""
    x, _ = tiny_images(1000, seed=1, size=SIZE)
    predicted = scores(predictor, x).argmax(1)
    images, labels = fit_right_held_wrong(x, predicted, 8)  # 8 a class: round(2.4) = 2 held out, 6 fitted on
    assert len(np.unique(labels)) >= 2  # the colour net predicts several classes
    source = array_source("val", "npz", images, labels, [str(i) for i in range(10)])
    record = validation_temperature(predictor, source, 64, None, seed=0)
    assert record["temperature"] == 1.0 and record["kept_uncalibrated"]
    assert "scored no better held-out nll than the uncalibrated model" in record["kept_uncalibrated"]
    z = scores(predictor, images)
    assert record["fitted_temperature"] == pytest.approx(optimal_temperature(z, labels), rel=1e-6)
    assert record["nll_after"] == pytest.approx(record["nll_before"])  # T = 1: nothing changed
    # Labelled by the model's own top classes: T < 1 on the fitted part, better on the held-out part too.
    honest = array_source("val", "npz", x[:200], predicted[:200], [str(i) for i in range(10)])
    record = validation_temperature(predictor, honest, 64, None, seed=0)
    assert record["kept_uncalibrated"] is None and record["temperature"] == record["fitted_temperature"] < 1


def test_too_few_validation_images_to_check_a_temperature_on_fold_none(predictor):
    """One image a class leaves a class-stratified 30% empty: the fitted T cannot be checked, so T = 1."""
    x, y = tiny_images(10, seed=2, size=SIZE)
    record = validation_temperature(predictor, array_source("val", "npz", x, y, [str(i) for i in range(10)]), 64, None)
    assert record["temperature"] == 1.0 and record["fitted_temperature"] != 1.0
    assert record["kept_uncalibrated"] == "10 images are too few to hold out a part of them to check the temperature on"
