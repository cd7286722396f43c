"""models/features.py on torch models: the classifier's input recorded in the forward that gives the logits, for
every source (timm, torchvision, Hugging Face, OpenCLIP, the package's architectures), against each library's own
computation of it, and the bad inputs. Tiny models with random weights, built here; nothing is downloaded.

Tolerances: the features against the library's own forward on the same tensor, 1e-5 of their largest value (the
same float32 operations, in another order at most); W f + b against the logits, 1e-5 of the largest logit (the
check in the code allows 1e-3); the logits against predict(), bit for bit (the same forward)."""

import copy

import numpy as np
import pytest
import torch
from source_builders import (
    CLASSES,
    TINY_CLIP,
    exported_program,
    hf_folder,
    timm_folder,
    tiny_clip,
    torchvision_weights,
)

from macs_audit.errors import InputError, UsageError
from macs_audit.models.features import enable_features
from macs_audit.models.in_memory import predictor_of
from macs_audit.models.predictor import load_predictor
from macs_audit.models.preprocessing import resize_and_normalize

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def images(n: int, size: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random((n, 3, size, size), dtype=np.float32)


def model_input(predictor, x: np.ndarray) -> torch.Tensor:
    """The tensor the predictor's model sees for images `x`: its own resize and normalisation."""
    mean, std = predictor.normalisation()
    cfg = predictor.config
    return resize_and_normalize(torch.from_numpy(x), cfg.input_size, mean, std, cfg.interpolation)


def features_and_logits(predictor, x, layer=None):
    """(head, logits, features), the logits checked bit for bit against predict() and W f + b against them."""
    head = enable_features(predictor, layer)
    logits, features = predictor.predict_with_features(x)
    assert features.dtype == np.float32 and features.shape == (len(x), head.weight.shape[1])
    np.testing.assert_array_equal(logits, predictor.predict(x))
    scale = max(1.0, float(np.abs(logits).max()))
    np.testing.assert_allclose(head.logits(features), logits, rtol=0, atol=1e-5 * scale)
    return head, logits, features


def assert_features(features, expected):
    expected = expected.detach().float().numpy()
    assert np.abs(expected).max() > 1e-3  # features of a size that a wrong layer or scale would show in
    np.testing.assert_allclose(features, expected, rtol=0, atol=1e-5 * float(np.abs(expected).max()))


def with_batch_statistics(model):
    """`model` in eval mode, its batch norms' running statistics those of one random batch: a randomly initialised
    MobileNet's eval-mode activations otherwise shrink to 1e-10 by its last layer."""
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.momentum = None  # a cumulative average: after one batch, that batch's statistics
    with torch.no_grad():
        model.train()(torch.from_numpy(images(8, 32, seed=1)))
    return model.eval()


def weights_of(linear):
    return (
        linear.weight.detach().double().numpy(),
        None if linear.bias is None else linear.bias.detach().double().numpy(),
    )


@pytest.fixture(scope="module")
def timm_predictor(tmp_path_factory):
    folder = tmp_path_factory.mktemp("timm") / "model"
    timm_folder(folder)
    return load_predictor(folder, device="cpu")


def test_timm_features_are_forward_head_pre_logits(timm_predictor):
    x = images(3, 64)
    head, _, features = features_and_logits(timm_predictor, x)
    model = timm_predictor.model
    with torch.no_grad():
        expected = model.forward_head(model.forward_features(model_input(timm_predictor, x)), pre_logits=True)
    assert_features(features, expected)
    weight, bias = weights_of(model.get_classifier())
    np.testing.assert_array_equal(head.weight, weight)
    np.testing.assert_array_equal(head.bias, bias)
    assert head.layer == "fc" and "get_classifier()" in head.source


def test_a_timm_vision_transformer_in_memory():
    import timm

    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", num_classes=3, img_size=32, patch_size=8, depth=1)
    predictor = predictor_of(vit.eval(), {"input_size": (32, 32)}, device="cpu")
    x = images(2, 32)
    head, _, features = features_and_logits(predictor, x)
    with torch.no_grad():
        expected = vit.forward_head(vit.forward_features(model_input(predictor, x)), pre_logits=True)
    assert_features(features, expected)
    assert head.layer == "head"


@pytest.fixture(scope="module")
def torchvision_resnet(tmp_path_factory):
    path = tmp_path_factory.mktemp("torchvision") / "resnet18.pt"
    torchvision_weights(path)
    return load_predictor(path, {"arch": "torchvision:resnet18"}, device="cpu")


def without_classifier(model, name: str):
    """A copy of `model` with its module `name` replaced by Identity: its output is that module's input."""
    copied = copy.deepcopy(model)
    parent, _, child = name.rpartition(".")
    setattr(copied.get_submodule(parent), child, torch.nn.Identity())
    return copied.eval()


def test_torchvision_features_are_the_input_of_fc(torchvision_resnet):
    x = images(2, 64)
    head, _, features = features_and_logits(torchvision_resnet, x)
    model = torchvision_resnet.model
    with torch.no_grad():
        assert_features(features, without_classifier(model, "fc")(model_input(torchvision_resnet, x)))
    np.testing.assert_array_equal(head.weight, weights_of(model.fc)[0])
    assert head.layer == "fc" and head.source == "forward hook on the input of 'fc'"
    same = enable_features(torchvision_resnet, "fc")  # --feature-layer naming the module found: the same head
    np.testing.assert_array_equal(same.weight, head.weight)


@pytest.mark.parametrize(
    ("name", "layer", "kwargs"),
    [
        ("mobilenet_v3_small", "classifier.3", {}),
        ("vit", "heads.head", {"image_size": 32, "patch_size": 16, "num_layers": 1, "num_heads": 2}),
    ],
)
def test_torchvision_classifier_last_and_heads_head(name, layer, kwargs):
    import torchvision

    torch.manual_seed(0)
    if name == "vit":
        kwargs = {**kwargs, "hidden_dim": 16, "mlp_dim": 32}
        model = torchvision.models.vision_transformer.VisionTransformer(num_classes=len(CLASSES), **kwargs)
    else:
        model = with_batch_statistics(torchvision.models.get_model(name, weights=None, num_classes=len(CLASSES)))
    predictor = predictor_of(model.eval(), {"input_size": (32, 32), "mean": (0.5,) * 3, "std": (0.25,) * 3})
    x = images(2, 32)
    head, _, features = features_and_logits(predictor, x)
    with torch.no_grad():
        assert_features(features, without_classifier(model, layer)(model_input(predictor, x)))
    assert head.layer == layer


def test_hugging_face_features_are_the_pooled_output_its_classifier_reads(tmp_path):
    pytest.importorskip("transformers", reason="the hf extra (pip install -e '.[hf]')")
    model, _ = hf_folder(tmp_path / "hf", processor="vit")
    predictor = load_predictor(tmp_path / "hf", device="cpu")
    x = images(2, 224)
    head, _, features = features_and_logits(predictor, x)
    with torch.no_grad():
        pooled = model.resnet(model_input(predictor, x)).pooler_output  # what ResNetForImageClassification classifies
    assert_features(features, pooled.flatten(1))
    np.testing.assert_array_equal(head.weight, weights_of(model.classifier[-1])[0])
    assert head.layer == "inner.classifier.1"


def test_open_clip_features_are_the_normalised_image_embedding_and_the_weight_the_class_embeddings(tmp_path):
    pytest.importorskip("open_clip", reason="the clip extra (pip install -e '.[clip]')")
    import json

    weights, prompts = tmp_path / "clip.pt", tmp_path / "prompts.json"
    model, tokenizer = tiny_clip(weights, prompts)
    predictor = load_predictor(weights, {"arch": f"open_clip:{TINY_CLIP}"}, device="cpu", class_prompts=prompts)
    x = images(2, 64)
    head, _, features = features_and_logits(predictor, x)
    templates = json.loads(prompts.read_text())["templates"]
    normalize = torch.nn.functional.normalize
    with torch.no_grad():
        assert_features(features, normalize(model.encode_image(model_input(predictor, x)), dim=-1))
        rows = [normalize(model.encode_text(tokenizer([t.format(c) for t in templates])), dim=-1) for c in CLASSES]
        classes = torch.stack([normalize(r.mean(0), dim=0) for r in rows])
        expected = (model.logit_scale.exp() * classes).double().numpy()
    np.testing.assert_allclose(head.weight, expected, rtol=1e-5, atol=1e-6)
    assert head.bias is None and head.layer == "image_embedding"


def test_the_sample_architecture_scales_its_classifier(tmp_path):
    import timm

    from macs_audit.models import architectures  # noqa: F401  (registers macs_resnet9_c10)
    from macs_audit.models.export import save_safetensors

    torch.manual_seed(0)
    net = timm.create_model("macs_resnet9_c10").eval()
    save_safetensors(net, tmp_path / "net.safetensors")
    predictor = load_predictor(tmp_path / "net.safetensors", {"arch": "macs_resnet9_c10"}, device="cpu")
    x = images(3, 32)
    head, _, features = features_and_logits(predictor, x)
    with torch.no_grad():
        assert_features(features, predictor.model.features(model_input(predictor, x)))
    np.testing.assert_allclose(head.weight, weights_of(predictor.model.fc)[0] * 0.125, rtol=1e-7)
    assert head.layer == "fc" and "feature_head()" in head.source


def one_line_error(error_type, call, match):
    with pytest.raises(error_type, match=match) as caught:
        call()
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_torchscript_and_torch_export_programs_say_how_to_get_features(tmp_path):
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 32 * 32, 3)).eval()
    torch.jit.save(torch.jit.script(model), str(tmp_path / "scripted.pt"))
    scripted = load_predictor(tmp_path / "scripted.pt", device="cpu")
    message = one_line_error(InputError, lambda: enable_features(scripted), "is TorchScript")
    assert "macs-audit export" in message and "features" in message
    exported_program(tmp_path / "program.pt2")
    program = load_predictor(tmp_path / "program.pt2", device="cpu")
    message = one_line_error(InputError, lambda: enable_features(program), "torch.export program")
    assert "macs-audit export" in message


def test_bad_layers_and_missing_calls(torchvision_resnet):
    fresh = copy.copy(torchvision_resnet)
    fresh.features = None
    one_line_error(UsageError, lambda: fresh.predict_with_features(images(1, 64)), "enable_features")
    message = one_line_error(InputError, lambda: enable_features(torchvision_resnet, "nope"), "has no module")
    assert "fc" in message  # the Linear layers it has
    one_line_error(InputError, lambda: enable_features(torchvision_resnet, "layer4"), "is a Sequential, not a Linear")


def test_a_model_without_a_classifier_named_says_what_was_looked_for():
    import torchvision

    model = torchvision.models.get_model("squeezenet1_1", weights=None, num_classes=3).eval()  # a conv classifier
    predictor = predictor_of(model, {"input_size": (32, 32), "mean": (0.5,) * 3, "std": (0.25,) * 3})
    message = one_line_error(InputError, lambda: enable_features(predictor), "cannot find the final linear layer")
    assert "get_classifier()" in message and "fc, classifier" in message and "--feature-layer NAME" in message


def test_a_layer_whose_output_is_not_the_logits_is_refused_on_the_first_batch():
    class Doubled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(3, 3)

        def forward(self, x):
            return self.fc(x.mean(dim=(2, 3))) * 2  # not fc's own map

    predictor = predictor_of(Doubled().eval(), {"input_size": (8, 8), "mean": (0.5,) * 3, "std": (0.25,) * 3})
    enable_features(predictor)  # found by name; the map is checked on the first batch
    one_line_error(InputError, lambda: predictor.predict_with_features(images(2, 8)), "not a linear map of the input")


@pytest.mark.gpu
def test_features_of_a_model_on_cuda_come_back_as_numpy_on_the_cpu(timm_predictor):
    predictor = load_predictor(timm_predictor.info["path"], device="cuda")
    head = enable_features(predictor)
    logits, features = predictor.predict_with_features(images(4, 64))
    assert isinstance(features, np.ndarray) and features.dtype == np.float32
    np.testing.assert_array_equal(logits, predictor.predict(images(4, 64)))
    scale = max(1.0, float(np.abs(logits).max()))
    np.testing.assert_allclose(head.logits(features), logits, rtol=0, atol=1e-3 * scale)  # TF32 on the GPU
