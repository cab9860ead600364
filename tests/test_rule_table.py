"""README.md's rule table ("Mistakes": every rule, where it lives) against the code, both ways:
each rule and check the code names is a row that says where it lives, and each row is one the
code names. A rule added, renamed or moved without its row (or a row left behind) fails here."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

from rlexp import engine
from rlexp.config import rules, validate
from rlexp.job import guards
from rlexp.launch import checks

ROOT = Path(__file__).resolve().parents[1]
# A table row: | `name` | where | refuses |
ROW = re.compile(r"^\| `([a-z_]+)` \| ([^|]+) \|")
# What engine.build calls for each of its BUILD_CHECKS.
BUILD_CALLS = {"prompt_lengths": "check_prompt_lengths(", "tunix_version": "_check_installed_tunix()"}


def _readme_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Mistakes", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            assert match.group(1) not in rows, f"{match.group(1)}: two rows"
            rows[match.group(1)] = match.group(2)
    return rows


def _code_rules() -> dict[str, str]:
    """Every rule and check name in the code -> the module (as the table's Where names it)."""
    found: dict[str, str] = {"choices": "config/validate.py", "ranges": "config/validate.py"}
    found.update({r.name: "config/rules.py" for r in rules.RULES})
    found.update({name: "launch/checks.py" for name in checks.COMMAND_CHECKS})
    found.update({c.name: "launch/checks.py" for c in checks.CHECKS})
    found.update({name: "engine/__init__.py" for name in engine.BUILD_CHECKS})
    found.update({name: "job/guards.py" for name in guards.GUARDS})
    return found


def test_every_rule_in_the_code_is_a_row_that_says_where_it_lives_and_vice_versa():
    rows, code = _readme_rows(), _code_rules()
    assert len(rows) >= 40
    assert sorted(set(code) - set(rows)) == [], "rules without a README row"
    assert sorted(set(rows) - set(code)) == [], "README rows the code does not name"
    assert {k: v for k, v in code.items() if v not in rows[k]} == {}, "rows naming the wrong home"


def test_the_names_point_at_real_code():
    """The tables and the guards exist, every check_* function of launch/checks.py is listed
    (per job or for the command), and engine.build makes each of its named checks."""
    assert callable(validate.choice_refusal) and callable(validate.range_refusal)
    assert all(callable(getattr(guards, name)) for name in guards.GUARDS)
    listed = {c.fn.__name__ for c in checks.CHECKS} | {
        f"check_{name}" for name in checks.COMMAND_CHECKS}
    assert all(callable(getattr(checks, f"check_{name}")) for name in checks.COMMAND_CHECKS)
    tree = ast.parse(Path(checks.__file__).read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)
               and n.name.startswith("check_")}
    assert sorted(defined - listed - {"check_job", "check_command"}) == []
    build = inspect.getsource(engine.build)
    assert set(BUILD_CALLS) == set(engine.BUILD_CHECKS)
    assert [name for name, call in BUILD_CALLS.items() if call not in build] == []
