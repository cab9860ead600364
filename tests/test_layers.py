"""The package's layers hold: import-linter's contracts (pyproject.toml), no import circle
between modules (imports inside functions counted), and every module named by the docstring
of the package it lives in, so the folders and their docstrings draw the same picture."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import require

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "rlexp"
# The top-level modules: the commands (python -m rlexp[.<command>]) and the rewards' public names.
COMMANDS = {"__init__", "__main__", "sync", "export", "ui", "report", "rewards"}


def test_lint_imports_keeps_every_contract():
    require(shutil.which("lint-imports") is not None, "import-linter is not installed",
            "bash scripts/setup --test")
    proc = subprocess.run(["lint-imports", "--no-cache"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


def test_lint_imports_covers_every_launcher_plugin():
    """Each package of launchers/hydra_plugins/ is a root package of import-linter's, so the
    contracts (plugins above rlexp; no entry point, engine, Tunix or JAX) check its imports."""
    import tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    plugins = {f"hydra_plugins.{p.name}" for p in (ROOT / "launchers" / "hydra_plugins").iterdir()
               if (p / "__init__.py").is_file()}
    assert plugins and plugins <= set(config["root_packages"])
    layered = [c for c in config["contracts"] if c["type"] == "layers"
               and any("hydra_plugins" in layer for layer in c["layers"])]
    assert layered and all(p in layered[0]["layers"][0] for p in plugins)


def _loaded_after(statement: str) -> list[str]:
    """The Hydra, OmegaConf and rlexp.config modules a fresh interpreter has after `statement`."""
    code = (f"import sys; {statement}; print(' '.join(sorted(m for m in sys.modules if "
            "m.split('.')[0] in ('hydra', 'omegaconf') or m.startswith('rlexp.config'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout.split()


def test_the_base_layer_imports_without_hydra():
    """`import rlexp.base.errors` (every layer raises UserError) loads neither Hydra nor the
    config package (it loaded 333 modules, 0.40 s, when rlexp's __init__ registered the
    schema); rlexp.config still registers the schema for every process that composes."""
    assert _loaded_after("import rlexp.base.errors, rlexp.base") == []
    loaded = _loaded_after("import rlexp.config")  # the check sees Hydra when it is there
    assert "hydra" in loaded and "rlexp.config.schema" in loaded
    registered = ("from hydra.core.config_store import ConfigStore; import rlexp.config; "
                  "assert 'base_config.yaml' in ConfigStore.instance().repo, 'no schema'")
    assert _loaded_after(registered)


def _module_imports() -> dict[str, set[str]]:
    """rlexp module -> the rlexp modules it imports anywhere in its body (functions too),
    TYPE_CHECKING blocks left out (they never run)."""
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
                and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
                for n in ast.walk(node)}
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                # `from pkg import mod` imports pkg.mod (its parent package is loaded first
                # by Python itself, as for every submodule); `from mod import name`, mod.
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base
                           for a in node.names]
            for target in targets:
                # the deepest rlexp module the import names
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    found.add(target)
        edges[name] = found
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_between_modules():
    edges = _module_imports()
    assert "rlexp.launch.preflight" in edges and edges["rlexp.job.loop"]  # the walk saw them
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_is_named_by_its_package_docstring():
    missing = []
    for init in PACKAGE.rglob("__init__.py"):
        if init.parent == PACKAGE:
            continue
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        names = [p.stem for p in init.parent.glob("*.py") if p.stem != "__init__"]
        names += [p.name for p in init.parent.iterdir() if (p / "__init__.py").is_file()]
        missing += [f"{init.parent.relative_to(PACKAGE)}/{n}" for n in names if n not in doc]
    assert missing == []


def test_only_commands_stay_at_the_top_and_the_root_docstring_names_the_layers():
    top = {p.stem for p in PACKAGE.glob("*.py")}
    assert top <= COMMANDS, top - COMMANDS
    doc = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text())) or ""
    layers = [p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()]
    assert [n for n in layers if n not in doc] == []
