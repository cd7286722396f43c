"""Progress where a CI log can read it: plain lines when stderr is not a terminal, the rich bar on one, and
nothing with --quiet. A fake clock drives the timing."""

import numpy as np
from conftest import linear_onnx, tiny_images
from typer.testing import CliRunner

from macs_audit.cli import app
from macs_audit.cli.progress import LINE_INTERVAL, MIN_RATE_SECONDS, Progress
from macs_audit.progress import Stage

runner = CliRunner()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def lines_progress(clock: Clock, **kwargs) -> tuple[Progress, list[str]]:
    lines: list[str] = []
    return Progress(clock=clock, terminal=False, write=lines.append, **kwargs), lines


def test_a_log_gets_a_line_per_stage_start_and_end_and_steady_status_lines():
    clock = Clock()
    progress, lines = lines_progress(clock)
    with progress:
        clock.now += 0.5
        progress("clean", 500, 15_000)  # the first batch: a start line, no rate yet
        assert lines == ["[0:00] clean: started, 15,000 images"]
        for done in range(1000, 15_001, 500):  # a batch every 0.5 s: 1,000 images/s
            clock.now += 0.5
            progress("clean", done, 15_000)
    status = [line for line in lines if "%" in line]
    # One status line per LINE_INTERVAL of work (10 s here), with percent, count, rate and ETA.
    assert status == ["[0:10] clean: 67% (10,000/15,000 images), 1,000 img/s, ETA 0:05"]
    assert lines[-1] == "[0:15] clean: done, 15,000 images in 15.0 s (1,000 img/s)"
    assert len(lines) == 3


def test_the_first_rate_waits_until_enough_time_has_passed():
    """The core reports a stage after its first batch: a rate from that instant would read millions of
    images per second. No rate (and no ETA) is shown until MIN_RATE_SECONDS have passed since."""
    clock = Clock()
    progress, lines = lines_progress(clock, interval=0.0)  # a status line on every call
    with progress:
        progress("fog s1", 500, 10_000)  # at the very instant the stage began
        clock.now += 1e-6
        progress("fog s1", 1000, 10_000)
        clock.now += MIN_RATE_SECONDS / 2
        progress("fog s1", 1500, 10_000)
        clock.now += MIN_RATE_SECONDS
        progress("fog s1", 2000, 10_000)
    assert len(lines) == 4 and not any("img/s" in line or "ETA" in line for line in lines[:3]), lines
    assert lines[-1].endswith("fog s1: 20% (2,000/10,000 images), 1,000 img/s, ETA 0:08")
    assert all(int(line.split(", ")[1].split()[0].replace(",", "")) < 10_000 for line in lines if "img/s" in line)


def test_a_stage_done_in_one_batch_gets_one_line_and_stages_may_repeat():
    clock = Clock()
    progress, lines = lines_progress(clock)
    with progress:
        clock.now += 2.0
        progress("snow s3", 200, 200)
        progress(Stage("epoch 1/2", unit="steps"), 1, 4, {"loss": 0.5, "lr": 0.1})
        clock.now += 3.0
        progress(Stage("epoch 1/2", unit="steps"), 4, 4, {"loss": 0.25, "lr": 0.05})
        for epoch in (1, 2):  # a stage reported again after it finished is a new stage each time
            progress(Stage("epoch 1/2 validation", unit=""), 0, 1, None)
            clock.now += 1.0
            progress(Stage("epoch 1/2 validation", unit=""), 1, 1, {"val_acc": 0.5 + epoch / 10})
    assert lines[0] == "[0:02] snow s3: done, 200 images in 2.0 s"
    assert lines[1] == "[0:02] epoch 1/2: started, 4 steps"
    assert lines[2] == "[0:05] epoch 1/2: done, 4 steps in 3.0 s (1.0 steps/s); loss 0.25 lr 0.05"
    assert lines[3:] == [
        "[0:05] epoch 1/2 validation: started",
        "[0:06] epoch 1/2 validation: done in 1.0 s; val_acc 0.6",
        "[0:06] epoch 1/2 validation: started",
        "[0:07] epoch 1/2 validation: done in 1.0 s; val_acc 0.7",
    ]


def test_only_stages_reported_since_the_last_line_get_status_lines():
    clock = Clock()
    progress, lines = lines_progress(clock)
    with progress:
        progress("corruption grid", 100, 1000)
        progress("stalled", 1, 10)
        clock.now += LINE_INTERVAL
        progress("corruption grid", 300, 1000)
        clock.now += LINE_INTERVAL
        progress("corruption grid", 500, 1000)
    status = [line for line in lines if "%" in line]
    assert [line.split("]")[1].split(":")[0] for line in status] == [" corruption grid", " stalled", " corruption grid"]


def test_quiet_prints_nothing_on_a_terminal_or_in_a_log():
    for terminal in (True, False):
        clock, lines = Clock(), []
        progress = Progress(False, clock=clock, terminal=terminal, write=lines.append)
        with progress:
            progress("clean", 10, 10)
        assert lines == [] and progress._bar is None


def test_a_terminal_gets_the_rich_bar_and_no_lines():
    clock, lines = Clock(), []
    progress = Progress(clock=clock, terminal=True, write=lines.append)
    progress._bar.disable = True  # drawn on a real terminal; here only its tasks are checked
    with progress:
        progress("clean", 500, 1000)
        task = progress._bar.tasks[0]
        assert task.completed == 500 and task.fields["rate"] == ""  # no rate at the first batch
        clock.now += 2.0
        progress("clean", 1000, 1000)
        assert task.fields["rate"] == "250 img/s"
    assert lines == []


def test_evaluate_writes_progress_lines_to_a_log_and_none_with_quiet(tmp_path):
    """CliRunner's stderr is not a terminal, like a CI log: the stages show as lines, in full."""
    model = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(40)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    args = ["evaluate", str(model), "--data", str(tmp_path / "d.npz"), "--bootstrap", "0"]
    args += ["--perturbations", "none", "--sensitivity-samples", "0", "--batch-size", "20"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "] clean: started, 40 images" in result.stderr
    assert "] clean: done, 40 images in " in result.stderr
    quiet = runner.invoke(app, [*args, "--quiet"])
    assert quiet.exit_code == 0 and "clean" not in quiet.stderr
    colour = runner.invoke(app, args, env={"FORCE_COLOR": "1"})  # colours asked for in CI: still a log
    assert colour.exit_code == 0 and "] clean: done, 40 images in " in colour.stderr


def test_stages_described_by_data_show_their_unit_and_time_from_their_own_start():
    """A stage reported at done 0 begins then: its time and rate are its own, not the previous stage's end."""

    clock = Clock()
    progress, lines = lines_progress(clock)
    intervals = Stage("clean: bootstrap intervals", "resamples")
    with progress:
        progress("clean", 1000, 1000)
        clock.now += 30.0  # work nobody reported
        progress(intervals, 0, 1000)
        clock.now += 4.0
        progress(intervals, 1000, 1000)
        progress(Stage("temperature scaling", ""), 0, 1)
        clock.now += 0.5
        progress(Stage("temperature scaling", ""), 1, 1)
    assert lines[1:] == [
        "[0:30] clean: bootstrap intervals: started, 1,000 resamples",
        "[0:34] clean: bootstrap intervals: done, 1,000 resamples in 4.0 s (250 resamples/s)",
        "[0:34] temperature scaling: started",
        "[0:34] temperature scaling: done in 0.5 s",
    ]


def test_each_post_inference_stage_has_its_own_lines_and_a_view_is_timed_alone(tmp_path, monkeypatch):
    """Every view's bootstrap (here made to take 150 s of a fake clock) is a stage with a start and an end
    line, as is every other piece of work after the passes; the views are timed without it."""
    import functools
    import re
    import time

    from macs_audit.cli import evaluate, progress
    from macs_audit.metrics import bootstrap

    offset = [0.0]

    def clock() -> float:
        return time.monotonic() + offset[0]

    real = bootstrap.paired_bootstrap  # what a view's intervals run on (auditing/inference.py)

    def slow_bootstrap(*args, **kwargs):
        offset[0] += 150.0
        return real(*args, **kwargs)

    monkeypatch.setattr(bootstrap, "paired_bootstrap", slow_bootstrap)
    monkeypatch.setattr(evaluate, "Progress", functools.partial(progress.Progress, clock=clock))
    model = linear_onnx(tmp_path / "m.onnx")
    x, y = tiny_images(40)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    args = ["evaluate", str(model), "--data", str(tmp_path / "d.npz"), "--bootstrap", "20", "--batch-size", "20"]
    args += ["--sensitivity-samples", "10", "--calibrators", "temperature"]
    args += ["--ood-data", str(tmp_path / "d.npz"), "--unlabeled", str(tmp_path / "d.npz")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    log = [line.split("] ", 1)[1] for line in result.stderr.splitlines() if line.startswith("[")]
    starts = [line.split(": started")[0] for line in log if ": started" in line]
    ends = {line.split(": done")[0]: line for line in log if ": done" in line}
    stages = {
        "clean",
        "clean: bootstrap intervals",
        "conformal sets",
        "noise+blur",
        "noise+blur: conformal sets",
        "noise+blur: bootstrap intervals",
        "sensitivity",
        "ood data",
        "OOD detection",
        "unlabeled data",
        "label-free estimates",
        "temperature scaling",
        "post-hoc calibrators",
        "slices",
        "report",
    }
    assert sorted(starts) == sorted(stages) and set(ends) == stages, log
    # The model's passes over the evaluation, OOD and unlabeled data first, then what their logits alone give.
    assert starts[:4] == ["clean", "ood data", "unlabeled data", "clean: bootstrap intervals"], starts
    assert starts[-1] == "report"

    def seconds(line: str) -> float:
        text = re.search(r" in ([0-9:.]+)( s)?", line)
        assert text is not None, line
        if text.group(2):
            return float(text.group(1))
        minutes, secs = text.group(1).split(":")
        return 60 * int(minutes) + int(secs)

    for view in ("clean", "noise+blur"):
        assert seconds(ends[f"{view}: bootstrap intervals"]) >= 150, ends
        assert seconds(ends[view]) < 60, ends  # the view's passes alone, not a bootstrap
    assert "20 resamples" in ends["clean: bootstrap intervals"]


def test_a_stage_with_nothing_counted_yet_reads_running_in_a_status_line():

    clock = Clock()
    progress, lines = lines_progress(clock)
    intervals = Stage("clean: bootstrap intervals", "resamples")
    with progress:
        progress(intervals, 0, 1000)
        clock.now += 4.0
        progress("noise+blur", 0, 10_000)
        clock.now += LINE_INTERVAL
        progress("noise+blur", 5000, 10_000)
    assert "[0:14] clean: bootstrap intervals: running for 14.0 s" in lines, lines
    assert "[0:14] noise+blur: 50% (5,000/10,000 images), 500 img/s, ETA 0:10" in lines, lines


def test_a_stage_first_seen_after_its_first_batch_is_stamped_from_its_start():
    """noise+blur: started at [0:14] ... done in 17.9 s, with the two lines 12 s apart: the start line now
    carries the stage's start (the previous event), so the stamps and the duration agree."""
    clock = Clock()
    progress, lines = lines_progress(clock)
    with progress:
        clock.now += 2.0
        progress("clean", 100, 100)  # ends at 0:02
        clock.now += 6.0  # the next stage's first batch runs, unreported
        progress("noise+blur", 50, 200)
        for done in (100, 150, 200):
            clock.now += 4.0
            progress("noise+blur", done, 200)
    (start,) = [line for line in lines if "noise+blur: started" in line]
    (end,) = [line for line in lines if "noise+blur: done" in line]
    assert start == "[0:02] noise+blur: started, 200 images"
    assert end.startswith("[0:20] noise+blur: done, 200 images in 18.0 s")
