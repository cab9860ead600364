"""Curves as PNG files: one run (curves.png), several runs side by side (comparison.png), and
seed groups' mean curves with their confidence bands (groups.png).

Figures are drawn with matplotlib's Agg canvas directly, never pyplot: no global figure
state, no GUI backend, safe while unwinding from a signal.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

# Imported inside functions, on purpose: matplotlib (1.1 s) is imported only when curves are drawn
# at the end of a run.

History = Mapping[str, Sequence[tuple[int, float]]]


def _figure(panels: int):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * panels, 4.0), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(1, panels, squeeze=False)[0]


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
    import math

    shown = [m for m in metrics if any(curves.get(m) for _, curves in groups)]
    if not shown:
        return False
    fig, axes = _figure(len(shown))
    colors = palette(len(groups))
    handles = {}
    for ax, metric in zip(axes, shown):
        for (label, curves), color in zip(groups, colors):
            points = curves.get(metric)
            if not points:
                continue
            steps, mean, low, high = zip(*points)
            (line,) = ax.plot(steps, mean, color=color, marker="o" if len(steps) < 30 else None,
                              ms=3, label=label)
            if not any(math.isnan(v) for v in low + high):
                ax.fill_between(steps, low, high, color=color, alpha=0.2, linewidth=0)
            handles.setdefault(label, line)
    return _finish(fig, dict(zip(shown, axes)), handles, 8, title, path)


def _finish(fig, axes: dict, handles: dict, size: int, title: str, path: Path) -> bool:
    """Titles the panels ({title: axes}), draws the legend and saves the figure."""
    for panel, ax in axes.items():
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    # As many columns as fit the figure's width (~6 px a character at these sizes, + handle).
    longest = max(len(label) for label in handles)
    ncol = max(1, min(len(handles), int(550 * len(axes) / (0.9 * size * longest + 50))))
    fig.set_figheight(4.0 + 0.22 * -(-len(handles) // ncol))  # room for the legend's rows
    fig.legend(list(handles.values()), list(handles), loc="outside lower center",
               fontsize=size, ncol=ncol, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return True


def _draw(panels: dict[str, list[tuple[str, list]]], path: Path, title: str,
          legend_size: int, style: Mapping[str, tuple] | None = None) -> bool:
    """One panel per title, one line per (label, [(step, value), ...]); False if all empty."""
    shown = {t: lines for t, lines in panels.items() if lines}
    if not shown:
        return False
    fig, axes = _figure(len(shown))
    # One colour per label across panels (all distinct unless `style` groups them), and one
    # legend outside the axes (below them), so it never covers a curve however many runs.
    labels = list(dict.fromkeys(label for lines in shown.values() for label, _ in lines))
    style = style or {label: (c, "-") for label, c in zip(labels, palette(len(labels)))}
    handles = {}
    for ax, lines in zip(axes, shown.values()):
        for label, points in lines:
            steps, values = zip(*points)
            color, dashes = style[label]
            (line,) = ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3,
                              label=label, color=color, linestyle=dashes)
            handles.setdefault(label, line)
    return _finish(fig, dict(zip(shown, axes)), handles, legend_size, title, path)
