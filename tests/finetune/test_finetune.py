"""The fine-tuning loop and `macs-audit finetune`: a 2-epoch CLI run, exact resume, NaN stop, clear refusals."""

import json

import numpy as np
import pytest
import timm
import torch
from conftest import tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.data.sources import array_source
from macs_audit.errors import InputError, UsageError
from macs_audit.finetune.loop import augment, finetune, load_checkpoint, load_train_data, lr_at, validate
from macs_audit.finetune.options import PRESETS, FinetuneOptions
from macs_audit.metrics.accumulators import calibration_metrics
from macs_audit.models import architectures  # noqa: F401
from macs_audit.models.export import save_safetensors, write_sidecar
from macs_audit.models.predictor import load_predictor

runner = CliRunner()
SIZE = 16  # 16x16 images keep the ResNet-9 cheap


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return timm.create_model("macs_resnet9_c10", num_classes=10)


def tiny_source(n=160, seed=0):
    x, y = tiny_images(n, seed=seed, size=SIZE)
    return array_source("tiny", "npz", x, y, [str(i) for i in range(10)])


def options(**kw):
    base = dict(epochs=2, batch_size=32, input_size=(SIZE, SIZE), lr=0.05, val_fraction=0.2, eval_batch_size=64)
    return FinetuneOptions(**{**base, **kw})


@pytest.fixture
def start_model(tmp_path):
    path = tmp_path / "start.safetensors"
    save_safetensors(tiny_model(), path)
    write_sidecar(tmp_path / "start.json", {"arch": "macs_resnet9_c10", "num_classes": 10, "input_size": [SIZE, SIZE]})
    for name, seed, n in (("train", 0, 200), ("test", 1, 100)):
        x, y = tiny_images(n, seed=seed, size=SIZE)
        np.savez(tmp_path / f"{name}.npz", x=x, y=y)
    return path


def test_finetune_cli_two_epochs(start_model, tmp_path):
    out = tmp_path / "out"
    result = runner.invoke(
        app,
        [
            "finetune",
            str(start_model),
            "--data",
            str(tmp_path / "train.npz"),
            "--eval-data",
            str(tmp_path / "test.npz"),
            "--out",
            str(out),
            "--epochs",
            "2",
            "--batch-size",
            "32",
            "--device",
            "cpu",
            "--bootstrap",
            "0",
            "--preset",
            "robust",
            "--lambda-c",
            "0.5",
            "--checkpoint-every",
            "3",
            "--precision",
            "fp32",
            "--quiet",
        ],
    )
    assert result.exit_code == 0, result.output
    for audit in ("audit_before.json", "audit_after.json"):  # --precision reaches both audits' reports
        assert json.loads((out / audit).read_text())["model"]["precision"] == "fp32"
    for name in (
        "model.safetensors",
        "model.onnx",
        "model.json",
        "finetune_config.json",
        "checkpoint.pt",
        "audit_before.json",
        "audit_after.json",
        "audit_comparison.md",
    ):
        assert (out / name).is_file(), name
    config = json.loads((out / "finetune_config.json").read_text())
    assert config["options"]["objective"] == "macs" and config["options"]["lambda_c"] == 0.5
    # The preset's other values apply; flags given explicitly (--lambda-c, --epochs) override the preset's.
    assert config["options"]["preset"] == "robust" and config["options"]["epochs"] == 2
    for key, value in PRESETS["robust"].items():
        if key not in ("lambda_c", "epochs"):
            assert config["options"][key] == (list(value) if isinstance(value, tuple) else value), key
    assert config["options"]["checkpoint_every"] == 3 and config["resumed_from_step"] is None
    assert len(config["history"]) == 2 and config["split"]["n_val"] == 20
    # The before/after is the compare command's table and Markdown, headed by what was done.
    assert "macs fine-tuning of start.safetensors" in result.output and "A = before, B = after" in result.output
    comparison = (out / "audit_comparison.md").read_text()
    assert comparison.startswith("# macs fine-tuning of start.safetensors: before / after on ")
    assert "**A** (before)" in comparison and "| clean |" in comparison
    # The ONNX export carries the preprocessing and gives the same logits as the weights.
    x = np.random.default_rng(0).random((3, 3, SIZE, SIZE), dtype=np.float32)
    onnx_pred = load_predictor(out / "model.onnx", device="cpu")
    torch_pred = load_predictor(out / "model.safetensors", device="cpu")
    import onnx

    meta = {p.key: json.loads(p.value) for p in onnx.load(str(out / "model.onnx")).metadata_props}
    assert meta["macs_audit.input_size"] == [SIZE, SIZE] and meta["macs_audit.arch"] == "macs_resnet9_c10"
    np.testing.assert_allclose(onnx_pred.predict(x), torch_pred.predict(x), rtol=1e-4, atol=1e-4)
    before = json.loads((out / "audit_before.json").read_text())
    assert before["data"]["n"] == 100
    # A second run into the same directory without --resume is refused.
    again = runner.invoke(
        app,
        [
            "finetune",
            str(start_model),
            "--data",
            str(tmp_path / "train.npz"),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--quiet",
        ],
    )
    assert again.exit_code == 2 and "--resume" in again.output


@pytest.mark.parametrize("objective", ["macs", "mixup"])
def test_resume_after_kill_is_bit_identical(tmp_path, objective):
    source = tiny_source()
    full = finetune(tiny_model(), source, options(objective=objective), checkpoint=tmp_path / "a.pt")

    class Killed(Exception):
        pass

    def kill_in_epoch_two(description, done, total, terms=None):
        if str(description).startswith("epoch 2") and done == 2:
            raise Killed  # a crash mid-epoch: the epoch-1 checkpoint is what survives

    with pytest.raises(Killed):
        finetune(
            tiny_model(), source, options(objective=objective), progress=kill_in_epoch_two, checkpoint=tmp_path / "b.pt"
        )
    assert load_checkpoint(tmp_path / "b.pt")["epoch"] == 1
    resumed = finetune(
        tiny_model(seed=1), source, options(objective=objective), checkpoint=tmp_path / "b.pt", resume=True
    )
    assert resumed.resumed_from_epoch == 1 and resumed.steps == full.steps
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("kill_epoch, kill_done, saved_step", [(1, 3, 2), (2, 4, 6)])
def test_step_checkpoints_resume_mid_epoch_bit_identically(tmp_path, kill_epoch, kill_done, saved_step):
    """--checkpoint-every 2 with 4 steps per epoch: killed in the first epoch (where epoch-end checkpoints
    leave nothing) or late in the second, the run resumes from the last step checkpoint inside the epoch
    and ends with the weights and history of a run never killed."""
    source = tiny_source()
    every = options(objective="macs", checkpoint_every=2)
    full = finetune(tiny_model(), source, options(objective="macs"), checkpoint=tmp_path / "a.pt")

    class Killed(Exception):
        pass

    def kill(description, done, total, terms=None):
        if str(description).startswith(f"epoch {kill_epoch}") and done == kill_done:
            raise Killed

    with pytest.raises(Killed):
        finetune(tiny_model(), source, every, progress=kill, checkpoint=tmp_path / "b.pt")
    state = load_checkpoint(tmp_path / "b.pt")
    assert state["step"] == saved_step and state["epoch"] == kill_epoch - 1 and state["position"] == saved_step % 4
    resumed = finetune(tiny_model(seed=1), source, every, checkpoint=tmp_path / "b.pt", resume=True)
    assert resumed.resumed_from_step == saved_step and resumed.steps == full.steps
    a, b = full.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    strip = [{k: v for k, v in entry.items() if k != "seconds"} for entry in full.history]
    assert [{k: v for k, v in entry.items() if k != "seconds"} for entry in resumed.history] == strip
    # The checkpoint left at the end is an epoch-end one: a second --resume has nothing left to do.
    assert load_checkpoint(tmp_path / "b.pt")["position"] == 0


def test_nan_message_names_the_step_checkpoint(tmp_path):
    model = tiny_model()

    def poison_at_step_three(description, done, total, terms=None):
        if str(description).startswith("epoch 1") and done == 3:
            with torch.no_grad():
                model.fc.weight.fill_(float("nan"))

    with pytest.raises(InputError, match=r"epoch 1\); the last good checkpoint .* \(step 2, inside epoch 1\) is kept"):
        finetune(
            model,
            tiny_source(),
            options(objective="ce", checkpoint_every=2),
            progress=poison_at_step_three,
            checkpoint=tmp_path / "n.pt",
        )


def test_resume_refuses_other_settings(tmp_path):
    source = tiny_source()
    finetune(tiny_model(), source, options(epochs=1), checkpoint=tmp_path / "c.pt")
    with pytest.raises(UsageError, match="lr"):
        finetune(tiny_model(), source, options(epochs=1, lr=0.1), checkpoint=tmp_path / "c.pt", resume=True)
    with pytest.raises(UsageError, match="no checkpoint"):
        finetune(tiny_model(), source, options(epochs=1), checkpoint=tmp_path / "none.pt", resume=True)


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path):
    model = tiny_model()

    def poison_after_epoch_one(description, done, total, terms=None):
        if str(description).endswith("validation") and terms:
            with torch.no_grad():
                model.fc.weight.fill_(float("nan"))

    with pytest.raises(InputError, match="loss became nan.*epoch 2.*kept"):
        finetune(
            model, tiny_source(), options(objective="ce"), progress=poison_after_epoch_one, checkpoint=tmp_path / "d.pt"
        )
    state = load_checkpoint(tmp_path / "d.pt")
    assert state["epoch"] == 1 and all(
        torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point()
    )


def test_validation_reads_the_model_as_the_audit_does():
    """validate scores the held-out split through the audit's loop, in batches of eval_batch_size, with the
    model in eval mode and without gradients: the metrics of the model's own logits on those images (its
    preprocessing done by hand here), and the model is left in the mode it was in."""
    source, opts = tiny_source(), options(eval_batch_size=7)  # batches that do not divide the split
    data = load_train_data(source, opts)
    model = tiny_model().train()
    got = validate(model, data, opts)
    assert model.training
    x = torch.from_numpy(data.val.images(np.arange(len(data.val)))).permute(0, 3, 1, 2).float() / 255
    mean, std = torch.tensor(opts.mean).view(1, 3, 1, 1), torch.tensor(opts.std).view(1, 3, 1, 1)
    with torch.no_grad():
        logits = model.eval()((x - mean) / std).numpy()
    want = calibration_metrics(logits, data.val.labels, 10)
    assert len(data.val) % 7 and set(got) == {"accuracy", "ece", "nll", "brier", "mean_margin"}
    for key, value in got.items():
        assert value == pytest.approx(want[key], rel=1e-5, abs=1e-6), key


def test_schedule_and_augmentation():
    assert lr_at(0, 100, 10, 1.0) == pytest.approx(0.1)
    assert lr_at(9, 100, 10, 1.0) == pytest.approx(1.0)
    assert lr_at(10, 100, 10, 1.0) == pytest.approx(1.0)
    assert lr_at(100, 100, 10, 1.0) == pytest.approx(0.0, abs=1e-12)
    x = torch.rand(6, 3, 8, 8)
    out = augment(x, torch.Generator().manual_seed(0), pad=0)  # no room to crop: identity or flip
    assert all(torch.equal(o, i) or torch.equal(o, i.flip(2)) for o, i in zip(out, x, strict=True))
    shifted = augment(x, torch.Generator().manual_seed(1))
    assert shifted.shape == x.shape and torch.equal(shifted, augment(x, torch.Generator().manual_seed(1)))


@pytest.mark.parametrize(
    "stop_grad, ce_on_perturbed", [("clean", False), ("pert", False), ("none", False), ("clean", True), ("pert", True)]
)
def test_training_step_gradient_is_the_macs_loss_gradient(stop_grad, ce_on_perturbed):
    """The step splits the backward pass to save memory; the gradient must be that of the one loss."""
    from macs_audit.finetune import losses
    from macs_audit.finetune.loop import Preprocess, training_step
    from macs_audit.views import perturbations

    opts = options(objective="macs", stop_grad=stop_grad, lambda_m=0.5, lambda_c=2.0, ce_on_perturbed=ce_on_perturbed)
    x = torch.rand(8, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    y = torch.arange(8) % 10
    prep = Preprocess(opts, torch.device("cpu"))
    grads = []
    for split in (True, False):
        model = tiny_model()
        view_gen = torch.Generator().manual_seed(3)
        if split:
            loss, _ = training_step(model, x, y, opts, prep, torch.Generator(), view_gen)
        else:
            pert = perturbations.training_view(x, view_gen, opts.blur_range, opts.noise_range)
            clean_logits, pert_logits = model(prep(x)), model(prep(pert))
            loss = losses.macs_loss(clean_logits, pert_logits, y, opts).total
            loss.backward()
        grads.append((loss.item(), [p.grad.clone() for p in model.parameters()]))
    assert grads[0][0] == pytest.approx(grads[1][0], rel=1e-6)
    for a, b in zip(grads[0][1], grads[1][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("stop_grad", ["clean", "pert", "none"])
def test_bn_stats_clean_keeps_the_running_statistics_of_clean_images(stop_grad):
    """With bn_stats "clean", the perturbed pass normalises by its own batch statistics (the same loss
    and gradient as "both") but leaves batch norm's running statistics as the clean pass set them."""
    from macs_audit.finetune.loop import Preprocess, training_step

    x = torch.rand(8, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    y = torch.arange(8) % 10
    results = {}
    for bn_stats in ("clean", "both"):
        opts = options(objective="macs", stop_grad=stop_grad, bn_stats=bn_stats)
        model = tiny_model()
        loss, _ = training_step(
            model,
            x,
            y,
            opts,
            Preprocess(opts, torch.device("cpu")),
            torch.Generator(),
            torch.Generator().manual_seed(3),
        )
        results[bn_stats] = (loss.item(), [p.grad.clone() for p in model.parameters()], model.state_dict())
    clean_only = tiny_model().train()
    clean_only(Preprocess(options(), torch.device("cpu"))(x))
    expected = clean_only.state_dict()
    stats = [k for k in expected if "running_" in k or "num_batches" in k]
    assert stats
    for key in stats:
        torch.testing.assert_close(results["clean"][2][key], expected[key], rtol=0, atol=0)
    assert any(not torch.equal(results["both"][2][k], expected[k]) for k in stats if "running_mean" in k)
    assert results["clean"][0] == pytest.approx(results["both"][0], rel=1e-6)
    for a, b in zip(results["clean"][1], results["both"][1], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_the_defaults_are_the_calibrated_preset():
    from macs_audit.settings.resolve import resolve

    defaults = FinetuneOptions()
    assert defaults.preset == "calibrated"
    assert {k: getattr(defaults, k) for k in PRESETS["calibrated"]} == PRESETS["calibrated"]
    robust = resolve("finetune", {"preset": "robust", "lambda_c": 1.0, "data": "d", "out": "o", "model": "m"})
    assert robust["preset"] == "robust" and robust["lambda_c"] == defaults.lambda_c
    assert all(robust[k] == v for k, v in PRESETS["robust"].items() if k != "lambda_c")
    with pytest.raises(UsageError, match="unknown preset 'fast' for finetune; presets: calibrated, robust"):
        resolve("finetune", {"preset": "fast"})


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "fast"], "unknown preset 'fast' for finetune"),
        (["--objective", "ce", "--preset", "robust"], "does not apply to --objective ce"),
    ],
)
def test_preset_errors_are_one_line_usage_errors(start_model, tmp_path, args, message):
    out = tmp_path / "out"
    result = runner.invoke(
        app, ["finetune", str(start_model), "--data", str(tmp_path / "train.npz"), "--out", str(out), *args]
    )
    assert result.exit_code == 2 and message in result.output and len(result.output.strip().splitlines()) == 1
    assert not out.exists()


def test_bn_stats_is_checked():
    with pytest.raises(UsageError, match="--bn-stats"):
        options(bn_stats="perturbed").validate()


def test_finetune_ends_calibrated_and_shows_the_temperature_only_fix(start_model, tmp_path):
    """By default the written model (safetensors and ONNX) is the fine-tuned model with the temperature fitted
    on the validation split folded in: its logits are those of the same run with --no-temperature divided by
    T, and evaluate reads back the NLL of those logits at T. The start model with temperature scaling only
    is written and audited beside it, and the before/after table shows the fixes side by side."""
    from macs_audit.calibrators.temperature import optimal_temperature, temperature_nll
    from macs_audit.pixels import to_unit_float

    def run(out, *extra):
        args = ["finetune", str(start_model), "--data", str(tmp_path / "train.npz"), "--out", str(out)]
        args += ["--eval-data", str(tmp_path / "test.npz"), "--epochs", "1", "--batch-size", "32", "--lr", "0.01"]
        args += ["--device", "cpu", "--bootstrap", "0", "--sensitivity-samples", "0", "--quiet", *extra]
        result = runner.invoke(app, args)
        assert result.exit_code == 0, result.output
        return result

    shown = run(tmp_path / "scaled")
    run(tmp_path / "raw", "--no-temperature")
    raw, scaled = tmp_path / "raw", tmp_path / "scaled"
    sidecar = json.loads((scaled / "model.json").read_text())
    t = sidecar["calibration"]["temperature"]
    assert sidecar["finetune"]["temperature"] == t and sidecar["calibration"]["n"] == 20
    assert json.loads((scaled / "finetune_config.json").read_text())["temperature"]["temperature"] == t
    assert json.loads((raw / "model.json").read_text())["finetune"]["temperature"] is None
    assert "calibration" not in json.loads((raw / "model.json").read_text())
    assert abs(np.log(t)) > 0.05  # a temperature that changes the logits, so the checks below can fail

    # T is the fit on the unscaled model's logits of the validation split the run held out.
    train = np.load(tmp_path / "train.npz")
    val = FinetuneOptions().split(train["y"])[0]
    unscaled = load_predictor(raw / "model.safetensors", device="cpu")
    assert t == pytest.approx(optimal_temperature(unscaled.predict(to_unit_float(train["x"][val])), train["y"][val]))
    # The written models give the unscaled logits / T; the audit of them reads back the NLL at T.
    test = np.load(tmp_path / "test.npz")
    x = to_unit_float(test["x"])
    z = unscaled.predict(x)
    for path in (scaled / "model.safetensors", scaled / "model.onnx"):
        np.testing.assert_allclose(load_predictor(path, device="cpu").predict(x), z / t, rtol=1e-4, atol=1e-5)
    after = json.loads((scaled / "audit_after.json").read_text())["clean"]["metrics"]
    assert after["nll"] == pytest.approx(temperature_nll(z, test["y"], t), rel=1e-5)
    np.testing.assert_allclose(load_predictor(raw / "model.onnx", device="cpu").predict(x), z, rtol=1e-4, atol=1e-5)

    # The temperature-only fix: the start model with its own validation temperature, audited like the others.
    start = load_predictor(start_model, device="cpu")
    t0 = optimal_temperature(start.predict(to_unit_float(train["x"][val])), train["y"][val])
    baseline = json.loads((scaled / "model_temperature_only.json").read_text())["calibration"]
    assert baseline["temperature"] == pytest.approx(t0)
    only = load_predictor(scaled / "model_temperature_only.safetensors", device="cpu")
    np.testing.assert_allclose(only.predict(x), start.predict(x) / t0, rtol=1e-4, atol=1e-5)
    only_onnx = load_predictor(scaled / "model_temperature_only.onnx", device="cpu")  # exported beside it
    np.testing.assert_allclose(only_onnx.predict(x), start.predict(x) / t0, rtol=1e-4, atol=1e-5)
    only_report = json.loads((scaled / "audit_temperature_only.json").read_text())
    assert only_report["clean"]["metrics"]["nll"] == pytest.approx(
        temperature_nll(start.predict(x), test["y"], t0), rel=1e-5
    )
    comparison = (scaled / "audit_comparison.md").read_text()
    header = f"| metric | start model | temperature scaling only, T = {t0:.3f} | macs fine-tuning + T = {t:.3f} |"
    assert "## Which fix" in comparison and header in comparison
    nll = (after["nll"], only_report["clean"]["metrics"]["nll"])
    assert "| clean NLL (nats) | " in comparison and f"| {nll[1]:.4f} | {nll[0]:.4f} |" in comparison
    assert "Which fix" in shown.output and "temperature scaling" in shown.output
    assert "| macs fine-tuning, no T |" in (raw / "audit_comparison.md").read_text()


@pytest.mark.parametrize("fmt", ["safetensors", "torchscript"])
def test_with_temperature_divides_the_logits_and_leaves_the_model_alone(fmt):
    from macs_audit.finetune.run import with_temperature

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten())
    net.append(torch.nn.Linear(4, 10))
    model = torch.jit.script(net) if fmt == "torchscript" else net
    meta = {"mean": [0.5] * 3, "input_size": [SIZE, SIZE]}
    x = torch.rand(3, 3, SIZE, SIZE)
    with torch.no_grad():
        before = model(x)
        scaled, where = with_temperature(model, 2.5, fmt, meta)
        torch.testing.assert_close(scaled(x), before / 2.5, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(model(x), before)  # the caller's model is not scaled
    assert ("wrapper" in where) == (fmt == "torchscript")


def test_reduced_precision_is_refused_on_a_cpu_before_training(start_model, tmp_path):
    """--precision bf16 / fp16 is CUDA autocast: on a CPU the run stops before it trains or writes anything, and
    the before/after audits load their models at the precision asked (before_after.audit_model)."""
    from macs_audit.auditing import AuditOptions
    from macs_audit.before_after import BeforeAfter, ModelLoading, audit_model

    out = tmp_path / "out"
    args = ["finetune", str(start_model), "--data", str(tmp_path / "train.npz"), "--out", str(out)]
    for precision in ("bf16", "fp16"):
        result = runner.invoke(app, [*args, "--device", "cpu", "--precision", precision, "--quiet"])
        assert result.exit_code == 2, result.output
        assert f"--precision {precision} runs torch models under CUDA autocast" in result.output
        assert not out.exists()
    result = runner.invoke(app, [*args, "--device", "cpu", "--precision", "fp64", "--quiet"])
    assert result.exit_code == 2 and "--precision must be one of fp32, bf16, fp16" in result.output
    source = tiny_source(40)
    cpu = ModelLoading("cpu")
    with pytest.raises(UsageError, match="--precision fp16 runs torch models under CUDA autocast"):
        audit_model(start_model, {}, "after", BeforeAfter(source, {}, AuditOptions(precision="fp16"), cpu))
    report = audit_model(start_model, {}, "after", BeforeAfter(source, {}, AuditOptions(bootstrap=0), cpu))
    assert report.model.precision == "fp32"
