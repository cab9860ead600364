"""run.profile_steps=[a,b]: a JAX profiler trace of global steps a..b, in <run dir>/profile
(TensorBoard's profile plugin layout, and a Perfetto trace for ui.perfetto.dev)."""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger("rlexp")


class StepProfiler:
    def __init__(self, steps: list[int], run_dir: Path):
        self.first, self.last = (int(steps[0]), int(steps[1])) if steps else (0, -1)
        self.dir = Path(run_dir) / "profile"
        self.active = False

    def before(self, step: int) -> None:
        if step == self.first and not self.active:
            import jax

            self.dir.mkdir(parents=True, exist_ok=True)
            jax.profiler.start_trace(str(self.dir), create_perfetto_trace=True)
            self.active = True

    def after(self, step: int) -> Path | None:
        """Called after global step `step`; the trace dir once the last traced step is done."""
        return self.close() if self.active and step >= self.last else None

    def close(self) -> Path | None:
        """Stop a trace in progress (also when the loop ends early); its dir, else None."""
        if not self.active:
            return None
        import jax

        self.active = False
        try:
            jax.block_until_ready(jax.numpy.zeros(()))  # async dispatch: let the steps finish
            jax.profiler.stop_trace()
        except Exception as exc:  # a trace is a diagnostic: never fail the run for it
            log.warning("profiler trace of %s not written: %s", self.dir, exc)
            return None
        return self.dir
