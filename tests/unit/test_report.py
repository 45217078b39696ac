"""The run report (hermes_stack/controller/report.py) of a real run: the real trainer process (TorchEngine on the embedded tiny
model, real atroposlib run-api) trains 5 steps, is SIGKILLed after step 3 and resumes from its step-2 checkpoint, so
metrics.jsonl holds real KL, entropy, clip fraction, step times, checkpoints, a restart and a held-out evaluation.
The PNG is opened and checked panel by panel; the HTML must be one self-contained file."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_trainer_kill_resume import Run

from hermes_stack.controller.report import NO_DATA, PANEL_TITLES, marks, summary, write_report
from hermes_stack.controller.status import parse_events, parse_metrics

pytestmark = pytest.mark.slow
C0 = np.array([0x1F, 0x77, 0xB4]) / 255  # matplotlib's first line colour (tab:blue)
RED = np.array([0xD6, 0x27, 0x28]) / 255  # tab:red: the restart mark


def _real_run_metrics(api, inference, tmp_path) -> str:
    run = Run(tmp_path, api, inference, num_steps=5, interval=2)
    run.start()
    run.feed_steps(3)
    run.wait_for(lambda: run.last_step() == 3, "step 3")
    run.kill()  # the last checkpoint is step 2: the restarted trainer logs step 3 again
    run.start()
    run.feed_steps(3)
    assert run.finish() == 0, run.log_text()
    return (run.data / "metrics.jsonl").read_text()


def _near(pixels: np.ndarray, colour: np.ndarray, tol: float = 0.12) -> int:
    return int((np.abs(pixels[..., :3] - colour).max(axis=-1) < tol).sum())


def assert_every_panel_drawn(png: Path, figure, restart: bool, expect_data: set[str]) -> None:
    """The PNG is not blank, has the six panels (the figure's axes titles), and each panel in `expect_data` has
    data drawn inside its own region of the image (its first line colour), plus the restart mark when `restart`."""
    from matplotlib.image import imread

    image = imread(png)  # height x width x RGBA, floats in [0, 1]
    height, width = image.shape[:2]
    assert (width, height) == (1200, 750)
    assert image[..., :3].std() > 0.05, "the PNG is blank"
    assert tuple(ax.get_title() for ax in figure.axes) == PANEL_TITLES
    renderer = figure.canvas.get_renderer()
    for ax in figure.axes:
        if ax.get_title() not in expect_data:
            continue
        assert not any(t.get_text() == NO_DATA for t in ax.texts), f"{ax.get_title()}: no data plotted"
        box = ax.get_window_extent(renderer)  # pixels, origin bottom left
        x0, x1 = int(box.x0) + 2, int(box.x1) - 2
        y0, y1 = height - int(box.y1) + 2, height - int(box.y0) - 2
        panel = image[y0:y1, x0:x1]
        assert _near(panel, C0) > 20, f"{ax.get_title()}: no data drawn in its region"
        if restart:
            assert _near(panel, RED) > 20, f"{ax.get_title()}: the restart is not marked"


def test_report_of_a_real_run_shows_every_panel_with_its_marks(api, inference, tmp_path):
    text = _real_run_metrics(api, inference, tmp_path)
    records, events = parse_metrics(text), parse_events(text)
    assert [r["step"] for r in records] == [1, 2, 3, 3, 4, 5]
    m = marks(records, events)
    assert m.restarts == [3] and m.checkpoints == [2, 4, 5]

    (tmp_path / "real-run-metrics.jsonl").write_text(text)
    report = write_report(records, events, tmp_path / "report", "grpo test run")
    figures = summary(records, events)
    assert figures["last_step"] == 5 and figures["restarts"] == 1 and figures["last_checkpoint"] == "step-5"
    assert figures["heldout_accuracy"] is not None and figures["heldout_accuracy_step"] == 5

    assert_every_panel_drawn(report.png, report.figure, restart=True, expect_data=set(PANEL_TITLES))

    page = report.html.read_text()
    assert re.search(r'src="data:image/png;base64,[A-Za-z0-9+/=]{1000,}"', page)
    assert "http://" not in page and "https://" not in page and "<script" not in page  # nothing fetched
    assert "Trainer restarts at steps: 3" in page


def test_report_command_writes_the_two_files_and_says_where(tmp_path):
    metrics = tmp_path / "metrics.jsonl"
    lines = ['{"step": 1, "time": 10, "reward_mean": 0.1, "kl": 0.0, "checkpoint": null}',
             '{"event": "environment_departed", "message": "environment 0 departed", "time": 11}',
             '{"step": 2, "time": 12, "reward_mean": 0.3, "kl": 0.01, "checkpoint": "step-2", "eval_accuracy": 0.25}',
             '{"step": 3, "time"']  # a torn last line, as after a crash
    metrics.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "hermes_stack", "report", "--algo", "grpo", "--metrics",
                           str(metrics), "--out", str(out)], check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert str(out / "report.png") in done.stdout and str(out / "report.html") in done.stdout
    assert "report of 2 steps (last step 2)" in done.stdout
    assert "step 1: environment 0 departed" in (out / "report.html").read_text()
    missing = subprocess.run([sys.executable, "-m", "hermes_stack", "report", "--metrics", str(tmp_path / "nope")],
                             check=False, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert missing.returncode == 2 and "--metrics" in missing.stderr and len(missing.stderr.splitlines()) == 1


def test_report_counts_steps_not_the_records_a_restart_wrote_again(tmp_path):
    """A trainer that restarts from its step-2 checkpoint at step 3 records step 3 again: "report of 4 steps (last
    step 3)" counted records (a lifecycle sweep read 257 steps for a run at step 248)."""
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(f'{{"step": {n}, "time": {10 + i}, "reward_mean": 0.1}}\n'
                               for i, n in enumerate([1, 2, 3, 3])))
    done = subprocess.run([sys.executable, "-m", "hermes_stack", "report", "--algo", "grpo", "--metrics",
                           str(metrics), "--out", str(tmp_path / "out")], check=False, capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "report of 3 steps (last step 3), 1 redone after a restart:" in done.stdout


def test_the_newest_checkpoint_counts_a_stops_save_after_the_last_interval():
    """rl_get_results said last_checkpoint null beside rl_check_status's step-16: a stop saved step-16 after the
    last interval's (none yet), recorded only as the trainer's `saved` event."""
    from hermes_stack.controller.report import newest_checkpoint

    records = [{"step": s, "reward_mean": 0.1} for s in range(1, 17)]
    saved = {"event": "saved", "message": "step 16 saved on stop as step-16", "checkpoint": "step-16", "at_step": 16}
    assert summary(records, [saved])["last_checkpoint"] == "step-16"
    assert summary(records, [])["last_checkpoint"] is None
    resumed = records + [{"step": 20, "checkpoint": "step-20"}]  # an interval's save after the resume is newer
    assert newest_checkpoint(resumed, [saved]) == "step-20"
