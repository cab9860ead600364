"""Start-up speed for sweeps, the launch layer's one door to it: the joblib launcher's fork
server (and its preload) started before pre-flight when the command line names it, and its
workers warmed up while the sweep is composed (hydra_plugins/rlexp_presets/joblib_launcher.py
and _preload.py do the work). The entry point and pre-flight call only this module.

The command line is parsed here, once, before anything else (parse_args): a flag in the wrong
place (`python -m rlexp a=1 -m b=1,2`) is one line naming the fix and exit 2, and `--version`
names rlexp's version with Tunix's, JAX's and Hydra's (package metadata: nothing imported).

RLEXP_FAST_START=0 turns all of it off (rlexp.base.runtime.fast_start_enabled, which also
holds the other layers' shortcuts); pre-flight then composes every job in full, and the
launcher is the plugin's own. The private names involved are listed in rlexp.base.private_apis.
"""

from __future__ import annotations

import argparse
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Sequence

from rlexp.base.errors import UserError
from rlexp.base.runtime import fast_start_enabled
from rlexp.config.schema import Config

# Imported inside functions, on purpose: the joblib launcher plugin (joblib, loky) is imported
# only when a sweep names hydra/launcher=joblib.


def hydra_only(args: Any) -> bool:
    """Hydra's own flags that print something (help, info, shell completion) or rerun a
    pickled job: no job of rlexp's is composed or launched."""
    return bool(args.help or args.hydra_help or args.info or args.shell_completion
                or args.experimental_rerun)


PROG = "python -m rlexp"
# What --version names: (distribution, name shown).
VERSIONS = (("rlexp", "rlexp"), ("google-tunix", "Tunix"), ("jax", "JAX"), ("hydra-core", "Hydra"))


def versions_line() -> str:
    """'rlexp 0.1.0 (Tunix 0.1.7, JAX 0.10.2, Hydra 1.3.8)', from the installed packages'
    metadata: importing Tunix and JAX to ask them would take seconds."""

    def of(dist: str) -> str:
        try:
            return version(dist)
        except PackageNotFoundError:
            return "not installed"

    (first, name), *rest = VERSIONS
    return f"{name} {of(first)} ({', '.join(f'{n} {of(d)}' for d, n in rest)})"


def usage_error(message: str, argv: Sequence[str]) -> str:
    """argparse's complaint -> one line naming the fix. Hydra's parser takes the overrides
    as one positional list, so an option between two overrides leaves the later ones
    'unrecognized': the usual case is -m typed after the first override."""
    argv = list(argv)
    if message.startswith("unrecognized arguments") and any(
            a in ("-m", "--multirun") for a in argv):
        flags = [a for a in argv if a in ("-m", "--multirun")][:1]
        rest = [a for a in argv if a not in ("-m", "--multirun")]
        return (f"{message}: put -m/--multirun first, before the overrides: "
                f"{' '.join([PROG, *flags, *rest])}")
    if message.startswith("unrecognized arguments") and any(
            not a.startswith("-") for a in message.split(":", 1)[-1].split()):
        return (f"{message}: put the options (--cfg, -cn, ...) before the overrides "
                f"(see {PROG} --help)")
    return f"{message} (see {PROG} --help)"


def parse_args(argv: Sequence[str]) -> Any:
    """Hydra's own argument parser, as `python -m rlexp`: a mistake raises UserError (one
    line, exit 2, printed once), --version prints versions_line() and exits 0."""
    from hydra._internal.utils import get_args_parser

    argv = list(argv)
    if "--version" in argv[:argv.index("--") if "--" in argv else None]:
        print(versions_line(), flush=True)  # instead of Hydra's own "Hydra 1.3.8"
        raise SystemExit(0)
    parser = get_args_parser()
    parser.prog = PROG

    def error(message: str) -> "NoReturn":  # noqa: F821
        raise UserError(usage_error(message, argv))

    parser.error = error  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    # Hydra's own check (hydra/_internal/utils.py _run_hydra) raises a ValueError, traceback
    # and all, once the app starts: said here in one line.
    if (bool(args.run) + bool(args.multirun) + bool(args.cfg) + bool(args.info)
            + bool(args.shell_completion)) > 1:
        raise UserError("only one of --run, -m/--multirun, --cfg, --info and "
                        f"--shell-completion at a time (see {PROG} --help)")
    return args


def launches_joblib(argv: Sequence[str]) -> bool:
    """The command line names hydra/launcher=joblib for a sweep that will launch jobs."""
    try:
        args = parse_args(argv)
    except (UserError, SystemExit):  # pre-flight reports the bad argument
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
