"""`python -m rlexp`: validate -> plan -> build -> run -> the metric a sweeper optimizes."""

from __future__ import annotations

import logging
import os
import sys


def _say_starting() -> None:
    """The command's first line, before the imports below (2+ s on a busy machine): a piped
    run or sweep is otherwise silent until its config is composed. Not for --help, --cfg and
    the like (their output is the answer), nor a supervised process of a multi-host run."""
    argv = sys.argv[1:]
    quiet = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info",
             "-sc", "--shell-completion", "-p", "--package"}
    ours = os.path.basename(sys.argv[0]) == "rlexp" or sys.argv[0].endswith(
        os.path.join("rlexp", "__main__.py"))
    if not ours or quiet & set(argv) or os.environ.get("RLEXP_SUPERVISED"):
        return
    sweep = {"-m", "--multirun"} & set(argv) or any(a.lstrip("+").startswith("sweep=")
                                                     for a in argv)
    print(f"rlexp: starting {'a sweep' if sweep else 'a run'}: reading the config",
          file=sys.stderr, flush=True)


_say_starting()
if __name__ == "__main__":  # first: every library's exit handler registers after this one
    from rlexp.base.runtime import skip_teardown

    skip_teardown()

import hydra
from omegaconf import DictConfig

from rlexp.base import runtime
from rlexp.base.errors import UserError, fail
from rlexp.base.redact import RedactedStream, install_log_redaction
from rlexp.config.convert import to_config
from rlexp.config.paths import conf_dir
from rlexp.job import experiment
from rlexp.job import sweep_messages
from rlexp.job.console import quiet_third_party
from rlexp.launch import args, dry_run, preflight
from rlexp.planning.hardware import detect_launch, setup_platform

log = logging.getLogger("rlexp")


def _task(cfg: DictConfig) -> float | None:

    job = experiment.JobContext.from_hydra()
    # stderr, one format; in a sweep each line labelled [3/8 beta=0.04 G=4]
    with sweep_messages.job_output(job.index, job.overrides):
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
        args.parse_args(argv)
    except UserError as exc:
        fail(str(exc))
    launch = detect_launch(os.environ)
    if (launch.count or 0) > 1 and not os.environ.get(runtime.SUPERVISED_ENV):
        # one process of a multi-controller run: a lost peer ends it in one line
        runtime.supervise(argv, launch.index, launch.count)

    quiet_third_party()  # before MLflow is imported: it reads its log level once

    install_log_redaction()  # Hydra logs each job's overrides (tracker.uri=... included)
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
        os.environ.update(sweep_messages.SweepEnv(size=pre.size, keys=list(pre.swept)).to_env())
    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_task)
    if pre is not None and pre.print_only:  # --cfg prints the composed config: no credentials

        sys.stdout = RedactedStream(sys.stdout)
    app()

if __name__ == "__main__":
    with runtime.exit_status():  # the status skip_teardown leaves with
        main()
