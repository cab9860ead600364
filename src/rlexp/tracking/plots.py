"""Curves as PNG (curves.png, comparison.png, groups.png, forest.png), a group in one colour in
all. Drawn on matplotlib's Agg canvas, never pyplot: no global figure state, no GUI backend, safe
while unwinding from a signal."""

from __future__ import annotations

import colorsys
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# matplotlib (1.1 s) is imported only when curves are drawn.

History = Mapping[str, Sequence[tuple[int, float]]]


def plot_run(history: History, panels: Mapping[str, Sequence[str]], path: Path,
             title: str = "") -> bool:
    """One panel per entry of `panels` (title -> metric names); False if nothing to plot."""
    lines = {t: [(m, history[m]) for m in names if history.get(m)] for t, names in panels.items()}
    return _draw(lines, path, title, legend_size=8)


Color = tuple[float, float, float]
# The first hue (blue: the baseline's) and the lightness and saturation of all.
FIRST_HUE, LIGHTNESS, SATURATION = 0.6, 0.42, 0.8


def palette(n: int) -> list[Color]:
    """n colours of evenly spaced hues from blue (tab20 pairs two shades of one hue)."""
    return [colorsys.hls_to_rgb((FIRST_HUE + i / max(n, 1)) % 1, LIGHTNESS, SATURATION)
            for i in range(n)]


def group_colors(groups: Sequence[str]) -> dict[str, Color]:
    """A colour per group label, baseline first: plots of the same groups colour them alike."""
    return dict(zip(groups, palette(len(groups))))


DASHES = ("-", "--", ":", "-.")


def plot_compare(runs: Sequence[tuple[str, History, str]], metrics: Sequence[str], path: Path,
                 colors: Mapping[str, Color], title: str = "") -> bool:
    """One panel per metric, one line per run (labelled by its swept values); runs of one
    group (the third item, a key of `colors`) share its colour and differ in their dashes."""
    members: dict[str, int] = {}
    style = {}
    for label, _, group in runs:
        style[label] = (colors[group], DASHES[members.get(group, 0) % len(DASHES)])
        members[group] = members.get(group, 0) + 1
    lines = {m: [(label, h[m]) for label, h, _ in runs if h.get(m)] for m in metrics}
    return _draw(lines, path, title, legend_size=7, style=style)


def plot_bands(groups: Sequence[tuple[str, Mapping[str, Sequence[tuple[int, float, ...]]]]],
               metrics: Sequence[str], path: Path, colors: Mapping[str, Color], title: str = ""
               ) -> bool:
    """One panel per metric; per group its mean curve and CI band (step, mean, low, high)."""
    lines = {m: [(label, curves[m]) for label, curves in groups if curves.get(m)] for m in metrics}
    style = {label: (colors[label], "-") for label, _ in groups}
    return _draw(lines, path, title, legend_size=8, style=style)


def plot_forest(rows: Sequence[tuple[str, float, float, float]], colors: Mapping[str, Color],
                path: Path, xlabel: str, title: str = "") -> bool:
    """Rows (group, difference, CI low, CI high) top down: marker, interval bar, a line at 0."""
    if not rows:
        return False
    fig = _figure(6.5, 1.2 + 0.35 * len(rows))
    ax = fig.subplots()
    for y, (label, mean, low, high) in enumerate(rows):
        ax.errorbar([mean], [-y], xerr=[[mean - low], [high - mean]], fmt="o", capsize=3,
                    color=colors[label])
    ax.axvline(0, color="0.4", linewidth=1, linestyle="--")
    ax.set_yticks([-y for y in range(len(rows))], [label for label, *_ in rows], fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    return _save(fig, path, title)


def _draw(panels: dict[str, list[tuple[str, list]]], path: Path, title: str,
          legend_size: int, style: Mapping[str, tuple] | None = None) -> bool:
    """One panel per title, a line per (label, points), a band for (step, mean, low, high)."""
    shown = {t: lines for t, lines in panels.items() if lines}
    if not shown:
        return False
    fig = _figure(5.5 * len(shown), 4.0)
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
    return _save(fig, path, title)


def _figure(width: float, height: float) -> "Figure":
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: "Figure", path: Path, title: str) -> bool:
    if title:
        fig.suptitle(title, fontsize=10)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return True
