"""The Hugging Face model card format (formats/model_card.py) and `macs-audit report --format model-card / --into`:
the metadata read back with huggingface_hub holds the report's own numbers; a merge keeps the rest of a card
(its text byte for byte, its other metadata as data, results of its own); bad cards are refused untouched."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from fixtures.saved_reports import run
from fixtures.synthetic_report import synthetic_report
from huggingface_hub import ModelCard
from huggingface_hub.repocard import REGEX_YAML_BLOCK

from macs_audit.errors import InputError, UsageError
from macs_audit.formats import model_card
from macs_audit.report import Report, load_report

START, END = model_card.START, model_card.END

# A card someone wrote: metadata of their own (a foreign model-index result among it), text before the section
# (an old one, to be replaced) and after it.
EXISTING = """---
license: apache-2.0
language:
- en
tags:
- vision
- resnet
datasets:
- uoft-cs/cifar10
widget:
  - src: https://example.com/cat.png
    example_title: "Cat: a *test*"
custom_key: {nested: [1, 2.5, "three"], flag: true}
model-index:
- name: their-model
  results:
  - task:
      type: image-classification
    dataset:
      name: CIFAR-10
      type: uoft-cs/cifar10
      split: test
    metrics:
    - type: accuracy
      value: 0.951
      name: their own accuracy
    source:
      name: their leaderboard
      url: https://example.com/leaderboard
---

# Their model

Trained by them;   spacing  kept,\ttabs too.

<!-- macs-audit:start -->
an old section
<!-- macs-audit:end -->

## Limitations

Text after the section, without a final newline."""


@pytest.fixture()
def saved(tmp_path, monkeypatch) -> tuple[Report, Path]:
    """Every section (all 19 corruptions) saved as JSON in `tmp_path`, the working directory; the Report read back."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()  # no spec above to find
    path = tmp_path / "report.json"
    path.write_text(synthetic_report(model_path="models/cifar_resnet.onnx").to_json())
    return Report.from_json(path.read_text()), path


def parts(text: str) -> tuple[dict, str]:
    """(the metadata as data, the text after the metadata block) of a card, read as the Hub reads it."""
    match = REGEX_YAML_BLOCK.search(text)
    assert match is not None
    return yaml.safe_load(match.group(2)), text[match.end() :]


def outside(body: str) -> tuple[str, str]:
    """The text before the section and after it."""
    return body[: body.index(START)], body[body.index(END) + len(END) :]


def test_the_card_metadata_reads_back_with_the_reports_own_values(saved):
    report, path = saved
    result = run("report", path, "--format", "model-card", "-o", "README.md")
    assert result.exit_code == 0, result.output
    card = ModelCard(Path("README.md").read_text())
    assert card.data.model_name == "cifar_resnet" and card.data.pipeline_tag == "image-classification"
    found = {r.metric_type: r for r in card.data.eval_results}
    clean, cf = report.clean, report.conformal
    assert cf is not None and report.robustness is not None and report.corruption_summary is not None
    expected = {
        **{name: clean.metrics[name] for name in ("accuracy", "ece", "nll", "brier")},
        "robust_accuracy": report.robustness.robust_accuracy,
        "corruption_accuracy": report.corruption_summary.mean_accuracy_15,
        "corruption_accuracy_19": report.corruption_summary.mean_accuracy_19,
        "conformal_coverage": cf.methods["lac"]["coverage"],
        "conformal_coverage_aps": cf.methods["aps"]["coverage"],
        "conformal_coverage_raps": cf.methods["raps"]["coverage"],
        "conformal_coverage_class_conditional": cf.methods["lac_class_conditional"]["coverage"],
    }
    assert {name: r.metric_value for name, r in found.items()} == expected  # the report's floats, exactly
    for r in found.values():
        assert (r.task_type, r.metric_args["tool"], r.dataset_type) == (
            "image-classification",
            "macs-audit",
            "synthetic",
        )
        assert (r.dataset_split, r.dataset_args["n"]) == (report.data.split, report.data.n)
    ece = found["ece"]
    assert ece.dataset_config == "clean" and ece.metric_config == "15 equal-width bins, L1"
    assert ece.metric_args["bins"] == 15 and ece.metric_args["ci_95"] == clean.intervals["ece"]
    assert found["robust_accuracy"].dataset_config == "noise+blur"
    assert found["corruption_accuracy"].metric_args["severities"] == [1, 2, 3, 4, 5]
    assert found["conformal_coverage"].metric_args["target_coverage"] == 0.9

    body = card.text
    assert body.startswith("\n# cifar\\_resnet\n\n" + START) and body.endswith(END + "\n")
    section = body[body.index(START) : body.index(END)]
    assert "| ECE (15 bins) | 3.00% | \\[2.50%, 3.50%\\] |" in section
    assert "ECE 3.00% before, 1.00% after" in section  # the temperature's
    reliability = section[section.index("| confidence |") :].split("\n\n")[0].splitlines()
    assert len(reliability) == 2 + 15


def test_only_the_metrics_the_report_has_are_stated():
    report = synthetic_report(robustness=False, corruptions=[])
    report.conformal = None
    text = model_card.render(report)
    assert {r.metric_type for r in ModelCard(text).data.eval_results} == {"accuracy", "ece", "nll", "brier"}


def test_into_replaces_only_its_section_and_results_and_twice_is_once(saved):
    report, path = saved
    card = Path("README.md")
    card.write_text(EXISTING)
    result = run("report", path, "--into", card)
    assert result.exit_code == 0, result.output
    once = card.read_bytes()
    assert run("report", path, "--into", card, "--format", "model-card").exit_code == 0
    assert card.read_bytes() == once  # idempotent

    old_data, old_body = parts(EXISTING)
    new_data, new_body = parts(once.decode())
    assert outside(new_body) == outside(old_body)  # byte for byte
    assert "an old section" not in new_body and "| ECE (15 bins) |" in new_body
    old_index, new_index = old_data.pop("model-index"), new_data.pop("model-index")
    assert new_data == old_data  # every other key, as data
    (entry,) = new_index
    assert entry["name"] == "their-model"  # the card's model name kept
    assert entry["results"][0] == old_index[0]["results"][0]  # their result kept as it was
    ours = [r for r in ModelCard(once.decode()).data.eval_results if (r.metric_args or {}).get("tool") == "macs-audit"]
    assert len(ours) == 11 and {r.metric_value for r in ours if r.metric_type == "accuracy"} == {0.92}


def test_into_a_card_without_a_section_or_metadata_appends_after_a_blank_line():
    report = synthetic_report(corruptions=[])
    merged = model_card.merge_into("# Title\n\nText.\n", report)
    data, body = parts(merged)
    assert body.startswith("# Title\n\nText.\n\n" + START) and body.endswith(END + "\n")
    assert list(data) == ["model-index"] and data["model-index"][0]["name"] == "synthetic"
    assert model_card.merge_into(merged, report) == merged
    crlf = model_card.merge_into("---\r\nlicense: mit\r\n---\r\nText.\r\n", report)
    assert "\n" not in crlf.replace("\r\n", "") and parts(crlf)[1].startswith("Text.\r\n\r\n" + START)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ("license: [mit\n", "is not valid YAML"),
        ("- a list\n- not a mapping\n", "is not a mapping"),
        ("model-index:\n- name: x\n", "is not a model card's"),
    ],
)
def test_a_card_whose_metadata_cannot_be_read_is_refused_and_left_as_it_was(saved, metadata, message):
    _, path = saved
    card = Path("README.md")
    card.write_bytes(f"---\n{metadata}---\n\n# Kept\n".encode())
    before = card.read_bytes()
    result = run("report", path, "--into", card)
    assert result.exit_code == 3 and message in result.stderr and "README.md" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and card.read_bytes() == before


def test_into_misuse_and_a_missing_card(saved):
    _, path = saved
    card = Path("README.md")
    card.write_text(EXISTING)
    result = run("report", path, "--into", card, "--format", "md")
    assert result.exit_code == 2 and "--format model-card" in result.stderr
    assert card.read_text() == EXISTING
    result = run("report", path, "--into", "missing.md")
    assert result.exit_code == 3 and "missing.md" in result.stderr and not Path("missing.md").exists()
    result = run("report", path, "--into", card, "-o", "other.md")  # -o: the merged card goes there
    assert result.exit_code == 0 and card.read_text() == EXISTING and START in Path("other.md").read_text()


def test_hostile_names_are_escaped_in_the_text_and_kept_one_line_in_the_metadata():
    report = synthetic_report(corruptions=[], model_path="models/<b>x|\x1b[31m_*.onnx")
    text = model_card.render(report)
    _, body = parts(text)
    assert "<b>" not in body and "\x1b" not in text and "\\|" in body
    assert ModelCard(text).data.model_name == "<b>x|\\x1b[31m_*"


def test_a_comparison_and_a_missing_huggingface_hub_are_usage_errors(monkeypatch):
    with pytest.raises(UsageError, match="one model"):
        model_card.render_comparison(None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)
    with pytest.raises(UsageError, match=r"pip install 'macs-audit\[hf\]'"):
        model_card.render(synthetic_report(corruptions=[]))


def test_a_clash_with_a_result_of_the_card_on_the_same_view_is_refused():
    clash = EXISTING.replace("      split: test\n", "      config: clean\n      split: test\n", 1)
    clash = clash.replace("type: uoft-cs/cifar10\n      config", "type: synthetic\n      config")
    report = synthetic_report(corruptions=[])
    report.data.split = "test"
    with pytest.raises(InputError, match="results of its own on synthetic"):
        model_card.merge_into(clash, report)


@pytest.mark.slow
def test_rendering_a_card_imports_no_torch(saved):
    _, path = saved
    code = (
        "import sys; from macs_audit.report import load_report; from macs_audit.formats import render; "
        f"render('model-card', load_report({str(path)!r})); "
        "print([m for m in ('torch', 'onnxruntime', 'timm') if m in sys.modules])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_the_documented_excerpt_is_the_sample_models_card():
    """docs/gate.md quotes the first lines of the sample model's card: each part it quotes is in the card."""
    root = Path(__file__).resolve().parents[2]
    docs = (root / "docs" / "gate.md").read_text()
    excerpt = docs[docs.index("### Hugging Face model card") :].split("```text\n")[1].split("```")[0]
    text = model_card.render(load_report(root / "sample_models" / "resnet9_c10_ce.audit.json"))
    for part in excerpt.split("...\n"):
        assert part in text
