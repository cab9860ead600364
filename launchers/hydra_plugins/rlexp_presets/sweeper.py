"""Hydra's basic sweeper, minus a second composition of jobs rlexp already checked.

BasicSweeper.sweep composes every job of a batch before launching it (Sweeper.
validate_batch_is_legal, "to detect failures early"); rlexp's pre-flight has composed each
job in this process already, and checked more (types, ranges, refusals, inputs, memory).
The second pass cost 0.4 s a job (3.2 s of an 8-job tiny sweep's serial start). A batch with
any job pre-flight did not check (a huge product pre-flight sampled, a sweep file's extra
params) is validated as before, and so is every batch with RLEXP_FAST_START=0.

Pre-flight hands the jobs it checked to rlexp.base.runtime (note_checked_jobs), which this
sweeper reads: the plugin imports nothing of rlexp's launch layer. BasicSweeper lives in
hydra._internal (listed in rlexp.base.private_apis).
"""

from __future__ import annotations

from typing import Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper


class RlexpBasicSweeper(BasicSweeper):
    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from rlexp.base.runtime import all_checked

        if all_checked(batch):
            return
        super().validate_batch_is_legal(batch)
