"""Terminal format: the report's heading, its sections, the gate's table last; a comparison's rows.
(How the tables fit 80 and 120 columns: test_terminal_width.py.)"""

from __future__ import annotations

import copy

from report_cases import EVIL, failed_gate, full_report, regressed_comparison

from macs_audit.formats import terminal


def test_terminal_gate_and_full_render():
    report, gate_result = full_report(), failed_gate()
    text = terminal.to_text(terminal.renderable(report, gate_result), width=160)
    assert "gate FAILED: 2 of 4 checks failed" in text
    assert "min_accuracy" in text and "FAIL" in text and "PASS" in text
    assert text.startswith("Calibration audit: ") and "Clean calibration" in text
    assert text.index("Clean calibration") < text.index("Robustness") < text.index("gate FAILED")


def test_terminal_comparison_counts_its_worse_rows_and_no_gate_no_regression():
    comparison = regressed_comparison()
    text = terminal.to_text(terminal.comparison_table(comparison), width=160)
    assert f"{len(comparison.worse)} metrics worse beyond the noise (no gate ran)" in text
    assert "regressions" not in text.splitlines()[0] and EVIL in text  # shown as written, not as markup


def test_the_summary_comes_first_and_the_verdict_line_last():
    report = copy.deepcopy(full_report())  # ECE 3%: at the bar; noise+blur 20 points less accurate, ECE 13%
    report.clean.metrics["ece"] = 0.0412
    text = terminal.to_text(terminal.renderable(report), width=160)
    lines = text.rstrip("\n").splitlines()
    assert lines[1] == "Summary" and text.index("Summary") < text.index("Clean calibration")
    summary = text[: text.index("Clean calibration")]
    assert "  accuracy: 92.00% [91.50%, 92.50%] on 10,000 images" in summary
    assert "  ECE (15 bins): 4.12% [" in summary
    assert "worst case: " in summary and "robust accuracy (noise+blur): 72.00%" in summary
    assert "lowers ECE from 3.00% to 1.00% on 8,000 held-out images:" in summary
    assert "    macs-audit calibrate synthetic.onnx --data HELD_OUT.npz --out calibrated" in summary
    assert lines[-1].startswith("audit: ") and "ECE 4.12% > 3.00%" in lines[-1]
    assert "\x1b[" not in text  # a file or a log gets no colour


def test_with_a_gate_its_verdict_ends_the_output():
    report, gate_result = full_report(), failed_gate()
    text = terminal.to_text(terminal.renderable(report, gate_result), width=160).rstrip("\n")
    assert text.splitlines()[-1].startswith("gate FAILED: 2 of 4 checks failed")
    assert not any(line.startswith("audit: ") for line in text.splitlines())
    bare = terminal.to_text(terminal.renderable(report, verdict=False), width=160).rstrip("\n")
    assert not bare.splitlines()[-1].startswith(("audit: ", "gate "))  # evaluate --gate: the gate's line follows


def test_bad_values_are_red_on_a_console_with_colour_only():
    import io

    from rich.console import Console

    report = copy.deepcopy(full_report())  # the fixture is shared: changed on a copy
    report.clean.metrics["ece"] = 0.0412
    console = Console(file=io.StringIO(), force_terminal=True, color_system="truecolor", width=160)
    console.print(terminal.summary_block(report))
    coloured = console.file.getvalue()
    red = coloured[coloured.index("ECE (15 bins): ") :].split("\n", 1)[0]
    assert "\x1b[1;31m4.12%" in red  # bold red
    plain = Console(file=io.StringIO(), width=160)  # not a terminal: rich writes no escapes
    plain.print(terminal.summary_block(report))
    assert "\x1b[" not in plain.file.getvalue() and "ECE (15 bins): 4.12%" in plain.file.getvalue()
