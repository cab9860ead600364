"""`python -m rlexp`: validate -> plan -> build -> run -> the metric a sweeper optimizes."""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from rlexp.errors import UserError, fail
from rlexp.paths import conf_dir

log = logging.getLogger("rlexp")


def _task(cfg: DictConfig) -> float | None:
    from rlexp import experiment
    from rlexp.config import to_config

    job = experiment.JobContext.from_hydra()
    try:
        config = to_config(cfg)
        from rlexp.hardware import setup_platform

        setup_platform(config.hardware)  # a no-op when pre-flight set it for the whole command
    except UserError as exc:
        if job.sweep_dir is not None:  # never exit inside a sweep: the other jobs go on
            raise
        fail(str(exc))
    return experiment.run(config, job)


def main() -> None:
    from rlexp import cli

    argv = sys.argv[1:]
    from rlexp.console import quiet_third_party

    quiet_third_party()  # before MLflow is imported: it reads its log level once
    from rlexp.redact import install_log_redaction

    install_log_redaction()  # Hydra logs each job's overrides (tracker.uri=... included)
    cli.start_fork_server_early(argv)
    try:
        pre = cli.preflight(argv)
    except UserError as exc:
        fail(str(exc))
    if pre is not None and pre.dry_run:
        try:
            cli.dry_run(pre)  # no dirs, no MLflow runs: Hydra never launches
        except UserError as exc:
            fail(str(exc))
        return
    if pre is not None:
        cli.before_launch(pre)
    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_task)
    if pre is not None and pre.print_only:  # --cfg prints the composed config: no credentials
        from rlexp.redact import RedactedStream

        sys.stdout = RedactedStream(sys.stdout)
    app()


if __name__ == "__main__":
    main()
    from rlexp.runtime import exit_now

    exit_now()  # finished: skip the interpreter's teardown (1-2 s)
