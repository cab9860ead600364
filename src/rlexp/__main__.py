"""`python -m rlexp`: validate -> plan -> build -> run -> the metric a sweeper optimizes."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable


def _say_starting() -> None:
    """The command's first line, before the imports below (2+ s on a busy machine); not for
    --help, --cfg and the like (their output is the answer), nor a supervised process."""
    argv = sys.argv[1:]
    quiet = {"-h", "--help", "--hydra-help", "--version", "-c", "--cfg", "-i", "--info",
             "-sc", "--shell-completion", "-p", "--package"}
    ours = os.path.basename(sys.argv[0]) == "rlexp" or sys.argv[0].endswith(
        os.path.join("rlexp", "__main__.py"))
    if not ours or quiet & set(argv) or os.environ.get("RLEXP_SUPERVISED") \
            or os.environ.get("RLEXP_VLLM_RERUN"):  # re-run in a backend's Python: said already
        return
    from rlexp.base.runtime import detect_launch  # standard library only: no delay

    if detect_launch(os.environ).index:
        return  # a multi-process launch (mpirun -n 2): process 0 says it
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
from rlexp.base.redact import RedactedStream, install_log_redaction, mask_argv, unmask_config
from rlexp.config.convert import to_config
from rlexp.config.paths import conf_dir
from rlexp.config.rollouts import rerun_elsewhere, rollout_spec
from rlexp.job import experiment
from rlexp.job import sweep_messages
from rlexp.job.console import quiet_third_party
from rlexp.launch import args, dry_run, preflight
from rlexp.planning.hardware import setup_platform


def _task(cfg: DictConfig) -> float | None:
    job = experiment.JobContext.from_hydra()
    # stderr, one format; in a sweep each line labelled [3/8 beta=0.04 G=4]
    with sweep_messages.job_output(job.index, job.overrides):
        try:
            unmask_config(cfg)  # the secrets main() kept out of Hydra's files
            config = to_config(cfg)
            # a no-op when pre-flight set it for the command
            setup_platform(config.hardware, vllm_share=rollout_spec(config).gpu_share(config))
        except UserError as exc:
            if job.sweep_dir is not None:  # never exit inside a sweep: the other jobs go on
                raise
            fail(str(exc))
        return experiment.run(config, job)


# A process other than 0 of a multi-process launch waits this long before its refusal line: the
# launcher ends it first once process 0 has exited. 3 s was too short once on a busy 2-core CPU
# (mpirun -n 2 under the full test suite printed both lines); a refusal costs no more than this.
REFUSAL_DELAY_S = 10.0


def _refusing(index: int | None, step: Callable[..., Any], *step_args: Any) -> Any:
    """step(*step_args), its UserError a refusal (exit 2). Every process of a multi-process
    launch finds the same mistake: process 0 says it at once, the others after a delay, by when
    a launcher that ends the rest on a failure (mpirun; srun -K1) has ended them, so the line
    comes once. Plain srun lets each finish: each says it, so a mistake only one process finds
    (a local file it lacks) is never lost."""
    try:
        return step(*step_args)
    except UserError as exc:
        if index:
            time.sleep(REFUSAL_DELAY_S)
        fail(str(exc))


def main() -> None:
    argv = sys.argv[1:]
    launch = runtime.detect_launch(os.environ)
    # once, first: a misplaced -m is one line naming the fix; --version ends here
    _refusing(launch.index, args.parse_args, argv)
    if (launch.count or 0) > 1 and not os.environ.get(runtime.SUPERVISED_ENV):
        # one process of a multi-controller run: a lost peer ends it in one line
        runtime.supervise(argv, launch.index, launch.count)
    quiet_third_party()  # before MLflow is imported: it reads its log level once
    install_log_redaction()  # Hydra logs each job's overrides (tracker.uri=... included)
    pre = _refusing(launch.index, preflight.preflight, argv)
    if pre is not None and pre.dry_run:
        # no dirs, no MLflow runs: Hydra never launches
        _refusing(launch.index, dry_run.dry_run, pre)
        return
    launching = pre is not None and not pre.print_only
    if launching and not pre.context.jobs_run_elsewhere:
        rerun_elsewhere(pre.jobs, argv)  # rollout=vllm, vLLM only in its venv: no return
    if launching:
        # setup_platform: the processes fit hardware.runtime
        _refusing(launch.index, preflight.before_launch, pre)
    if launching and pre.multirun:  # for the jobs' labels
        os.environ.update(sweep_messages.SweepEnv(size=pre.size, keys=list(pre.swept)).to_env())
    # Hydra writes the overrides to .hydra/*.yaml and multirun.yaml before any job runs: their
    # secrets become placeholders, the real values reach the jobs through the environment.
    sys.argv[1:] = mask_argv(sys.argv[1:])
    app = hydra.main(config_path=str(conf_dir()), config_name="config", version_base="1.3")(_task)
    if pre is not None and pre.print_only:  # --cfg prints the composed config: no credentials
        sys.stdout = RedactedStream(sys.stdout)
    app()
    if launching and pre.multirun:  # a failed job: its line, exit 1
        code = sweep_messages.end_of_sweep(pre.out_dir)
        if code:
            sys.exit(code)


if __name__ == "__main__":
    with runtime.exit_status():  # the status skip_teardown leaves with
        main()
