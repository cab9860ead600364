"""Curves as PNG files: one run (curves.png) and several runs side by side (comparison.png).

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


def plot_compare(runs: Sequence[tuple[str, History]], metrics: Sequence[str], path: Path,
                 title: str = "") -> bool:
    """One panel per metric, one line per run (labelled by its swept values)."""
    lines = {m: [(label, h[m]) for label, h in runs if h.get(m)] for m in metrics}
    return _draw(lines, path, title, legend_size=7)


def _draw(panels: dict[str, list[tuple[str, list]]], path: Path, title: str,
          legend_size: int) -> bool:
    """One panel per title, one line per (label, [(step, value), ...]); False if all empty."""
    shown = {t: lines for t, lines in panels.items() if lines}
    if not shown:
        return False
    fig, axes = _figure(len(shown))
    # One colour per label across panels, and one legend outside the axes (below them), so
    # it never covers a curve however many runs there are.
    colors = {}
    handles = {}
    for ax, (panel, lines) in zip(axes, shown.items()):
        for label, points in lines:
            steps, values = zip(*points)
            color = colors.setdefault(label, f"C{len(colors) % 10}")
            (line,) = ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3,
                              label=label, color=color)
            handles.setdefault(label, line)
        ax.set_title(panel)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    # As many columns as fit the figure's width (~6 px a character at these sizes, + handle).
    longest = max(len(label) for label in handles)
    ncol = max(1, min(len(handles), int(550 * len(shown) / (0.9 * legend_size * longest + 50))))
    fig.set_figheight(4.0 + 0.22 * -(-len(handles) // ncol))  # room for the legend's rows
    fig.legend(list(handles.values()), list(handles), loc="outside lower center",
               fontsize=legend_size, ncol=ncol, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return True
