"""A run's report: one PNG (matplotlib) and one small self-contained HTML page, from its metrics.jsonl records.

Panels, against the training step: reward mean, held-out accuracy, KL, entropy, clip fraction and the step-time
breakdown (waiting for a batch, the optimisation step, the weight sync). Marked on every panel: checkpoints (dotted
grey), trainer restarts (red: a step that does not follow the one before, i.e. a resume), and the trainer's events
(orange: an environment departed, Atropos restarted), placed at the last step logged before them.

Pure except `write_report`, which writes the two files. matplotlib is used through its object API (Figure + the Agg
canvas): no pyplot, no global backend state, no display needed.
"""

from __future__ import annotations

import base64
import html
import itertools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hermes_stack.controller.status import checkpoint_entries, newest_checkpoint

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# (panel title, [(metrics.jsonl key, legend label)], stacked)
PANELS: tuple[tuple[str, tuple[tuple[str, str], ...], bool], ...] = (
    ("reward mean", (("reward_mean", "reward mean"),), False),
    ("held-out accuracy", (("eval_accuracy", "held-out accuracy"),), False),
    ("KL", (("kl", "KL"),), False),
    ("entropy", (("entropy", "entropy"),), False),
    ("clip fraction", (("clip_fraction", "clip fraction"),), False),
    ("step time (s)", (("wait_s", "wait for batch"), ("step_s", "optimisation step"), ("sync_s", "weight sync")), True),
)
PANEL_TITLES = tuple(title for title, _, _ in PANELS)
NO_DATA = "no data in metrics.jsonl"


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    """(steps, values) of one metric, only where it is a finite number."""
    steps, values = [], []
    for r in records:
        v = _finite(r.get(key))
        if v is not None:
            steps.append(int(r["step"]))
            values.append(v)
    return steps, values


@dataclass(frozen=True)
class Marks:
    checkpoints: list[int] = field(default_factory=list)
    restarts: list[int] = field(default_factory=list)  # the step the trainer resumed with
    events: list[tuple[int, str]] = field(default_factory=list)  # (step, message)


def marks(records: list[dict], events: list[dict]) -> Marks:
    """Where checkpoints, restarts and events fall on the step axis (pure)."""
    checkpoints = sorted({step for _, step, _ in checkpoint_entries(records, events)})
    restarts = [int(b["step"]) for a, b in itertools.pairwise(records) if int(b["step"]) <= int(a["step"])]
    placed = []
    for e in events:
        when = _finite(e.get("time"))
        before = [int(r["step"]) for r in records if when is not None and (_finite(r.get("time")) or 0) <= when]
        step = before[-1] if before else (int(records[0]["step"]) if records else 0)
        placed.append((step, str(e.get("message") or e.get("event") or "event")))
    return Marks(checkpoints, restarts, placed)


def summary(records: list[dict], events: list[dict] = ()) -> dict[str, Any]:
    """The figures an agent or a person asks first: last step, last reward mean, held-out accuracy (first, last,
    best), last checkpoint, restarts and events."""
    m = marks(records, list(events))
    _, rewards = series(records, "reward_mean")
    eval_steps, evals = series(records, "eval_accuracy")
    return {
        "steps_logged": len(records),
        "last_step": int(records[-1]["step"]) if records else None,
        "reward_mean": rewards[-1] if rewards else None,
        "reward_mean_first": rewards[0] if rewards else None,
        "heldout_accuracy": evals[-1] if evals else None,
        "heldout_accuracy_first": evals[0] if evals else None,
        "heldout_accuracy_best": max(evals) if evals else None,
        "heldout_accuracy_step": eval_steps[-1] if eval_steps else None,
        "last_checkpoint": newest_checkpoint(records, events),  # as `status` names it
        "restarts": len(m.restarts),
        "events": len(m.events),
    }


# The step-time panel's scale: a few steps far above the rest (the first step waits for the environment's first
# batch, seconds against a steady state of ~0.3 s on CPU) are cut off and named on the panel instead of squashing
# every other step to a flat line at the bottom.
OUTLIER_FACTOR = 3.0   # a step above this many times the 95th percentile is off the scale
HEADROOM = 1.5         # the scale then ends at this many times the 95th percentile


def step_time_scale(steps: list[int], totals: list[float]) -> tuple[float | None, list[tuple[int, float]]]:
    """(the step-time panel's upper limit, or None to let matplotlib choose; the (step, seconds) left above it).
    Pure: the percentile is the nearest-rank one of the stacked totals."""
    if len(totals) < 10:
        return None, []
    ranked = sorted(totals)
    p95 = ranked[min(len(ranked) - 1, math.ceil(0.95 * len(ranked)) - 1)]
    if p95 <= 0 or ranked[-1] <= OUTLIER_FACTOR * p95:
        return None, []
    top = HEADROOM * p95
    return top, [(s, t) for s, t in zip(steps, totals) if t > top]


def build_figure(records: list[dict], events: list[dict], title: str) -> Figure:
    """The report's figure: one panel per PANELS entry, marks on each."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 7.5), dpi=100, layout="constrained")
    axes = fig.subplots(2, 3, sharex=True).ravel()  # one step axis: marks line up across panels
    m = marks(records, events)
    for ax, (panel, keys, stacked) in zip(axes, PANELS):
        ax.set_title(panel)
        ax.set_xlabel("step")
        if panel in ("held-out accuracy", "clip fraction"):
            ax.set_ylim(-0.02, 1.02)  # fractions: the whole range, so 0.3 does not look like 1
        ax.grid(True, alpha=0.3)
        drawn = [(label, *series(records, key)) for key, label in keys]
        drawn = [d for d in drawn if d[1]]
        if not drawn:
            ax.text(0.5, 0.5, NO_DATA, ha="center", va="center", transform=ax.transAxes, color="0.4")
        elif stacked:
            common = sorted(set.intersection(*(set(s) for _, s, _ in drawn)))
            stacks = [[dict(zip(s, v))[x] for x in common] for _, s, v in drawn]
            ax.stackplot(common, stacks, labels=[label for label, _, _ in drawn])
            ax.legend(loc="upper left", fontsize="small")
            top, above = step_time_scale(common, [sum(column) for column in zip(*stacks)])
            if top is not None:
                ax.set_ylim(0, top)
                # One step a line at the upper right, the legend at the upper left: on one line the note ran into
                # the legend on a panel a third of the page wide.
                named = "\n".join(f"step {s}: {t:.1f} s" for s, t in above[:3]) + ("\n…" if len(above) > 3 else "")
                ax.text(0.98, 0.97, f"off the scale:\n{named}", ha="right", va="top", transform=ax.transAxes,
                        fontsize="small", color="0.3")
        else:
            for label, s, v in drawn:
                ax.plot(s, v, marker="o" if len(s) < 30 else None, markersize=6, label=label)
        for step in m.checkpoints:
            ax.axvline(step, color="0.6", linestyle=":", linewidth=1)
        for step in m.restarts:
            ax.axvline(step, color="tab:red", linewidth=1.5)
        for step, _ in m.events:
            ax.axvline(step, color="tab:orange", linestyle="--", linewidth=1.5)
    fig.suptitle(f"{title}   (dotted: checkpoint; red: trainer restart; orange dashed: event)")
    return fig


@dataclass(frozen=True)
class Report:
    png: Path
    html: Path
    figure: Figure
    summary: dict[str, Any]


def _fmt(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else ("n/a" if value is None else str(value))


def html_page(title: str, png_bytes: bytes, figures: dict[str, Any], m: Marks) -> str:
    """A page with the PNG inlined (data URI), the summary table and the events: one file, nothing fetched."""
    rows = "\n".join(f"<tr><th>{html.escape(k.replace('_', ' '))}</th><td>{html.escape(_fmt(v))}</td></tr>"
                     for k, v in figures.items())
    events = "\n".join(f"<li>step {s}: {html.escape(text)}</li>" for s, text in m.events) or "<li>none</li>"
    image = base64.b64encode(png_bytes).decode("ascii")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1250px}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:.25em .6em;text-align:left}}img{{max-width:100%}}</style></head>
<body><h1>{html.escape(title)}</h1>
<img alt="{html.escape(', '.join(PANEL_TITLES))} against step" src="data:image/png;base64,{image}">
<h2>Summary</h2><table>
{rows}
</table>
<h2>Events</h2><ul>
{events}
</ul>
<p>Checkpoints at steps: {html.escape(', '.join(map(str, m.checkpoints)) or 'none')}.
Trainer restarts at steps: {html.escape(', '.join(map(str, m.restarts)) or 'none')}.</p>
</body></html>
"""


def write_report(records: list[dict], events: list[dict], out_dir: Path, title: str,
                 stem: str = "report") -> Report:
    """Write <out_dir>/<stem>.png and <stem>.html; returns their paths, the figure and the summary figures."""
    import io

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    out_dir.mkdir(parents=True, exist_ok=True)
    fig = build_figure(records, events, title)
    FigureCanvasAgg(fig)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    png = out_dir / f"{stem}.png"
    png.write_bytes(buffer.getvalue())
    figures = summary(records, events)
    page = out_dir / f"{stem}.html"
    page.write_text(html_page(title, buffer.getvalue(), figures, marks(records, events)))
    return Report(png, page, fig, figures)
