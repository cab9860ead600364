"""Hydra's basic sweeper, minus a second composition of jobs rlexp already checked.

BasicSweeper.sweep composes every job of a batch before launching it (Sweeper.
validate_batch_is_legal, "to detect failures early"); rlexp's pre-flight has composed each
job in this process already, and checked more (types, ranges, refusals, inputs, memory).
The second pass cost 0.4 s a job (3.2 s of an 8-job tiny sweep's serial start). A batch with
any job pre-flight did not check (a huge product pre-flight sampled, a sweep file's extra
params) is validated as before.
"""

from __future__ import annotations

from typing import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class RlexpBasicSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from rlexp.launch.preflight import CHECKED_JOBS, task_overrides

        if batch and all(task_overrides(job) in CHECKED_JOBS for job in batch):
            return
        super().validate_batch_is_legal(batch)
