"""Every private name of a library rlexp relies on, and the one checker for all of them. A
private name is an underscore name or anything under a private module (`jax._src`), used only
where no public API does the job; each is listed here (Tunix's in rlexp.engine.tunix_names) with
where, why and the version read. tests/test_private_apis.py `check`s every entry and fails on any
unlisted private use in src/ or launchers/."""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Iterator


@dataclasses.dataclass(frozen=True)
class PrivateApi:
    library: str  # the distribution it comes from ("python" for the standard library)
    checked: str  # the version it was read from
    owner: str  # "module" (a module global) or "module:Class" (a class attribute or method)
    name: str  # the attribute, function, class, dataclass field or global
    # function | method | global (of type `shape`) | class | attribute (set as self.<name> in
    # the class or a base) | field (of a dataclass) | property.
    kind: str
    # Parameters rlexp passes (after self; None = not checked), by position or by keyword.
    params: tuple[str, ...] | None = None
    shape: type | None = None  # global: the type the value must have
    # A function of the owner ("launch", "Class.method") that must still read the name, so
    # that patching it changes what that code does.
    read_by: str | None = None
    used_by: str = ""  # where rlexp uses it (files or dotted rlexp names)
    why: str = ""  # what it does for rlexp, and why no public API does it
    positional: bool = True  # how `params` are passed (see params)

    def label(self) -> str:
        return f"{self.owner.replace(':', '.')}.{self.name}"


_HYDRA = "1.3.8"
_JAX = "0.10.2"

NAMES: tuple[PrivateApi, ...] = (
    PrivateApi("hydra-core", _HYDRA, "hydra._internal.utils", "get_args_parser", "function",
               (), used_by="rlexp.launch.args.parse_args",
               why="reads the command line exactly as `python -m rlexp` will (-m, --cfg, "
                   "-cn/-cp/-cd) before Hydra runs"),
    PrivateApi("jax", _JAX, "jax._src.xla_bridge", "_backends", "global", shape=dict,
               used_by="rlexp.planning.hardware._backend_started, rlexp.planning.pathways",
               why="whether JAX already made a backend (XLA_FLAGS and JAX_PLATFORMS are read "
                   "once, then ignored); jax.devices() would start one to answer"),
    PrivateApi("jax", _JAX, "jax._src.distributed", "global_state", "global",
               used_by="rlexp.planning.hardware._dead_processes",
               why="names the lost process of a multi-controller run from the coordination "
                   "service's live nodes (client.get_live_nodes); jax.distributed has no "
                   "public call that lists them"),
)


def _code_names(code: Any) -> set[str]:
    """Every global and attribute name a code object reads, nested functions included."""
    names = set(code.co_names)
    for const in code.co_consts:
        if inspect.iscode(const):
            names |= _code_names(const)
    return names


def _self_targets(node: ast.AST) -> Iterator[str]:
    """What node assigns to self: `self.a = ...` "a", `self.a.b = ...` "a.b" (tuples unpacked)."""
    for child in ast.walk(node):
        targets = child.targets if isinstance(child, ast.Assign) else \
            [child.target] if isinstance(child, ast.AnnAssign) and child.value else []
        for target in targets:
            for leaf in target.elts if isinstance(target, ast.Tuple) else [target]:
                parts = []
                while isinstance(leaf, ast.Attribute):
                    parts.append(leaf.attr)
                    leaf = leaf.value
                if parts and isinstance(leaf, ast.Name) and leaf.id == "self":
                    yield ".".join(reversed(parts))


@functools.cache
def _assigned_by_class(file: str) -> dict[str, frozenset[str]]:
    """{class __qualname__: what its source assigns to self} for one file, parsed once: the Tunix
    check takes 0.04 s instead of 0.19 s with getsource per class (2-core CPU, median of 3)."""
    found: dict[str, frozenset[str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                found[prefix + child.name] = frozenset(_self_targets(child))
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, f"{prefix}{child.name}.<locals>.")

    visit(ast.parse(Path(file).read_bytes()), "")
    return found


def _assigns(cls: type, name: str) -> bool:
    """Some class in cls's MRO, from the same library, assigns self.<name> in its source."""
    top = cls.__module__.split(".")[0]
    for klass in inspect.getmro(cls):
        if klass.__module__.split(".")[0] != top:
            continue
        try:
            file = inspect.getsourcefile(klass)
        except TypeError:  # a builtin
            continue
        if file and name in _assigned_by_class(file).get(klass.__qualname__, ()):
            return True
    return False


def _params(entry: PrivateApi, owner: Any) -> str | None:
    try:
        signature = inspect.signature(getattr(owner, entry.name))
    except ValueError:  # a builtin without a signature: callable is all there is
        return None
    params = [p for p in signature.parameters.values()
              if p.name != "self" and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    if entry.positional:
        got = tuple(p.name for p in params[: len(entry.params or ())])
        if got != entry.params:
            return f"positional parameters changed: expected {entry.params}, found {got}"
        return None
    missing = [n for n in entry.params or () if n not in {p.name for p in params}]
    return f"lost parameter(s) {', '.join(missing)}" if missing else None


def check(entry: PrivateApi) -> str | None:
    """None when the installed library has `entry` as rlexp uses it; else why not."""
    module_name, _, cls = entry.owner.partition(":")
    try:
        module = importlib.import_module(module_name)
        owner = getattr(module, cls) if cls else module
    except (ImportError, AttributeError) as exc:
        return f"{entry.owner} is gone ({type(exc).__name__}: {exc})"
    if entry.kind == "attribute":
        return None if _assigns(owner, entry.name) else "is no longer set by the class"
    if entry.kind == "field":
        names = {f.name for f in dataclasses.fields(owner)}
        return None if entry.name in names else "is no longer a field"
    value = inspect.getattr_static(owner, entry.name, None)
    if value is None:
        return "is gone"
    if entry.kind == "property" and not isinstance(value, property):
        return "is no longer a property"
    if entry.kind == "class" and not inspect.isclass(value):
        return "is no longer a class"
    if entry.kind == "global" and entry.shape is not None and not isinstance(value, entry.shape):
        return f"is no longer a {entry.shape.__name__} (found {type(value).__name__})"
    if entry.kind in ("function", "method"):
        if not callable(getattr(owner, entry.name)):
            return "is no longer callable"
        if entry.params is not None and (why := _params(entry, owner)):
            return why
    if entry.read_by:
        reader: Any = module
        for part in entry.read_by.split("."):
            reader = getattr(reader, part, None)
        code = getattr(inspect.unwrap(reader), "__code__", None) if reader is not None else None
        if code is None:
            return f"its reader {entry.read_by} is gone"
        if entry.name not in _code_names(code):
            return f"is no longer read by {entry.read_by}"
    return None


def problems(names: tuple[PrivateApi, ...] = NAMES) -> list[str]:
    """One line per name that no longer matches (empty when all hold)."""
    return [f"{entry.label()} {why} (checked with {entry.library} {entry.checked}, "
            f"installed {installed_version(entry.library)})"
            for entry in names if (why := check(entry))]


def installed_version(library: str) -> str:
    if library == "python":
        return platform.python_version()
    try:
        return version(library)
    except PackageNotFoundError:
        return "not installed"
