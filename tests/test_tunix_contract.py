"""The private Tunix names rlexp relies on still exist with the signatures rlexp uses.

A Tunix upgrade that renames `_run_global_step` or reorders its parameters fails here, in
the fast tier, with the name in the message, instead of silently in a training step.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import rlexp
from conftest import require

SRC = Path(rlexp.__file__).resolve().parent
ENGINE = SRC / "engine"

require(importlib.util.find_spec("tunix") is not None, "tunix is not installed",
        "bash scripts/setup --test")

from rlexp.engine import tunix_names  # noqa: E402


@pytest.mark.parametrize("entry", tunix_names.NAMES, ids=lambda e: e.label())
def test_private_tunix_name_still_holds(entry):
    why = tunix_names.check(entry)
    assert why is None, (f"{entry.label()} {why} (rlexp uses it for: {entry.why or entry.kind}; "
                         f"tested with google-tunix {tunix_names.TESTED_VERSION}, installed "
                         f"{tunix_names.installed_version()})")


def test_the_check_notices_changes():
    """Each kind of check can fail: a missing name, reordered parameters, a lost keyword."""
    learner = "tunix.rl.rl_learner:RLLearner"
    gone = tunix_names.Name(learner, "_no_such_method", "method", ())
    assert tunix_names.check(gone) == "is gone"
    reordered = tunix_names.Name(learner, "_run_global_step", "method",
                                 ("mini_batch_size", "full_batch_size"), True)
    assert "positional parameters changed" in tunix_names.check(reordered)
    lost = tunix_names.Name("tunix.rl.common", "compute_per_token_logps", "function",
                            ("graphdef", "no_such_keyword"))
    assert tunix_names.check(lost) == "lost parameter(s) no_such_keyword"
    unset = tunix_names.Name(learner, "_no_such_attribute", "attribute")
    assert tunix_names.check(unset) == "is no longer set by the class"
    no_field = tunix_names.Name("tunix.sft.peft_trainer:MetricsBuffer", "nope", "field")
    assert tunix_names.check(no_field) == "is no longer a field"
    assert "is gone" in tunix_names.check(tunix_names.Name("tunix.no_such_module", "x", "function"))


def _own_private_names() -> set[str]:
    """Private names rlexp defines itself (methods, attributes, module globals)."""
    own = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        own |= set(re.findall(r"self\.(_\w+)\s*(?::[^=\n]*)?=[^=]", text))
        own |= set(re.findall(r"def (_\w+)\(", text))
        own |= set(re.findall(r"^(_\w+)\s*[:=]", text, flags=re.M))
    return own


def test_engine_uses_only_declared_private_names():
    """Every `obj._name` in the engine is rlexp's own (defined in rlexp, or _rlexp*) or
    listed in tunix_names.NAMES."""
    declared = {e.name for e in tunix_names.NAMES}
    own = _own_private_names()
    undeclared = {}
    for path in sorted(ENGINE.glob("*.py")):
        for name in re.findall(r"\w\.(_[a-zA-Z]\w*)", path.read_text()):
            # _rlexp* names are rlexp's own attributes set on Tunix objects (patch markers)
            if (not name.startswith(("__", "_rlexp")) and name not in declared
                    and name not in own):
                undeclared.setdefault(name, path.name)
    assert not undeclared, (f"private names used in rlexp/engine but not declared in "
                            f"rlexp.engine.tunix_names.NAMES: {undeclared}")


def test_only_the_engine_imports_tunix():
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if ENGINE not in p.parents
                 and re.search(r"^\s*(import tunix|from tunix)", p.read_text(), flags=re.M)]
    assert not offenders, f"import Tunix only inside rlexp/engine/: {offenders}"


def test_the_engine_loads_only_the_tunix_modules_it_uses():
    """rlexp.engine makes the tunix package without running tunix/__init__.py (which imports
    every Tunix trainer); the top-level API still works, loaded on first use."""
    import subprocess
    import sys

    code = """
import sys
import rlexp.engine.tunix_adapter, tunix
assert "tunix.rl.grpo.grpo_learner" in sys.modules
assert "tunix.distillation" not in sys.modules, "tunix/__init__.py ran"
from tunix.rl.grpo.grpo_learner import GRPOLearner
assert tunix.GRPOLearner is GRPOLearner and "tunix.distillation" in sys.modules
from importlib.metadata import version
assert tunix.__version__ == version("google-tunix")
try:
    tunix.no_such_name
except AttributeError as exc:
    assert "no_such_name" in str(exc)
else:
    raise AssertionError("a missing name must stay an AttributeError")
print("ok")
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
