"""Start-up speed for sweeps, the launch layer's one door to it: the joblib launcher's fork
server (and its preload) started before pre-flight when the command line names it, and its
workers warmed up while the sweep is composed (hydra_plugins/rlexp_presets/joblib_launcher.py
and _preload.py do the work). The entry point and pre-flight call only this module.

RLEXP_FAST_START=0 turns all of it off (rlexp.base.runtime.fast_start_enabled, which also
holds the other layers' shortcuts); pre-flight then composes every job in full, and the
launcher is the plugin's own. The private names involved are listed in rlexp.base.private_apis.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlexp.base.runtime import fast_start_enabled
from rlexp.config.schema import Config

# Imported inside functions, on purpose: the joblib launcher plugin (joblib, loky) is imported
# only when a sweep names hydra/launcher=joblib.


def hydra_only(args: Any) -> bool:
    """Hydra's own flags that print something (help, info, shell completion) or rerun a
    pickled job: no job of rlexp's is composed or launched."""
    return bool(args.help or args.hydra_help or args.info or args.shell_completion
                or args.experimental_rerun)


def launches_joblib(argv: Sequence[str]) -> bool:
    """The command line names hydra/launcher=joblib for a sweep that will launch jobs."""
    from hydra._internal.utils import get_args_parser

    try:
        args = get_args_parser().parse_args(list(argv))
    except SystemExit:  # pre-flight reports the bad argument
        return False
    return (bool(args.multirun) and "hydra/launcher=joblib" in args.overrides
            and not (hydra_only(args) or args.cfg or "run.dry_run=true" in args.overrides))


def start_fork_server_early(argv: Sequence[str]) -> None:
    """A sweep whose command line names hydra/launcher=joblib: start the fork server its
    workers come from before pre-flight, so its imports (4 s on a 2-core CPU) overlap
    pre-flight's composition (1 s for 8 jobs). A launcher chosen in a config file is known
    only after pre-flight (start_workers). The server ends with this process."""
    if fast_start_enabled() and launches_joblib(argv):
        from hydra_plugins.rlexp_presets.joblib_launcher import start_fork_server

        start_fork_server()


def start_workers(launcher: dict[str, Any] | None, jobs: Sequence[Config]) -> None:
    """hydra/launcher=joblib: its workers start, with JAX and rlexp's engine imported, while
    this process composes the sweep and opens its MLflow parent run (joblib_launcher.py)."""
    target = (launcher or {}).get("_target_", "")
    if (target != "hydra_plugins.rlexp_presets.joblib_launcher.RlexpJoblibLauncher"
            or not fast_start_enabled()):
        return
    from hydra_plugins.rlexp_presets.joblib_launcher import start_warm_up

    hf = any(job.model.tokenizer != "char" for job in jobs)  # transformers: 1.2 s
    start_warm_up({k: v for k, v in launcher.items() if k != "_target_"},
                  ("transformers",) if hf else ())
