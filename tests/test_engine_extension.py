"""rlexp extends Tunix by subclassing (rlexp.engine.learner), not by setting functions on the
attributes of objects it was handed: an ast scan of src/rlexp/engine finds every
`obj.attr = <function>` (and `setattr(obj, "attr", <function>)`) on an object other than
self, and only the process-wide patches listed in rlexp.engine.tunix_names.PATCHES may make one.
"""

from __future__ import annotations

import ast
from pathlib import Path

import rlexp
from rlexp.engine.tunix_names import PATCHES

ENGINE = Path(rlexp.__file__).resolve().parent / "engine"


def _is_function(value: ast.expr, defs: set[str]) -> bool:
    """A lambda (anywhere in the value), a function the module defines, or a partial or
    property made here."""
    for node in ast.walk(value):
        if isinstance(node, ast.Lambda):
            return True
        if (isinstance(node, ast.Call)
                and ast.unparse(node.func).split(".")[-1] in ("partial", "property")):
            return True
    return isinstance(value, ast.Name) and value.id in defs


def _root(target: ast.expr) -> ast.expr:
    while isinstance(target, (ast.Attribute, ast.Subscript, ast.Call)):
        target = target.func if isinstance(target, ast.Call) else target.value
    return target


def function_assignments(source: str) -> list[tuple[str, int, str]]:
    """(enclosing "Class.function" or "<module>", line, source) of every function set on an
    attribute of an object other than self or cls."""
    tree = ast.parse(source)
    defs = {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    found = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                top = child.name if scope == "<module>" else f"{scope}.{child.name}"
                # a def nested in a function belongs to the top-level function or method
                visit(child, scope if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                      else top)
                continue
            pairs: list[tuple[ast.expr, ast.expr]] = []
            if isinstance(child, ast.Assign):
                pairs = [(t, child.value) for t in child.targets]
            elif isinstance(child, (ast.AnnAssign, ast.AugAssign)) and child.value is not None:
                pairs = [(child.target, child.value)]
            elif (isinstance(child, ast.Call) and ast.unparse(child.func) == "setattr"
                  and len(child.args) == 3):
                pairs = [(ast.Attribute(child.args[0], "?"), child.args[2])]
            for target, value in pairs:
                root = _root(target)
                if (isinstance(target, ast.Attribute) and _is_function(value, defs)
                        and not (isinstance(root, ast.Name) and root.id in ("self", "cls"))):
                    found.append((scope, child.lineno, ast.unparse(child)))
            visit(child, scope)

    visit(tree, "<module>")
    return found


def test_the_scan_finds_each_form():
    """The scan's positive and negative controls."""
    source = '''
def helper(): pass
def wrap(learner, cluster, module):
    def local(*a): pass
    learner.step = local
    cluster.rollout.generate = lambda p: p
    module.apply = functools.partial(helper, x=1)
    cls_.dtype = property(lambda self: 1)
    setattr(cluster, "go", local)
    cluster.probe = learner  # a value, not a function
    cluster.count = 3
class A:
    def __init__(self):
        self.hook = helper  # its own attribute
        def inner(): pass
        other.hook = inner
'''
    got = [(scope, line) for scope, line, _ in function_assignments(source)]
    assert got == [("wrap", 5), ("wrap", 6), ("wrap", 7), ("wrap", 8), ("wrap", 9),
                   ("A.__init__", 16)]


def test_every_listed_patch_names_a_function_of_the_engine():
    for patch in PATCHES:
        module, _, function = patch.by.partition(".")
        tree = ast.parse((ENGINE / f"{module}.py").read_text())
        names = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert function.split(".")[0] in names, patch
        assert patch.why, patch


def test_no_function_is_set_on_another_object_outside_the_listed_patches():
    allowed = {patch.by for patch in PATCHES}
    offenders = [f"{path.relative_to(ENGINE.parent)}:{line}: {text}"
                 for path in sorted(ENGINE.rglob("*.py"))
                 for scope, line, text in function_assignments(path.read_text())
                 if f"{path.relative_to(ENGINE).with_suffix('').as_posix().replace('/', '.')}"
                    f".{scope}" not in allowed]
    assert not offenders, ("extend Tunix by subclassing (rlexp.engine.learner), or list a "
                           f"process-wide patch in rlexp.engine.tunix_names.PATCHES: {offenders}")
