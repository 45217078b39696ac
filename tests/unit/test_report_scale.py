"""The step-time panel's scale (report.step_time_scale): a first step that waited seconds for the environment's first
batch must not squash a run's ~0.3 s steps to a flat line; the steps cut off are named on the panel."""

from __future__ import annotations

from hermes_stack.controller.report import build_figure, step_time_scale


def test_a_far_outlier_is_cut_off_at_one_and_a_half_times_the_95th_percentile_and_named():
    steps = list(range(1, 41))
    totals = [8.4] + [0.3] * 38 + [0.4]  # nearest-rank 95th percentile of 40: the 38th smallest, 0.3
    top, above = step_time_scale(steps, totals)
    assert top == 1.5 * 0.3
    assert above == [(1, 8.4)]


def test_no_cut_when_the_largest_step_is_within_three_times_the_95th_percentile_or_too_few_steps():
    assert step_time_scale(list(range(1, 21)), [0.85] + [0.3] * 19) == (None, [])  # under 3 x 0.3: kept
    assert step_time_scale(list(range(1, 10)), [9.0] + [0.3] * 8) == (None, [])  # under 10 steps: as drawn
    assert step_time_scale(list(range(1, 21)), [0.0] * 20) == (None, [])


def test_the_figure_uses_the_scale_and_says_which_steps_are_off_it():
    records = [{"step": 1, "wait_s": 8.0, "step_s": 0.3, "sync_s": 0.1}]
    records += [{"step": n, "wait_s": 0.02, "step_s": 0.25, "sync_s": 0.03} for n in range(2, 41)]
    figure = build_figure(records, [], "test")
    panel = next(ax for ax in figure.axes if ax.get_title() == "step time (s)")
    assert abs(panel.get_ylim()[1] - 1.5 * 0.30) < 1e-9
    assert [t.get_text() for t in panel.texts] == ["off the scale:\nstep 1: 8.4 s"]
    steady = build_figure(records[1:], [], "test")  # without the long first step: matplotlib's own scale
    panel = next(ax for ax in steady.axes if ax.get_title() == "step time (s)")
    assert len(panel.texts) == 0 and panel.get_ylim()[1] < 0.45


def test_the_off_scale_note_stays_clear_of_the_legend():
    """A review: with three steps named on one line, the note ran behind the legend on the page's third-wide panel."""
    records = [{"step": n, "wait_s": 30.0 + n, "step_s": 0.3, "sync_s": 0.1} for n in (1, 2, 3, 4)]
    records += [{"step": n, "wait_s": 0.02, "step_s": 0.25, "sync_s": 0.03} for n in range(5, 101)]
    figure = build_figure(records, [], "test")
    panel = next(ax for ax in figure.axes if ax.get_title() == "step time (s)")
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)  # as write_report saves it
    canvas.draw()
    renderer = canvas.get_renderer()
    (note,) = panel.texts
    assert note.get_text().endswith("step 3: 33.4 s\n…")
    legend = panel.get_legend().get_window_extent(renderer)
    box = note.get_window_extent(renderer)
    assert box.x1 <= panel.get_window_extent(renderer).x1 + 1  # inside the panel
    assert not box.overlaps(legend), (box, legend)
