"""Every private name of a library other than Tunix that rlexp relies on, in one list.

rlexp's start-up shortcuts (rlexp.launch.fast_start, launchers/hydra_plugins/rlexp_presets/,
rlexp.base.runtime, rlexp.engine.tunix_patches) use public APIs where one exists: Hydra's
public OmegaConf.update for a job's swept values, `hydra.core.plugins.Plugins.instance()` for a
worker's plugin registry, MLflow's `Dataset.to_dict()`, `fsspec.core.strip_protocol`. The
names below have no public equivalent. They were read from the versions in `checked`;
`problems()` checks them against what is installed without running anything, and the fast
test tests/test_private_apis.py runs it (and checks that no other module of src/ or
launchers/ names them), so an upgrade that renames one fails there, naming it. Every shortcut
is off with RLEXP_FAST_START=0 (rlexp.base.runtime.fast_start_enabled), which leaves each
name below unused except Hydra's command-line parser and the basic sweeper's class (the
default hydra/sweeper option subclasses it either way). Tunix's private names are listed in
rlexp.engine.tunix_names.

This module is also the one place that calls Python's own private exit functions
(`finish_like_the_interpreter`).
"""

from __future__ import annotations

import atexit
import dataclasses
import importlib
import importlib.util
import inspect
import platform
import threading
from importlib.metadata import PackageNotFoundError, version
from typing import Any


@dataclasses.dataclass(frozen=True)
class PrivateApi:
    # The distribution it comes from ("python" for the standard library).
    library: str
    # The version it was read from.
    checked: str
    # "module" (a module global) or "module:Class" (a class attribute or method).
    owner: str
    # The attribute, function, class or global.
    name: str
    # function (callable; `params` checked) | global (a module global of type `shape`) |
    # class | package (a package whose __init__.py rlexp can skip).
    kind: str
    # Positional parameters rlexp passes, in this order (after self); None = not checked.
    params: tuple[str, ...] | None = None
    # global: the type the value must have.
    shape: type | None = None
    # A function or method of the owner ("launch", "Class.method") that must still name it
    # when it runs, so that setting or patching the name changes what that code does.
    read_by: str | None = None
    # Where rlexp uses it.
    used_by: str = ""
    # What it does for rlexp, and why no public API does it.
    why: str = ""

    def label(self) -> str:
        return f"{self.owner.replace(':', '.')}.{self.name}"

_PYTHON = "3.11.7"
_HYDRA = "1.3.8"
_JOBLIB_PLUGIN = "1.2.0"
_JOBLIB = "1.6.0"
_JAX = "0.10.2"
_PLUGIN = "launchers/hydra_plugins/rlexp_presets/joblib_launcher.py"
_CORE = "hydra_plugins.hydra_joblib_launcher._core"

NAMES: tuple[PrivateApi, ...] = (
    PrivateApi("python", _PYTHON, "threading", "_shutdown", "function", (),
               used_by="rlexp.base.private_apis.finish_like_the_interpreter (exit_now)",
               why="what Py_FinalizeEx does first: threading's own exit callbacks (which stop "
                   "concurrent.futures' idle workers), then a join of every non-daemon thread; "
                   "no public function runs those callbacks"),
    PrivateApi("python", _PYTHON, "atexit", "_run_exitfuncs", "function",
               used_by="rlexp.base.private_apis.finish_like_the_interpreter (exit_now)",
               why="runs every exit handler (MLflow's, loky's, logging's, JAX's) before "
                   "os._exit skips the interpreter's teardown; sys.exit would run them too, "
                   "and then the teardown (1-2 s)"),
    PrivateApi("python", _PYTHON, "multiprocessing.forkserver", "ensure_running", "function",
               (), used_by=f"{_PLUGIN} start_fork_server",
               why="starts the fork server (and its preload) now rather than at the first "
                   "worker, so its imports overlap pre-flight"),
    PrivateApi("hydra-core", _HYDRA, "hydra._internal.utils", "get_args_parser", "function",
               (), used_by="rlexp.launch.fast_start.launches_joblib, rlexp.launch.preflight",
               why="reads the command line exactly as `python -m rlexp` will (-m, --cfg, "
                   "-cn/-cp/-cd) before Hydra runs"),
    PrivateApi("hydra-core", _HYDRA, "hydra._internal.core_plugins.basic_sweeper",
               "BasicSweeperConf", "class",
               used_by="launchers/hydra_plugins/rlexp_presets/config.py",
               why="hydra/sweeper=basic re-stored with rlexp's sweeper as its _target_"),
    PrivateApi("hydra-core", _HYDRA, "hydra._internal.core_plugins.basic_sweeper:BasicSweeper",
               "validate_batch_is_legal", "function", ("batch",), read_by="BasicSweeper.sweep",
               used_by="launchers/hydra_plugins/rlexp_presets/sweeper.py",
               why="the basic sweeper (only in hydra._internal) composes every job a second "
                   "time before launching it; rlexp's subclass skips jobs pre-flight checked"),
    PrivateApi("hydra-joblib-launcher", _JOBLIB_PLUGIN, _CORE, "execute_job", "function",
               ("idx", "overrides", "hydra_context", "config", "task_function",
                "singleton_state"), read_by="launch", used_by=f"{_PLUGIN} RlexpJoblibLauncher",
               why="what the plugin's launch() sends to the workers; set to rlexp's while it "
                   "launches so a worker keeps its plugin registry from one job to the next "
                   "(the plugin has no hook for the worker side)"),
    PrivateApi("hydra-joblib-launcher", _JOBLIB_PLUGIN, _CORE, "process_joblib_cfg", "function",
               ("joblib_cfg",), used_by=f"{_PLUGIN} parallel_kwargs",
               why="the joblib.Parallel arguments the plugin's launch() uses, so the warm-up "
                   "makes the executor launch() then reuses"),
    PrivateApi("joblib", _JOBLIB, "joblib.externals.loky.process_executor",
               "_MAX_MEMORY_LEAK_SIZE", "global", shape=int, read_by="_process_worker",
               used_by=f"{_PLUGIN} import_engine",
               why="loky replaces a worker that grew 300 MB after its first task; a warmed "
                   "worker's first job grows it by more (JAX's backend, the model)"),
    PrivateApi("joblib", _JOBLIB, "joblib.externals.loky.backend.context", "set_start_method",
               "function", ("method", "force"), used_by=f"{_PLUGIN} use_fork_server",
               why="loky's process-wide default start method (forkserver): Hydra's launch() "
                   "builds joblib.Parallel(backend='loky') with no context of its own"),
    PrivateApi("jax", _JAX, "jax._src.xla_bridge", "_backends", "global", shape=dict,
               used_by="rlexp.planning.hardware._backend_started, "
                       "rlexp.planning.pathways",
               why="whether JAX already made a backend (XLA_FLAGS and JAX_PLATFORMS are read "
                   "once, then ignored); jax.devices() would start one to answer"),
    PrivateApi("jax", _JAX, "jax._src.distributed", "global_state", "global",
               used_by="rlexp.planning.hardware._dead_processes",
               why="names the lost process of a multi-controller run from the coordination "
                   "service's live nodes (client.get_live_nodes); jax.distributed has no "
                   "public call that lists them"),
    PrivateApi("google-tunix", "0.1.7", "tunix", "__init__", "package",
               used_by="rlexp.engine.tunix_patches.skip_tunix_init",
               why="tunix/__init__.py imports every trainer Tunix ships; the package module is "
                   "made from its spec without running it (tests/test_tunix_contract.py runs "
                   "the top-level API through it)"),
)


def finish_like_the_interpreter() -> None:
    """The start of Python's own shutdown, by the same calls: threading's exit callbacks and
    a join of the non-daemon threads, then every atexit handler. rlexp.base.runtime.exit_now
    then flushes and leaves with os._exit, skipping the rest (the teardown)."""

    threading._shutdown()
    atexit._run_exitfuncs()


def _code_names(code: Any) -> set[str]:
    """Every global and attribute name a code object reads, nested functions included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


def _resolve(owner: str) -> Any:
    module_name, _, cls = owner.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, cls) if cls else module


def check(entry: PrivateApi) -> str | None:
    """None when the installed library has `entry` as rlexp uses it; else why not."""
    if entry.kind == "package":  # found, never imported (that would run its __init__.py)
        spec = importlib.util.find_spec(entry.owner)
        if spec is None or not spec.submodule_search_locations:
            return "is no longer an installed package"
        if not hasattr(spec.loader, "exec_module"):
            return "has no loader that can run __init__.py later"
        return None
    try:
        owner = _resolve(entry.owner)
    except (ImportError, AttributeError) as exc:
        return f"{entry.owner} is gone ({type(exc).__name__}: {exc})"
    if not hasattr(owner, entry.name):
        return "is gone"
    value = inspect.getattr_static(owner, entry.name)
    if entry.kind == "class" and not inspect.isclass(value):
        return "is no longer a class"
    if entry.kind == "global" and entry.shape is not None and not isinstance(value, entry.shape):
        return f"is no longer a {entry.shape.__name__} (found {type(value).__name__})"
    if entry.kind == "function":
        if not callable(getattr(owner, entry.name)):
            return "is no longer callable"
        if entry.params is not None:
            try:
                signature = inspect.signature(getattr(owner, entry.name))
            except ValueError:  # a builtin without a signature: callable is all there is
                signature = None
            if signature is not None:
                params = [p.name for p in signature.parameters.values()
                          if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
                got = tuple(params[: len(entry.params)])
                if got != entry.params:
                    return f"parameters changed: expected {entry.params}, found {got}"
    if entry.read_by:
        module = importlib.import_module(entry.owner.partition(":")[0])
        reader: Any = module
        for part in entry.read_by.split("."):
            reader = getattr(reader, part, None)
        code = getattr(inspect.unwrap(reader), "__code__", None) if reader is not None else None
        if code is None:
            return f"its reader {entry.read_by} is gone"
        if entry.name not in _code_names(code):
            return f"is no longer read by {entry.read_by}"
    return None


def problems() -> list[str]:
    """One line per name that no longer matches (empty when all hold)."""
    return [f"{entry.label()} {why} (checked with {entry.library} {entry.checked}, "
            f"installed {installed_version(entry.library)})"
            for entry in NAMES if (why := check(entry))]


def installed_version(library: str) -> str:

    if library == "python":
        return platform.python_version()
    try:
        return version(library)
    except PackageNotFoundError:
        return "not installed"
