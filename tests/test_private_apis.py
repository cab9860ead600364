"""The private names of libraries that rlexp relies on: each listed one still exists as rlexp
uses it (rlexp.base.private_apis.check), and no module of src/ or launchers/ uses one that is
not listed (an ast scan). Tunix's entries (rlexp.engine.tunix_names) are checked one by one in
tests/test_tunix_contract.py and count as listed here.

An upgrade that renames `get_args_parser` or turns `_backends` into a list fails here, in the
fast tier, naming it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import pytest

import rlexp
from rlexp.base import private_apis
from rlexp.base.private_apis import PrivateApi

SRC = Path(rlexp.__file__).resolve().parent
ROOT = SRC.parents[1]
LAUNCHERS = ROOT / "launchers"

# Underscore names a library documents as public: os._exit (the os module's docs) and the
# namedtuple methods (collections' docs: the underscore only avoids clashes with field names).
DOCUMENTED = {("os", "_exit")} | {(None, n) for n in ("_replace", "_asdict", "_fields", "_make")}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_module(module: str) -> bool:
    return module.split(".")[0] == "rlexp" or module.startswith("hydra_plugins.rlexp_")


def _assigned_private_names(tree: ast.AST) -> set[str]:
    """Private names a module defines (functions, classes, attributes it sets, variables)."""
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
    return {n for n in own if _private(n)}


def private_uses(source: str | ast.AST, own: set[str],
                 launcher: bool = False) -> list[tuple[int, str, str]]:
    """(line, module or "value:<expression>", name) of every private use of a foreign library
    in `source`: `from m import _x`, anything imported from a private module (`hydra._internal`,
    `jax._src`), `x._y` and `getattr(x, "_y")` where x is a foreign import, or a local value
    whose `_y` rlexp does not define itself (`own`); never self/cls. In a launcher, rlexp's own
    private names count too: a plugin uses rlexp's public functions only."""
    tree = ast.parse(source) if isinstance(source, str) else source
    bound: dict[str, str] = {}  # local name -> the module or object it was imported as
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                bound[(alias.asname or alias.name).split(".")[0]] = (
                    alias.name if alias.asname else alias.name.split(".")[0])
                if not _own_module(alias.name) and any(map(_private, alias.name.split("."))):
                    found.append((node.lineno, alias.name, ""))
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                bound[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                if _own_module(node.module):
                    if launcher and _private(alias.name):
                        found.append((node.lineno, node.module, alias.name))
                elif _private(alias.name) or any(map(_private, node.module.split("."))):
                    found.append((node.lineno, node.module, alias.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            value, name = node.value, node.attr
        elif (isinstance(node, ast.Call) and ast.unparse(node.func) in ("getattr", "hasattr")
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and isinstance(node.args[1].value, str)):
            value, name = node.args[0], node.args[1].value
        else:
            continue
        if not _private(name) or name.startswith("_rlexp"):  # _rlexp*: rlexp's own markers
            continue
        base = value
        while isinstance(base, (ast.Attribute, ast.Call, ast.Subscript)):
            base = base.func if isinstance(base, ast.Call) else base.value
        root = base.id if isinstance(base, ast.Name) else None
        if root in ("self", "cls"):
            continue
        origin = bound.get(root or "")
        # a module's attribute: its dotted name (`jax._src`); a local value's: the expression
        where = (ast.unparse(value).replace(root or "", origin, 1) if origin
                 else f"value:{ast.unparse(value)}")
        if (where, name) in DOCUMENTED or (None, name) in DOCUMENTED:
            continue
        if origin is not None and _own_module(origin):
            if launcher:
                found.append((node.lineno, where, name))
            continue
        if origin is not None or name not in own:
            found.append((node.lineno, where, name))
    return found


def _listed(where: str, name: str, entries: list[PrivateApi]) -> bool:
    """An entry covers the use: `from m import name` or `m.name` of its owner (module or
    class), a module on the way to its owner (`import hydra._internal.utils`, `jax._src`), or
    `value.name` of a local value (its type is unknown here: the name is matched)."""
    local = where.startswith("value:")
    dotted = f"{where}.{name}" if name else where
    for entry in entries:
        owner_module, _, cls = entry.owner.partition(":")
        if local and name == entry.name.split(".")[-1]:
            return True
        if not local and where == owner_module and name in (entry.name.split(".")[0], cls):
            return True
        if not local and where == entry.owner.replace(":", ".") and name == entry.name:
            return True  # Class._name
        if not local and (owner_module == dotted or owner_module.startswith(dotted + ".")):
            return True
    return False


def _all_entries() -> list[PrivateApi]:
    entries = list(private_apis.NAMES)
    if importlib.util.find_spec("tunix") is not None:  # the per-family names import Tunix
        from rlexp.engine import tunix_names

        entries += tunix_names.NAMES
    return entries


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py")) + sorted(LAUNCHERS.rglob("*.py"))


@pytest.mark.parametrize("entry", private_apis.NAMES, ids=lambda e: e.label())
def test_private_name_still_holds(entry):
    why = private_apis.check(entry)
    assert why is None, (f"{entry.label()} {why} (rlexp uses it in {entry.used_by}: "
                         f"{entry.why}; checked with {entry.library} {entry.checked}, installed "
                         f"{private_apis.installed_version(entry.library)})")


def test_every_check_can_fail():
    """A missing module or name, changed parameters, a global of another type, a reader that
    no longer reads it, a class that is not one, an attribute or field no longer set."""
    utils, bridge = "hydra._internal.utils", "jax._src.xla_bridge"
    check = private_apis.check
    assert "is gone" in check(PrivateApi("x", "0", "no_such_module", "f", "function"))
    assert check(PrivateApi("x", "0", utils, "no_such_name", "function")) == "is gone"
    changed = PrivateApi("x", "0", utils, "create_config_search_path", "function", ("path",))
    assert "positional parameters changed" in check(changed)
    by_keyword = PrivateApi("x", "0", utils, "compute_search_path_dir", "function",
                            ("config_path", "no_such_keyword"), positional=False)
    assert check(by_keyword) == "lost parameter(s) no_such_keyword"
    assert check(PrivateApi("x", "0", bridge, "_backends", "global", shape=str)) == \
        "is no longer a str (found dict)"
    unread = PrivateApi("x", "0", utils, "get_args_parser", "function",
                        read_by="create_config_search_path")
    assert check(unread) == "is no longer read by create_config_search_path"
    no_reader = PrivateApi("x", "0", utils, "get_args_parser", "function", read_by="nope")
    assert check(no_reader) == "its reader nope is gone"
    assert check(PrivateApi("x", "0", utils, "get_args_parser", "class")) == \
        "is no longer a class"
    unset = PrivateApi("x", "0", "omegaconf:DictConfig", "_no_such_attribute", "attribute")
    assert check(unset) == "is no longer set by the class"
    assert check(PrivateApi("x", "0", "rlexp.base.private_apis:PrivateApi", "nope", "field")) \
        == "is no longer a field"
    assert private_apis.problems() == []


class _Holder:
    def __init__(self):
        self.kept = 1
        self.config.temperature = 2.0
        first, self.pair = 3, 4
        self.bare: int  # annotated, never assigned


class _Child(_Holder):
    def later(self):
        self.typed: float = 5.0

        class Inner:  # its own class: not _Child's
            def __init__(self):
                self.inner = 6


def test_an_attribute_counts_when_a_class_of_the_mro_assigns_it_to_self():
    assigns = private_apis._assigns
    for name in ("kept", "config.temperature", "pair", "typed"):
        assert assigns(_Child, name), name
    for name in ("bare", "temperature", "config", "missing"):
        assert not assigns(_Child, name), name
    assert assigns(_Holder, "kept") and not assigns(_Holder, "typed")


def test_each_listed_name_is_used_where_the_list_says():
    """An entry whose use is gone is removed from the list (a file named in `used_by` that no
    longer names it)."""
    for entry in private_apis.NAMES:
        files = re.findall(r"[\w/]+\.py|rlexp(?:\.\w+)+", entry.used_by)
        paths = [ROOT / f if f.endswith(".py") else _module_path(f) for f in files]
        assert paths, entry
        assert any(p is not None and p.is_file() and entry.name in p.read_text()
                   for p in paths), f"{entry.label()}: not found in {entry.used_by}"


def _module_path(dotted: str) -> Path | None:
    """rlexp.a.b.function -> src/rlexp/a/b.py (the longest prefix that is a module)."""
    parts = dotted.split(".")
    for end in range(len(parts), 1, -1):
        path = SRC.parent.joinpath(*parts[:end])
        if path.with_suffix(".py").is_file():
            return path.with_suffix(".py")
    return None


def test_the_scan_finds_each_kind_of_private_use():
    """The scan's positive control: every form it looks for, and what it leaves alone."""
    source = """
import os, hydra._internal.utils
from hydra._internal.hydra import Hydra
from omegaconf import _utils
from rlexp.job import _helper
import jax
jax._src.foo
value._secret
getattr(value, "_hidden")
self._mine
value._ours
os._exit(0)
point._replace(x=1)
value._rlexp_call
"""
    found = {(m, n) for _, m, n in private_uses(source, own={"_ours"})}
    assert found == {("hydra._internal.utils", ""), ("hydra._internal.hydra", "Hydra"),
                     ("omegaconf", "_utils"), ("jax", "_src"), ("value:value", "_secret"),
                     ("value:value", "_hidden")}
    in_launcher = {(m, n) for _, m, n in private_uses(source, {"_ours"}, launcher=True)}
    assert in_launcher - found == {("rlexp.job", "_helper")}
    names = list(private_apis.NAMES)
    assert _listed("hydra._internal.utils", "get_args_parser", names)
    assert _listed("jax", "_src", names) and _listed("value:bridge", "_backends", names)
    assert not _listed("hydra._internal.utils", "run_and_report", names)
    assert not _listed("jax._src.xla_bridge", "_other", names)


def test_every_private_use_in_src_and_launchers_is_listed():
    """Each private use of a foreign library in src/ or launchers/ is in
    rlexp.base.private_apis.NAMES or rlexp.engine.tunix_names.NAMES; a launcher uses no
    private name of rlexp's either."""
    paths = _sources()
    trees = {path: ast.parse(path.read_text()) for path in paths}
    own = set().union(*(_assigned_private_names(t) for t in trees.values()))
    entries = _all_entries()
    unlisted = [f"{path.relative_to(ROOT)}:{line}: {module} {name}".rstrip()
                for path in paths
                for line, module, name in private_uses(trees[path], own,
                                                       launcher=path.is_relative_to(LAUNCHERS))
                if _own_module(module) or not _listed(module, name, entries)]
    assert not unlisted, ("private names not listed in rlexp.base.private_apis (or Tunix's in "
                          f"rlexp.engine.tunix_names): use the public API or list them: {unlisted}")


# Private names outside Tunix that rlexp may rely on at once. Pre-flight composes through
# hydra.initialize_config_dir + compose (--config-dir as a hydra.searchpath entry), and rlexp
# samples its RSS and JAX's memory on a thread of its own: 3 names are left. A new one takes
# the place of one, or this number goes up with the reason next to it.
BUDGET = 4


def test_private_names_outside_tunix_stay_within_the_budget():
    labels = [entry.label() for entry in private_apis.NAMES]
    assert len(labels) <= BUDGET, f"{len(labels)} private names, at most {BUDGET}: {labels}"
    assert len(set(labels)) == len(labels), labels


def test_a_private_attribute_no_entry_names_fails_the_scan():
    """The scan's negative control on a value: `cluster.rollout._sampler.llm` (how rlexp once
    reached vLLM's engine through Tunix's VllmRollout) is flagged, and only an entry of that
    name covers it. A value's type is unknown to the scan, so the vanilla rollout's entry
    would cover it: the next test keeps the reads of `_sampler` on the vanilla path."""
    uses = private_uses("def f(cluster):\n    return cluster.rollout._sampler.llm\n", set())
    assert uses == [(2, "value:cluster.rollout", "_sampler")]
    without = [e for e in _all_entries() if e.name != "_sampler"]
    assert not _listed("value:cluster.rollout", "_sampler", without)
    if importlib.util.find_spec("tunix") is not None:
        assert _listed("value:cluster.rollout", "_sampler", _all_entries())


def _reads_of(attr: str, tree: ast.AST) -> set[str]:
    """Top-level functions of `tree` that read `<value>.<attr>` of a value other than self."""
    found = set()
    for top in tree.body:
        if isinstance(top, (ast.FunctionDef, ast.ClassDef)):
            for node in ast.walk(top):
                if (isinstance(node, ast.Attribute) and node.attr == attr
                        and not (isinstance(node.value, ast.Name)
                                 and node.value.id in ("self", "cls"))):
                    found.add(top.name)
    return found


def test_the_rollouts_private_sampler_is_read_on_the_vanilla_path_only():
    """tunix_names lists `_sampler` for tunix.rl.rollout.vanilla_rollout.VanillaRollout only
    (Tunix's VllmRollout, which has one too, imports vllm: its entry could not be checked
    here). So src/ reads `_sampler` of no other value than self, and only in the vanilla
    backend's subclass of VanillaRollout; a vLLM rollout's engine is reached through rlexp's
    public TorchVllmRollout.sampler."""
    readers = {path.relative_to(SRC).as_posix(): found for path in sorted(SRC.rglob("*.py"))
               if (found := _reads_of("_sampler", ast.parse(path.read_text())))}
    assert readers == {}, readers
    own = {path.relative_to(SRC).as_posix() for path in sorted(SRC.rglob("*.py"))
           if "self._sampler" in path.read_text()}
    assert own == {"engine/rollout/vanilla.py"}, own
    tree = ast.parse((SRC / "engine" / "rollout" / "vanilla.py").read_text())
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Rollout"]
    assert [ast.unparse(b) for b in cls.bases] == ["VanillaRollout"]
