"""Who a job is: its run dir, name, choices and overrides, and its sweep (Hydra's runtime)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf


@dataclass
class JobContext:
    run_dir: Path  # where this job writes (Hydra's output dir); its name is the run's
    name: str
    choices: dict[str, str]  # group choices, e.g. {"algo": "gspo", "hardware": "v6e-8", ...}
    overrides: list[str]  # command-line overrides (a sweep job's include its swept values)
    sweep_dir: Path | None = None  # the sweep dir when this job is part of a multirun
    index: int | None = None  # Hydra's job.num in a multirun (from 0); None for a single run

    @classmethod
    def from_hydra(cls) -> "JobContext":
        hc = HydraConfig.get()
        run_dir = Path(hc.runtime.output_dir)
        choices = {k: str(v) for k, v in OmegaConf.to_container(hc.runtime.choices).items()
                   if not k.startswith("hydra/") and v is not None}
        sweep = Path(hc.sweep.dir).resolve() if hc.mode == RunMode.MULTIRUN else None
        return cls(run_dir=run_dir, name=run_dir.name, choices=choices,
                   overrides=list(hc.overrides.task), sweep_dir=sweep,
                   index=int(hc.job.num) if sweep is not None else None)

    def identity(self) -> dict[str, Any]:
        """The fields every summary.json of this job starts with."""
        return {"name": self.name, "choices": self.choices, "overrides": self.overrides,
                "run_dir": str(self.run_dir.resolve())}
