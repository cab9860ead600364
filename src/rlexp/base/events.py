"""The listener interface: the loop emits events; the console, summary.json and MLflow listen.
Nothing in the training path imports a tracker: it only calls `Listeners`."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@dataclass
class RunInfo:
    """What listeners learn at start: identity, config and where things go."""

    name: str  # readable run name, e.g. "gspo-v6e-8-beta0.04"
    run_dir: Path  # the run dir (Hydra's output dir for this job)
    params: dict[str, Any]  # resolved config, flattened to dotted keys (secrets already redacted)
    tags: dict[str, str]  # tags: choices, overrides, versions, git, host, sweep id
    start_step: int = 0  # global step the loop starts from (> 0 when resuming)
    total_steps: int = 0
    sweep_dir: Path | None = None
    # Extra context (e.g. MLflow parent run id) for listeners that need it.
    extra: dict[str, Any] = field(default_factory=dict)


class Listener:
    """Base class: every hook is optional. Hooks must not raise into the loop."""

    def on_run_start(self, info: RunInfo) -> None: ...

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None: ...

    def on_eval(self, step: int, metrics: dict[str, float], samples: list[dict]) -> None: ...

    def on_rollouts(self, step: int, rows: list[dict]) -> None:
        """Rollouts of `step`, a dict per completion: prompt, completion, each reward, reward,
        advantage, length, truncated."""

    def on_checkpoint(self, step: int, path: Path) -> None: ...

    def on_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None: ...


class Listeners(Listener):
    """Fan-out to several listeners; a failing listener is logged, never fatal."""

    def __init__(self, listeners: list[Listener]):
        self.listeners = list(listeners)

    def _each(self, hook: str, *args: Any, **kwargs: Any) -> None:
        for listener in self.listeners:
            try:
                getattr(listener, hook)(*args, **kwargs)
            except Exception as exc:  # observers must never stop training
                log.warning("%s.%s failed: %s", type(listener).__name__, hook, exc)

    def on_run_start(self, info: RunInfo) -> None:
        self._each("on_run_start", info)

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._each("on_metrics", step, metrics)

    def on_eval(self, step: int, metrics: dict[str, float], samples: list[dict]) -> None:
        self._each("on_eval", step, metrics, samples)

    def on_rollouts(self, step: int, rows: list[dict]) -> None:
        self._each("on_rollouts", step, rows)

    def on_checkpoint(self, step: int, path: Path) -> None:
        self._each("on_checkpoint", step, path)

    def on_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._each("on_artifact", path, artifact_path)

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        self._each("on_run_end", status, summary)
