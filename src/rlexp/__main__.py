"""`python -m rlexp`: validate -> plan -> build -> run -> the metric a sweeper optimizes."""

from __future__ import annotations

import logging
import os
import sys

import hydra
from omegaconf import DictConfig

from rlexp.base import runtime
from rlexp.base.errors import UserError, fail
from rlexp.base.redact import RedactedStream, install_log_redaction
from rlexp.config.convert import to_config
from rlexp.config.paths import conf_dir
from rlexp.job import experiment
from rlexp.job import console
from rlexp.job.console import quiet_third_party
from rlexp.launch import dry_run, fast_start, preflight
from rlexp.planning.hardware import detect_launch, setup_platform

log = logging.getLogger("rlexp")


def _task(cfg: DictConfig) -> float | None:

    job = experiment.JobContext.from_hydra()
    # stderr, one format; in a sweep each line labelled [3/8 beta=0.04 G=4]
    with console.job_output(job.index, job.overrides):
        try:
            config = to_config(cfg)

            setup_platform(config.hardware)  # a no-op when pre-flight set it for the command
        except UserError as exc:
            if job.sweep_dir is not None:  # never exit inside a sweep: the other jobs go on
                raise
            fail(str(exc))
        return experiment.run(config, job)


def main() -> None:

    argv = sys.argv[1:]
    try:  # once, first: a misplaced -m is one line naming the fix; --version ends here
        fast_start.parse_args(argv)
    except UserError as exc:
        fail(str(exc))
    launch = detect_launch(os.environ)
    if (launch.count or 0) > 1 and not os.environ.get(runtime.SUPERVISED_ENV):
        # one process of a multi-controller run: a lost peer ends it in one line
        runtime.supervise(argv, launch.index, launch.count)

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
        try:
            preflight.before_launch(pre)  # setup_platform: the processes fit hardware.runtime
        except UserError as exc:
            fail(str(exc))
    if pre is not None and pre.multirun and not pre.print_only:  # for the jobs' labels
        os.environ.update(console.SweepEnv(size=pre.size, keys=list(pre.swept)).to_env())
    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_task)
    if pre is not None and pre.print_only:  # --cfg prints the composed config: no credentials

        sys.stdout = RedactedStream(sys.stdout)
    app()

if __name__ == "__main__":
    main()
    from rlexp.base.runtime import exit_now

    exit_now()  # finished: skip the interpreter's teardown (1-2 s; not with RLEXP_FAST_START=0)
