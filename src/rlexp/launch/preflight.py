"""Pre-flight: compose and validate every job of a command before Hydra runs anything. Hydra reports
composition errors over several lines with exit code 1, lets `+key=value` through for keys the
schema lacks, and in a multirun finds a bad value only when that job starts; here (cheap: no JAX, no
MLflow) the first mistake is one line and exit code 2."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import itertools
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from hydra import compose, initialize_config_dir, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
from omegaconf import OmegaConf
from omegaconf.errors import (ConfigAttributeError, ConfigKeyError, ConfigTypeError,
                              OmegaConfBaseException, ValidationError)

from rlexp.base.errors import UserError
from rlexp.config.convert import (VETTED_ENV, config_digest, one_line_omegaconf_error, to_config,
                                  unknown_key_message)
from rlexp.config.naming import sweep_name
from rlexp.config.paths import conf_dir
from rlexp.config.rollouts import rollout_spec
from rlexp.config.schema import Config, RewardFunctionConfig
from rlexp.job.guards import noop_warning
from rlexp.launch.checks import LAUNCHER_NEEDS, CheckContext, check_command, check_job, refuse_unfit
from rlexp.launch.args import hydra_only, parse_args
from rlexp.planning.hardware import platform_env, setup_platform
from rlexp.planning.plan import Plan

MAX_PRODUCT = 256  # past this many jobs, validate each swept value once, not the product


@dataclass
class Preflight:
    multirun: bool  # true for -m / --multirun or a sweep file that sets hydra.mode=MULTIRUN
    # Every job's validated config (all of them, or one per swept value past MAX_PRODUCT).
    jobs: list[Config] = field(default_factory=list)
    # Swept keys -> their values (empty for a single run).
    swept: dict[str, list[str]] = field(default_factory=dict)
    print_only: bool = False  # --cfg/--resolve: Hydra only prints the config, nothing runs
    # Each job's overrides, as the launcher would pass them (parallel to `jobs`).
    job_overrides: list[list[str]] = field(default_factory=list)
    overrides: list[str] = field(default_factory=list)  # the command's overrides as typed
    out_dir: Path | None = None  # hydra.run.dir, or hydra.sweep.dir for a sweep
    size: int = 1  # jobs launched: every combination (`jobs` may sample), or n_trials
    trials: bool = False  # true when `size` is a sweeper's trial count (hydra.sweeper.n_trials)
    # Each job's plan (parallel to `jobs`; empty for --cfg).
    plans: list[Plan | None] = field(default_factory=list)
    context: CheckContext = field(default_factory=CheckContext)

    @property
    def dry_run(self) -> bool:
        """Every job is a dry run: the plans are printed here, Hydra never launches."""
        return bool(self.jobs) and not self.print_only and all(j.run.dry_run for j in self.jobs)


def explain(exc: BaseException, overrides: list[str]) -> str:
    """Hydra/OmegaConf composition error -> one line naming the key and valid choices."""
    if isinstance(exc, UserError):
        return str(exc)
    if isinstance(exc, OverrideParseException):
        line = f"cannot parse override {exc.override!r}: {exc.message.splitlines()[0]}"
        key, sep, value = (exc.override or "").partition("=")
        if sep and value[:1] not in ("'", '"') and any(c in value for c in "?&="):
            # A URL's query (`?a=b&c=d`): Hydra's grammar takes '=' and '&' only when quoted.
            line += f"; quote the value: '{key}=\"{value}\"'"
        return line
    missing = getattr(exc, "missing_cfg_file", None) or ""
    if isinstance(exc, MissingConfigException) and missing.startswith("hydra/launcher/"):
        # A launcher preset whose plugin is absent ("Could not load 'hydra/launcher/ray'").
        name = missing.rsplit("/", 1)[-1]
        line = f"hydra/launcher needs the '{name}' launcher plugin, which is not installed: "
        if name in LAUNCHER_NEEDS:
            return line + LAUNCHER_NEEDS[name][1]
        options = f"; valid choices are: {', '.join(sorted(exc.options))}" if exc.options else ""
        if exc.options:  # most likely a typo of one of these
            return (f"hydra/launcher={name} is not an option of group 'hydra/launcher'"
                    f"{options} (another launcher needs its Hydra plugin installed)")
        return line + "install its Hydra plugin"
    if isinstance(exc, MissingConfigException) and exc.options is not None:
        group, bad = missing.rsplit("/", 1)[0], missing.rsplit("/", 1)[-1]
        return (f"{group}={bad} is not an option of group '{group}'; valid choices are: "
                f"{', '.join(sorted(exc.options))}")
    cause = exc.__cause__ or exc.__context__ or exc
    key = getattr(cause, "full_key", None)
    if isinstance(cause, (ConfigAttributeError, ConfigKeyError)) and key:
        item = getattr(cause, "object_type", None)
        if item is RewardFunctionConfig and "." not in cause.full_key:  # a list entry's typo
            valid = ", ".join(f.name for f in dataclasses.fields(item))
            return (f"reward.functions: {cause.full_key} is not a key of an entry; valid keys "
                    f"are: {valid}")
        return unknown_key_message(cause.full_key)
    if isinstance(cause, ConfigTypeError) and key and "does not support deletion" in str(cause):
        return (f"~{key} is invalid: the schema's keys cannot be deleted; set a value instead "
                f"({key}=VALUE)")
    if isinstance(cause, ValidationError):
        value = next((o.split("=", 1)[1] for o in overrides
                      if key and o.lstrip("+~").split("=")[0] == key), None)
        msg = str(cause.msg).splitlines()[0] if hasattr(cause, "msg") else str(cause)
        return f"{key}={value!r} is invalid: {msg}" if key else msg
    lines = [line.strip() for line in str(exc).strip().splitlines()]
    text = " ".join(line for line in lines if line and "HYDRA_FULL_ERROR" not in line)
    if "Could not override" in text and "append" in text:
        return unknown_key_message(text.split("'")[1])
    return text or one_line_omegaconf_error(exc)


def _expand(overrides: list[str], sweeper_params: dict) -> tuple[list[list[str]], dict, int]:
    """Job override lists as BasicSweeper makes them, the swept values, and the job count."""
    params = [f"{k}={v}" for k, v in sweeper_params.items()]
    parsed = OverridesParser.create().parse_overrides(params + overrides)
    lists: dict[str, list[str]] = {}
    swept: dict[str, list[str]] = {}
    for o in parsed:
        key = o.get_key_element()
        if o.is_sweep_override():
            if o.is_discrete_sweep():
                values = list(o.sweep_string_iterator())
                lists[key] = [f"{key}={v}" for v in values]
                swept[key.lstrip("+~")] = values
            else:  # range/interval sweeps (Optuna): validate the config without the key
                lists[key] = []
                swept[key.lstrip("+~")] = [o.input_line or key]
        else:
            lists[key] = [f"{key}={o.get_value_element_as_str()}"]
            swept.pop(key.lstrip("+~"), None)
    groups = [v if v else [None] for v in lists.values()]
    product_size = math.prod(len(g) for g in groups)
    if product_size <= MAX_PRODUCT:
        combos = itertools.product(*groups)
    else:  # one job per swept value, the other keys at their first value
        firsts = [g[0] for g in groups]
        combos = [firsts[:i] + [v] + firsts[i + 1:] for i, g in enumerate(groups) for v in g]
    jobs = [[x for x in combo if x is not None] for combo in combos]
    return jobs, swept, product_size


def primary_config_dir(config_path: str | None) -> str:
    """The primary config dir of `python -m rlexp [-cp PATH]`, as Hydra's main computes it
    (hydra/_internal/utils.py compute_search_path_dir, 1.3)."""
    if config_path is None:
        return str(conf_dir())
    if config_path.startswith("pkg://") or os.path.isabs(config_path):
        return config_path
    return os.path.normpath(os.path.join(os.path.realpath(Path(__file__).parents[1]), config_path))


def quote_override(value: str) -> str:
    """`value` quoted in Hydra's override grammar (1.3)."""
    escaped = re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), value)
    return f"'{escaped}'"


def with_config_dir(overrides: list[str], config_dir: str | None,
                    own_searchpath: list[str]) -> list[str]:
    """`overrides` with --config-dir first in `hydra.searchpath`, the public form of what Hydra's
    main does with it (hydra/_internal/utils.py _run_hydra, 1.3), before the primary config's
    own entries (`own_searchpath`) or the command's `hydra.searchpath=[...]`."""
    if config_dir is None:
        return overrides
    if any(o.startswith("hydra.searchpath=") for o in overrides):
        parsed = OverridesParser.create().parse_overrides(overrides)
        for i, o in enumerate(parsed):
            if o.get_key_element() == "hydra.searchpath":
                value = o.value()
                if not isinstance(value, list):
                    return overrides
                return [*overrides[:i], _searchpath([config_dir, *value]), *overrides[i + 1:]]
    return [*overrides, _searchpath([config_dir, *own_searchpath])]


def _searchpath(entries: list[Any]) -> str:
    return f"hydra.searchpath=[{','.join(quote_override(str(e)) for e in entries)}]"


def _initialize(primary: str) -> Any:
    """Hydra's public initialize for a primary dir: a file path or pkg://module."""
    if primary.startswith("pkg://"):
        module = primary[len("pkg://"):].replace("/", ".")
        return initialize_config_module(module, job_name="rlexp", version_base="1.3")
    return initialize_config_dir(primary, job_name="rlexp", version_base="1.3")


def _own_searchpath(config_name: str, schema: bool = False) -> list[str] | None:
    """The primary config's `hydra.searchpath` (`structured://` only if `schema`), or None."""
    sources = GlobalHydra.instance().config_loader().get_sources()
    for source in sources if schema else sources[:-1]:
        if source.is_config(config_name):
            node = OmegaConf.select(source.load_config(config_name).config, "hydra.searchpath")
            return [str(e) for e in node] if OmegaConf.is_list(node) else []
    return None


@contextlib.contextmanager
def search_path_context(args: Any, config_name: str) -> Iterator[Callable[[list[str]], list[str]]]:
    """Hydra initialized with the search path `python -m rlexp` gets; yields what each
    compose's overrides go through. A primary config (-cn) only the --config-dir holds makes
    that dir the primary one, the packaged dir first in `hydra.searchpath`."""
    primary = primary_config_dir(args.config_path)
    if args.config_dir is None:
        with _initialize(primary):
            yield lambda overrides: overrides
        return
    extra = os.path.abspath(args.config_dir)  # as Hydra's main does
    if not os.path.isdir(extra):
        raise UserError(f"--config-dir {args.config_dir}: directory not found")
    with contextlib.ExitStack() as stack:
        stack.enter_context(_initialize(primary))
        own = _own_searchpath(config_name)
        yaml = config_name if config_name.endswith(".yaml") else f"{config_name}.yaml"
        if own is None and os.path.isfile(os.path.join(extra, yaml)):
            stack.close()
            stack.enter_context(_initialize(extra))
            first = primary if primary.startswith("pkg://") else f"file://{primary}"
            own = _own_searchpath(config_name)
        else:
            first = f"file://{extra}"
            own = own if own is not None else _own_searchpath(config_name, schema=True)
        yield lambda overrides: with_config_dir(overrides, first, own or [])


class JobComposer:
    """Hydra's compose() for each job of a sweep, without composing what is already known
    (~0.15-0.2 s a compose on a 2-core CPU: a 256-job sweep took ~45 s before its first job).
    A job that differs from one composed before only in plain scalar values (`train.seed=3`)
    gets them set as compose() does; anything else (a group choice, +/++/~, a list or dict, an
    @package) composes in full. tests/test_cli.py checks the two agree."""

    reuse = True  # false: every job composes in full (the reference the shortcut is tested against)

    def __init__(self, config_name: str) -> None:
        self.config_name = config_name
        # Group choices and override keys -> (that job's parsed overrides, its config).
        self.composed: dict[tuple, tuple[list[Any], Any]] = {}

    def compose(self, overrides: list[str]) -> Any:
        parsed = OverridesParser.create().parse_overrides(overrides)
        plain = [not (o.package is not None or o.is_add() or o.is_force_add() or o.is_delete()
                      or "." not in o.key_or_group
                      or isinstance(o.value(), (dict, list))) for o in parsed]
        shape = (tuple(o.key_or_group for o in parsed),
                 tuple(o.input_line for o, p in zip(parsed, plain) if not p))
        known = self.composed.get(shape) if self.reuse else None
        if known is None:
            cfg = compose(self.config_name, overrides=overrides)
            self.composed.setdefault(shape, (parsed, cfg))
            return cfg
        before, base = known
        cfg = copy.deepcopy(base)
        # The same shape: only plain overrides can differ from the job composed before. Set as
        # Hydra's compose() does after merging the files (hydra/_internal/config_loader_impl.py,
        # 1.3), errors raised as its own so pre-flight reports them the same way.
        for override in (o for o, b in zip(parsed, before) if o.input_line != b.input_line):
            try:
                OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
            except (ConfigAttributeError, ConfigKeyError) as ex:
                raise ConfigCompositionException(
                    f"Could not override '{override.key_or_group}'."
                    f"\nTo append to your config use +{override.input_line}") from ex
            except OmegaConfBaseException as ex:
                raise ConfigCompositionException(f"Error merging override {override.input_line}"
                                                 ).with_traceback(sys.exc_info()[2]) from ex
        return cfg


def preflight(argv: list[str]) -> Preflight | None:
    """Validate every job the command would run. None when Hydra only prints help/info."""
    args = parse_args(argv)
    if hydra_only(args):
        return None
    overrides: list[str] = list(args.overrides)
    config_name = args.config_name or "config"
    os.environ.pop(VETTED_ENV, None)  # another launch's: this pre-flight validates every job
    GlobalHydra.instance().clear()
    try:
        with search_path_context(args, config_name) as searchpath:
            base, multirun, sweeper_params = _compose_first(args, config_name, overrides,
                                                            searchpath)
            out = None
            context = CheckContext()
            if not args.cfg:
                out = OmegaConf.select(base, "hydra.sweep.dir" if multirun else "hydra.run.dir")
                if multirun and not any(o.startswith("hydra.sweep.dir=") for o in overrides):
                    out = str(Path(str(out)).parent / sweep_name(overrides))
                context = check_command(Path(out), base, multirun)  # launch.checks.COMMAND_CHECKS
            jobs, swept, size = _expand(overrides, sweeper_params)
            trials = OmegaConf.select(base, "hydra.sweeper.n_trials", default=None) \
                if multirun else None
            configs, plans = [], []
            composer = JobComposer(config_name)
            for job in jobs:
                # hydra.searchpath decides which options exist, so it stays in every compose.
                kept = [o for o in job if not o.lstrip("+~").startswith("hydra")
                        or o.lstrip("+~").startswith("hydra.searchpath")]
                cfg = to_config(composer.compose(searchpath(kept)))
                if not args.cfg:  # launch.checks.CHECKS, in order (--cfg only prints)
                    plans.append(check_job(cfg, context))
                configs.append(cfg)
    except Exception as exc:  # composition and validation errors end here, as one line
        raise UserError(explain(exc, overrides)) from None
    finally:
        GlobalHydra.instance().clear()
    return Preflight(multirun=multirun, jobs=configs, swept=swept, print_only=bool(args.cfg),
                     job_overrides=jobs, overrides=overrides,
                     out_dir=Path(str(out)) if out else None, plans=plans, context=context,
                     size=int(trials) if trials is not None else size, trials=trials is not None)


def _refuse_repeated_keys(parsed: list[Any]) -> None:
    """A key given twice: Hydra keeps the last value, but the run's name and its logged
    overrides would carry both (algo.beta=0.1 algo.beta=0.2 ran beta=0.2 as 'beta0.1-beta0.2')."""
    seen: dict[str, str] = {}
    for o in parsed:
        key = o.get_key_element().lstrip("+~")
        if key in seen:
            raise UserError(f"{key} is given twice ({seen[key]}, {o.input_line}): give it once "
                            f"(several values sweep with -m: {key}=A,B)")
        seen[key] = o.input_line


def _refuse_deleted_choices(parsed: list[Any], config_name: str, firsts: list[str],
                            searchpath: Callable[[list[str]], list[str]]) -> None:
    """`~algo` deletes the choice of a group that fills one of the schema's nodes: the run
    would train with the schema's built-in values under no name (Hydra's semantics). Groups
    that only set values across nodes (recipe, model_rollout) and Hydra's own may go."""
    nodes = {f.name for f in dataclasses.fields(Config)}
    deleted = [o.get_key_element()[1:] for o in parsed
               if o.is_delete() and o.get_key_element()[1:] in nodes]
    if not deleted:
        return
    kept = [o for o in firsts if not (o.startswith("~") and o[1:].split("=", 1)[0] in nodes)]
    before = compose(config_name, overrides=searchpath(kept), return_hydra_config=True)
    for group in deleted:
        choice = OmegaConf.select(before, f"hydra.runtime.choices.{group}", default=None)
        options = GlobalHydra.instance().config_loader().get_group_options(group)
        if choice is not None and choice in options:
            raise UserError(f"~{group} is invalid: it removes the {group} group's choice "
                            f"({choice}), leaving the schema's built-in values; choose one: "
                            f"{group}=NAME (valid choices are: {', '.join(sorted(options))})")


def _compose_first(args: Any, config_name: str, overrides: list[str],
                   searchpath: Callable[[list[str]], list[str]]) -> tuple[Any, bool, dict]:
    """The config of each sweep's first value, with whether it is a multirun and its sweeper's."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    _refuse_repeated_keys(parsed)
    firsts = [f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}"
              if o.is_sweep_override() and o.is_discrete_sweep() else o.input_line
              for o in parsed if not (o.is_sweep_override() and not o.is_discrete_sweep())]
    base = compose(config_name, overrides=searchpath(firsts), return_hydra_config=True)
    _refuse_deleted_choices(parsed, config_name, firsts, searchpath)
    multirun = bool(args.multirun) or str(base.hydra.mode) == "RunMode.MULTIRUN" \
        or OmegaConf.select(base, "hydra.mode") == "MULTIRUN"
    params_node = OmegaConf.select(base, "hydra.sweeper.params", default=None)
    sweeper_params = OmegaConf.to_container(params_node) if multirun and params_node else {}
    if not multirun and any(o.is_sweep_override() for o in parsed):
        sweep = next(o.input_line for o in parsed if o.is_sweep_override())
        raise UserError(f"{sweep} sweeps several values: add -m (multirun) to run them all")
    return base, multirun, sweeper_params


def warn_noop(pre: Preflight) -> None:
    """The on-policy warning (rlexp.job.guards.noop_warning), once per command."""
    if warning := noop_warning(pre.jobs, pre.overrides, pre.swept, pre.multirun):
        print(f"rlexp: warning: {warning}", file=sys.stderr, flush=True)


def before_launch(pre: Preflight) -> None:
    """What must happen in the launching process, once, before any job starts."""
    if pre.print_only:
        return
    # The jobs validated here are not validated again (config.convert.to_config).
    os.environ[VETTED_ENV] = " ".join(config_digest(cfg) for cfg in pre.jobs)
    for cfg, plan in zip(pre.jobs, pre.plans):
        if cfg.run.dry_run and plan is not None:  # a dry-run job of a sweep that launches
            refuse_unfit(plan)  # others: it prints its plan in the job, refused here
    warn_noop(pre)
    # XLA_FLAGS and GPU memory fraction precede JAX's backend; other settings: in the job.
    shares = [rollout_spec(j).gpu_share(j) for j in pre.jobs]
    envs = {tuple(sorted(platform_env(j.hardware, os.environ, s).items()))
            for j, s in zip(pre.jobs, shares)}
    if len(envs) == 1:  # a sweep's launching process: each job checks its own launch
        setup_platform(pre.jobs[0].hardware, job=not pre.multirun, vllm_share=shares[0])
