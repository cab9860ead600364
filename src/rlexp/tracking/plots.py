"""Curves as PNG files: one run (curves.png), several runs (comparison.png), seed groups' mean
curves with their confidence bands (groups.png). Drawn on matplotlib's Agg canvas, never
pyplot: no global figure state, no GUI backend, safe while unwinding from a signal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

# Imported inside functions, on purpose: matplotlib (1.1 s) is imported only when curves are drawn
# at the end of a run.

History = Mapping[str, Sequence[tuple[int, float]]]


def plot_run(history: History, panels: Mapping[str, Sequence[str]], path: Path,
             title: str = "") -> bool:
    """One panel per entry of `panels` (title -> metric names); False if nothing to plot."""
    lines = {t: [(m, history[m]) for m in names if history.get(m)] for t, names in panels.items()}
    return _draw(lines, path, title, legend_size=8)


def palette(n: int) -> list:
    """n distinct colours: tab10 up to 10, tab20 up to 20, then evenly spaced hues."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["hsv"](i / n) for i in range(n)]


DASHES = ("-", "--", ":", "-.")


def plot_compare(runs: Sequence[tuple[str, History, int]], metrics: Sequence[str], path: Path,
                 title: str = "") -> bool:
    """One panel per metric, one line per run (labelled by its swept values); runs of one
    group (the third item) share a colour and differ in their dashes."""
    groups = sorted({g for _, _, g in runs})
    colors = dict(zip(groups, palette(len(groups))))
    members: dict[int, int] = {}
    style = {}
    for label, _, group in runs:
        style[label] = (colors[group], DASHES[members.get(group, 0) % len(DASHES)])
        members[group] = members.get(group, 0) + 1
    lines = {m: [(label, h[m]) for label, h, _ in runs if h.get(m)] for m in metrics}
    return _draw(lines, path, title, legend_size=7, style=style)


def plot_bands(groups: Sequence[tuple[str, Mapping[str, Sequence[tuple[int, float, float,
                                                                       float]]]]],
               metrics: Sequence[str], path: Path, title: str = "") -> bool:
    """One panel per metric; per group its mean curve and a shaded band between the CI's
    bounds (points: (step, mean, low, high)); one colour a group."""
    lines = {m: [(label, curves[m]) for label, curves in groups if curves.get(m)]
             for m in metrics}
    style = {label: (c, "-") for (label, _), c in zip(groups, palette(len(groups)))}
    return _draw(lines, path, title, legend_size=8, style=style)


def _draw(panels: dict[str, list[tuple[str, list]]], path: Path, title: str,
          legend_size: int, style: Mapping[str, tuple] | None = None) -> bool:
    """One panel per title, one line per (label, [(step, value), ...]), a band where the points
    are (step, mean, low, high); False if all empty."""
    shown = {t: lines for t, lines in panels.items() if lines}
    if not shown:
        return False
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * len(shown), 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(shown), squeeze=False)[0]
    # One colour per label across panels (all distinct unless `style` groups them), and one
    # legend outside the axes (below them), so it never covers a curve however many runs.
    labels = list(dict.fromkeys(label for lines in shown.values() for label, _ in lines))
    style = style or {label: (c, "-") for label, c in zip(labels, palette(len(labels)))}
    handles = {}
    for ax, (panel, lines) in zip(axes, shown.items()):
        for label, points in lines:
            steps, values, *band = zip(*points)
            color, dashes = style[label]
            (line,) = ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3,
                              label=label, color=color, linestyle=dashes)
            if band and not any(math.isnan(v) for v in band[0] + band[1]):
                ax.fill_between(steps, *band, color=color, alpha=0.2, linewidth=0)
            handles.setdefault(label, line)
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    # As many columns as fit the figure's width (~6 px a character at these sizes, + handle).
    longest = max(len(label) for label in handles)
    ncol = max(1, min(len(handles), int(550 * len(axes) / (0.9 * legend_size * longest + 50))))
    fig.set_figheight(4.0 + 0.22 * -(-len(handles) // ncol))  # room for the legend's rows
    fig.legend(list(handles.values()), list(handles), loc="outside lower center",
               fontsize=legend_size, ncol=ncol, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return True
