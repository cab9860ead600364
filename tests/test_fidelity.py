"""Each seed recipe, composed, has its seed's settings (tests/fidelity.py holds the tables: the
seed's value and where the seed has it), its deliberate substitutes carry a reason, and
README.md shows the same tables."""

from __future__ import annotations

from pathlib import Path

import pytest

from fidelity import SEEDS, Row, markdown
from rlexp.data.reward_sets import EASYDEL_SYSTEM_PROMPT

README = Path(__file__).resolve().parents[1] / "README.md"
CASES = [(recipe, seed) for seed in SEEDS for recipe in seed.recipes]


def _value(cfg, key: str):
    obj = cfg
    for part in key.split("."):
        obj = getattr(obj, part)  # a key the schema lacks fails here, loudly
    return obj


def _expected(row_key: str, value, compose_config):
    if row_key == "reward":
        return compose_config(f"reward={value}").reward.functions
    if row_key == "dataset.system_prompt":
        return EASYDEL_SYSTEM_PROMPT
    return value


def _same(got, want) -> bool:
    if isinstance(want, float) and isinstance(got, (int, float)):
        return got == pytest.approx(want, rel=1e-12)
    return got == want


@pytest.mark.parametrize("recipe,seed", CASES, ids=[r for r, _ in CASES])
def test_recipe_has_its_seeds_settings(recipe, seed, compose_config):
    cfg = compose_config(f"experiment={recipe}")
    wrong = []
    for row in seed.rows + tuple(Row(s.key, s.value, s.source) for s in seed.substitutes):
        got = cfg.reward.functions if row.key == "reward" else _value(cfg, row.key)
        want = _expected(row.key, row.value, compose_config)
        if not _same(got, want):
            wrong.append(f"{row.key}={got!r}, the table says {row.value!r} ({row.where})")
    assert not wrong, f"experiment={recipe}:\n" + "\n".join(wrong)


def test_tables_are_well_formed():
    for seed in SEEDS:
        keys = [r.key for r in seed.rows] + [s.key for s in seed.substitutes]
        assert len(keys) == len(set(keys)), f"{seed.recipes}: a key listed twice"
        assert all(r.where.strip() for r in seed.rows)
        assert all(s.why.strip() and s.source.strip() for s in seed.substitutes)
        assert "@" in seed.source  # a commit


def test_a_wrong_value_is_caught(compose_config):
    """The check can fail: a recipe with one setting changed no longer matches its table."""
    seed = SEEDS[0]
    cfg = compose_config(f"experiment={seed.recipes[0]}", "algo.beta=0.5")
    row = next(r for r in seed.rows if r.key == "algo.beta")
    assert not _same(_value(cfg, row.key), row.value)
    cfg = compose_config(f"experiment={seed.recipes[0]}", "reward=easydel_numina")
    assert cfg.reward.functions != compose_config("reward=maxtext").reward.functions


@pytest.mark.parametrize("seed", SEEDS, ids=[s.recipes[0] for s in SEEDS])
def test_readme_shows_the_table(seed):
    text = README.read_text(encoding="utf-8")
    table = markdown(seed)
    missing = [line for line in table.splitlines() if line and line not in text]
    assert not missing, ("README.md lacks these lines of the fidelity table (regenerate with "
                         "`python -c 'import sys; sys.path.insert(0, \"tests\"); import fidelity; "
                         "print(*map(fidelity.markdown, fidelity.SEEDS), sep=\"\\n\\n\")'`):\n"
                         + "\n".join(missing[:5]))
