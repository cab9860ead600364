"""`python -m rlexp`: validate -> plan -> build -> run -> the metric a sweeper optimizes."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from rlexp.base.errors import UserError, fail
from rlexp.base.redact import RedactedStream, install_log_redaction
from rlexp.config.convert import to_config
from rlexp.config.paths import conf_dir
from rlexp.job import experiment
from rlexp.job.console import quiet_third_party
from rlexp.launch import dry_run, fast_start, preflight
from rlexp.planning.hardware import setup_platform

log = logging.getLogger("rlexp")


def _task(cfg: DictConfig) -> float | None:

    job = experiment.JobContext.from_hydra()
    try:
        config = to_config(cfg)

        setup_platform(config.hardware)  # a no-op when pre-flight set it for the whole command
    except UserError as exc:
        if job.sweep_dir is not None:  # never exit inside a sweep: the other jobs go on
            raise
        fail(str(exc))
    return experiment.run(config, job)


def main() -> None:

    argv = sys.argv[1:]

    quiet_third_party()  # before MLflow is imported: it reads its log level once

    install_log_redaction()  # Hydra logs each job's overrides (tracker.uri=... included)
    fast_start.start_fork_server_early(argv)
    try:
        pre = preflight.preflight(argv)
    except UserError as exc:
        fail(str(exc))
    if pre is not None and pre.dry_run:
        try:
            dry_run.dry_run(pre)  # no dirs, no MLflow runs: Hydra never launches
        except UserError as exc:
            fail(str(exc))
        return
    if pre is not None:
        preflight.before_launch(pre)
    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_task)
    if pre is not None and pre.print_only:  # --cfg prints the composed config: no credentials

        sys.stdout = RedactedStream(sys.stdout)
    app()

if __name__ == "__main__":
    main()
    from rlexp.base.runtime import exit_now

    exit_now()  # finished: skip the interpreter's teardown (1-2 s; not with RLEXP_FAST_START=0)
