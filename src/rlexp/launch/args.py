"""The command line of `python -m rlexp`, parsed once, first, by Hydra's own parser: a flag in
the wrong place (`python -m rlexp a=1 -m b=1,2`) is one line naming the fix and exit 2."""

from __future__ import annotations

from typing import Any, NoReturn, Sequence

from rlexp.base.errors import UserError


def hydra_only(args: Any) -> bool:
    """Hydra's own flags (help, info, completion, a pickled job's rerun): no rlexp job runs."""
    return bool(args.help or args.hydra_help or args.info or args.shell_completion
                or args.experimental_rerun)


PROG = "python -m rlexp"
# What --version names: (distribution, name shown).
VERSIONS = (("rlexp", "rlexp"), ("google-tunix", "Tunix"), ("jax", "JAX"), ("hydra-core", "Hydra"))


def versions_line() -> str:
    """'rlexp 0.1.0 (Tunix 0.1.7, ...)' from package metadata: importing them takes seconds."""
    from rlexp.base.private_apis import installed_version as of
    (first, name), *rest = VERSIONS
    return f"{name} {of(first)} ({', '.join(f'{n} {of(d)}' for d, n in rest)})"


def usage_error(message: str, argv: Sequence[str]) -> str:
    """argparse's complaint -> one line naming the fix (usually -m typed after an override)."""
    flags = [a for a in argv if a in ("-m", "--multirun")]
    if message.startswith("unrecognized arguments") and flags:
        rest = [a for a in argv if a not in ("-m", "--multirun")]
        return (f"{message}: put -m/--multirun first, before the overrides: "
                f"{' '.join([PROG, flags[0], *rest])}")
    if message.startswith("unrecognized arguments") and any(
            not a.startswith("-") for a in message.split(":", 1)[-1].split()):
        return (f"{message}: put the options (--cfg, -cn, ...) before the overrides "
                f"(see {PROG} --help)")
    return f"{message} (see {PROG} --help)"


def parse_args(argv: Sequence[str]) -> Any:
    """Hydra's own argument parser: UserError for a mistake; --version exits 0."""
    from hydra._internal.utils import get_args_parser
    argv = list(argv)
    if "--version" in argv[:argv.index("--") if "--" in argv else None]:
        print(versions_line(), flush=True)  # instead of Hydra's own "Hydra 1.3.8"
        raise SystemExit(0)
    parser = get_args_parser()
    parser.prog = PROG

    def error(message: str) -> NoReturn:
        raise UserError(usage_error(message, argv))

    parser.error = error  # type: ignore[method-assign]
    args = parser.parse_args(argv)
    # Hydra's own check (hydra/_internal/utils.py _run_hydra) raises a ValueError, traceback
    # and all, once the app starts: said here in one line.
    if sum(map(bool, (args.run, args.multirun, args.cfg, args.info, args.shell_completion))) > 1:
        raise UserError("only one of --run, -m/--multirun, --cfg, --info and "
                        f"--shell-completion at a time (see {PROG} --help)")
    return args
