"""Oracle: the seeds' own reward and evaluation functions, run on the same completions as
rlexp's reward sets (reward=maxtext, maxtext_current, easydel_numina), give the same scores.

The sources are vendored verbatim under tests/data/oracles/ (license headers kept):
  maxtext_a4de80cc5_utils_rl.py.txt     github.com/AI-Hypercomputer/maxtext @ a4de80cc5
                                        src/MaxText/rl/utils_rl.py
  maxtext_a4de80cc5_evaluate_rl.py.txt  same commit, src/MaxText/rl/evaluate_rl.py
  easydel_e2e6dccc_launch.py.txt        github.com/erfanzar/EasyDeL @ e2e6dccc tutorials/
                                        post-training/group_relative_policy_optimization/launch.py
  maxtext_e591f30cb_*.txt               MaxText's newest stored commit (reward=maxtext_current):
                                        src/maxtext/trainers/post_train/rl/{utils_rl,evaluate_rl,
                                        math_verify_pool}.py, src/maxtext/configs/post_train/rl.yml
The files import jax/tunix/MaxText; only the reward functions' definitions are taken out
(ast) and executed with the stdlib `re` (and math_verify for EasyDeL's accuracy and MaxText's
newest grading, whose pool of spawned graders runs for real).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import require
from rlexp.data import reward_sets, rewards
from rlexp.job import evaluate

ORACLES = Path(__file__).parent / "data" / "oracles"


def _functions(file: str, names: set[str], namespace: dict) -> SimpleNamespace:
    """The named function definitions of a source file (at any depth), executed in `namespace`."""
    tree = ast.parse((ORACLES / file).read_text(encoding="utf-8"))
    defs = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {d.name for d in defs} == names, f"{file} lacks {names - {d.name for d in defs}}"
    exec(compile(ast.Module(body=defs, type_ignores=[]), file, "exec"), namespace)  # noqa: S102
    return SimpleNamespace(**{n: namespace[n] for n in names})


_LOG = SimpleNamespace(log=lambda *a, **k: None)
MAXTEXT = _functions("maxtext_a4de80cc5_utils_rl.py.txt",
                     {"get_match_format_regex", "match_format_exactly",
                      "match_format_approximately", "check_answer",
                      "get_match_numbers_regex", "check_numbers"},
                     {"re": re, "max_logging": _LOG})
MAXTEXT_EVAL = _functions("maxtext_a4de80cc5_evaluate_rl.py.txt", {"score_responses"},
                          {"utils_rl": MAXTEXT, "max_logging": _LOG})
# rl.yml at a4de80cc5: the reward constants and tags.
TMVP = SimpleNamespace(
    reward_exact_format_match=3.0, reward_white_space_format_match=1.5,
    reward_partial_format_match=0.5, reward_ratio_guess_to_answer_high=0.5,
    reward_ratio_guess_to_answer_low=0.25, penalty_incorrect_format=-0.5,
    penalty_incorrect_answer=-1.0, reasoning_start_token="<reasoning>",
    reasoning_end_token="</reasoning>", solution_start_token="<answer>",
    solution_end_token="</answer>", debug={"rl": False})

R = "<reasoning>work</reasoning>"
# (completion, GSM8K reference): formats right and wrong, partial, malformed, LaTeX, many numbers.
GSM8K_CASES = [
    (f"{R}<answer>42</answer>", "42"),                                   # perfect
    ("The answer is 42", "42"),                                          # no tags
    (f"{R}<answer>7</answer>", "42"),                                    # wrong answer
    (f"{R}\nso then\n<answer>42</answer>", "42"),                        # text between blocks
    (f"  \n{R}\n<answer>42</answer>\n  ", "42"),                          # surrounding space
    (f"{R}<answer> 42 </answer>", "42"),                                 # whitespace match
    (f"{R}<answer>40</answer>", "42"),                                   # within 10%
    (f"{R}<answer>35</answer>", "42"),                                   # within 20%
    (f"{R}<answer>30</answer>", "42"),                                   # beyond 20%
    (f"{R}<answer>forty-two</answer>", "42"),                            # not a number
    (f"{R}<answer>$42</answer>", "42"),                                  # currency
    (f"{R}<answer>1,234</answer>", "1234"),                              # thousands comma
    (f"{R}<answer>42.0</answer>", "42"),                                 # float form
    (f"{R}<answer>1 2</answer>", "2"),                                   # two numbers
    (f"{R}<answer>2 and 3</answer>", "3"),                               # two numbers, words
    (f"{R}<answer>\\frac{{3}}{{2}}</answer>", "1.5"),                    # LaTeX fraction
    (f"{R}<answer>\\boxed{{42}}</answer>", "42"),                        # LaTeX boxed
    (f"{R}<answer>\\sqrt{{2}}</answer>", "2"),                           # LaTeX root
    (f"{R}<answer>-3</answer>", "-3"),                                   # negative
    (f"{R}<answer>3</answer>", "-3"),                                    # sign lost
    (f"{R}<answer>1</answer>", "0"),                                     # zero reference
    (f"{R}<answer>0</answer>", "0"),                                     # zero right
    ("<reasoning>work<answer>42</answer>", "42"),                        # reasoning unclosed
    ("work</reasoning><answer>42</answer>", "42"),                       # reasoning unopened
    (f"{R}<answer>42", "42"),                                            # answer unclosed
    (f"{R}42</answer>", "42"),                                           # answer unopened
    (f"{R}{R}<answer>42</answer>", "42"),                                # reasoning twice
    (f"{R}<answer>1</answer><answer>42</answer>", "42"),                 # answer twice
    (f"<answer>42</answer>{R}", "42"),                                   # blocks swapped
    ("<answer>42</answer>", "42"),                                       # answer only
    (f"{R}<answer></answer>", "42"),                                     # empty answer
    ("", "42"),                                                          # empty completion
    ("<reasoning></reasoning><answer>42</answer>", "42"),                # empty reasoning
    (f"{R}<answer>42</answer> and more text", "42"),                     # trailing text
    (f"{R}<answer>42</answer>\nmore text", "42"),                        # trailing line
    (f"intro\n{R}<answer>42</answer>", "42"),                            # leading line
    (f"intro {R}<answer>42</answer>", "42"),                             # leading text
    (f"{R}<answer>3.14.15</answer>", "3.14"),                            # malformed number
    (f"{R}<answer>. 5</answer>", "5"),                                   # lone dot first
    (f"{R}<answer>1e3</answer>", "1000"),                                # exponent form
    (f"{R}<answer>47</answer>", "42"),                                   # 47 vs 42
    (f"{R}<answer>\\$18.00</answer>", "18"),                             # escaped dollar
    (f"{R}<answer>inf</answer>", "42"),                                  # float() accepts 'inf'
    (f"{R}<answer>nan</answer>", "42"),                                  # and 'nan'
    ("<REASONING>x</REASONING><ANSWER>42</ANSWER>", "42"),               # wrong case
    (f"{R}\n\n<answer>\n42\n</answer>\n", "42"),                         # newlines inside
]


def test_enough_oracle_cases():
    assert len(GSM8K_CASES) >= 40 and len(EASYDEL_CASES) >= 40


@pytest.mark.parametrize("i", range(len(GSM8K_CASES)))
def test_maxtext_rewards_equal_maxtexts_own(i):
    c, a = GSM8K_CASES[i]
    kw = {"prompts": ["q"], "completions": [c], "answer": [a], "question": ["q"]}
    theirs = [MAXTEXT.match_format_exactly(tmvp_config=TMVP, **kw)[0],
              MAXTEXT.match_format_approximately(tmvp_config=TMVP, **kw)[0],
              MAXTEXT.check_answer(tmvp_config=TMVP, **kw)[0],
              MAXTEXT.check_numbers(tmvp_config=TMVP, **kw)[0]]
    ours = [f(["q"], [c], [a], template="reasoning", reasoning_tag="reasoning")[0]
            for f in (reward_sets.maxtext_format_exact, reward_sets.maxtext_format_approx,
                      reward_sets.maxtext_check_answer, reward_sets.maxtext_check_numbers)]
    assert ours == pytest.approx(theirs, abs=0, rel=0)


@pytest.mark.parametrize("i", range(len(GSM8K_CASES)))
def test_maxtext_evaluation_equals_evaluate_rl(i):
    c, a = GSM8K_CASES[i]
    theirs = MAXTEXT_EVAL.score_responses(TMVP, "q", [c], a)
    assert evaluate.maxtext_score_responses([c], a) == theirs


def test_maxtext_evaluation_over_several_passes():
    """Several passes per question: the source's overwrite-then-early-exit verdicts kept."""
    groups = [[GSM8K_CASES[i][0] for i in idx] for idx in
              ([0, 2], [2, 0], [6, 1, 8], [1, 1], [13, 0], [40, 6])]
    for g in groups:
        assert evaluate.maxtext_score_responses(g, "42") == \
            MAXTEXT_EVAL.score_responses(TMVP, "q", g, "42")


def test_the_issue_table_by_hand():
    """Totals of the four MaxText rewards (weight 1 each), hand-summed from rl.yml."""
    terms = rewards.terms(_reward_cfg("maxtext"), "reasoning")
    table = {f"{R}<answer>42</answer>": 3 + 4 * 0.5 + 3 + 1.5,
             "The answer is 42": 4 * -0.5,
             f"{R}<answer>7</answer>": 3 + 4 * 0.5 - 1,
             f"{R}\nso then\n<answer>42</answer>": 9.5}
    for c, total in table.items():
        got = sum(v[0] for v in rewards.score_all(terms, [c], ["42"]).values())
        assert got == pytest.approx(total)


def _reward_cfg(name: str):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from rlexp.config.convert import to_config
    from rlexp.config.paths import conf_dir

    GlobalHydra.instance().clear()
    with initialize_config_dir(str(conf_dir()), version_base="1.3"):
        return to_config(compose("config", overrides=[f"reward={name}"])).reward


def test_maxtext_eval_metrics_and_maj_at_k():
    """reward=maxtext switches eval to MaxText's metrics, with maj@k; by hand."""
    terms = rewards.terms(_reward_cfg("maxtext"), "reasoning")
    greedy = [f"{R}<answer>42</answer>", "Final: <answer>47</answer>", f"{R}<answer>1 2</answer>"]
    sampled = [[f"{R}<answer>7</answer>", f"{R}<answer>42</answer>"],
               ["<answer>5</answer>", "<answer>5</answer>", "<answer>6</answer>"],
               ["<answer>2</answer>", "<answer>3</answer>", "<answer>3</answer>"]]
    m = evaluate.eval_metrics(greedy, sampled, ["42", "5", "2"], terms, "reasoning")
    assert m["eval/accuracy"] == pytest.approx(1 / 3)          # 1 2 -> first number 1: wrong
    assert m["eval/partial_accuracy"] == pytest.approx(1 / 3)  # 47/5 is far off
    assert m["eval/format_accuracy"] == pytest.approx(2 / 3)
    assert m["eval/pass_at_k"] == pytest.approx(1.0)
    assert m["eval/maj_at_k"] == pytest.approx(1 / 3)          # 7|42 tie -> 7; 5; 3
    # a line of text before the blocks passes MaxText's format (^ under MULTILINE), not on
    # the same line; 47 against 42 is not partially right (ratio 1.12)
    assert evaluate.maxtext_score_responses([f"... Final:\n{R}<answer>42</answer>"], "42") \
        == (True, True, True)
    assert evaluate.maxtext_score_responses([f"... Final: {R}<answer>42</answer>"], "42") \
        == (True, True, False)
    assert evaluate.maxtext_score_responses([f"{R}<answer>47</answer>"], "42")[1] is False


# ------------------------------------------------------------------------------- EasyDeL

# (completion, gold solution as NuminaMath-TIR writes it)
SOL = "We compute $x = 2 + 3$, so the answer is $\\boxed{5}$."
EASYDEL_CASES = [
    ("<think>2+3</think> The answer is $\\boxed{5}$", SOL),
    ("<think>abc</think> The answer is \\boxed{2}", "so $\\boxed{2}$"),
    ("<think>abc</think> The answer is \\boxed{3}", "so $\\boxed{2}$"),
    ("The answer is $\\boxed{5}$", SOL),                                    # no think block
    (" <think>x</think> $5$", SOL),                                         # leading space
    ("<think>x</think><answer>5</answer>", SOL),                            # no LaTeX at all
    ("<think>x</think><answer>$5$</answer>", SOL),                          # LaTeX in answer tag
    ("<think>unclosed $\\boxed{5}$", SOL),
    ("</think> $\\boxed{5}$", SOL),
    ("<think>$3$ first</think> then $\\boxed{5}$", SOL),                     # first match wins
    ("<think></think>$\\frac{1}{2}$", "Thus $\\boxed{\\frac{1}{2}}$"),
    ("<think></think>$\\frac{3}{2}$", "Thus $\\boxed{\\frac{1}{2}}$"),
    ("<think></think>$0.5$", "Thus $\\boxed{\\frac{1}{2}}$"),
    ("<think></think>$\\sqrt{2}$", "Thus $\\boxed{\\sqrt{2}}$"),
    ("<think></think>$\\sqrt{2}$", "Thus $\\boxed{2}$"),
    ("<think></think>$2\\sqrt{2}$", "Thus $\\boxed{\\sqrt{8}}$"),
    ("<think></think>$(1, 2]$", "The set is $\\boxed{(1,2]}$"),
    ("<think></think>$[1, 2]$", "The set is $\\boxed{(1,2]}$"),
    ("<think></think>$x = 3$", "So $\\boxed{3}$"),
    ("<think></think>$\\{1, 2\\}$", "So $\\boxed{\\{2, 1\\}}$"),
    ("<think></think>$50\\%$", "So $\\boxed{50\\%}$"),
    ("<think></think>$5\\text{ cm}$", "So $\\boxed{5}$ cm"),
    ("<think></think>$\\pi$", "So $\\boxed{\\pi}$"),
    ("<think></think>$3.14$", "So $\\boxed{\\pi}$"),
    ("<think></think>$10^{3}$", "So $\\boxed{1000}$"),
    ("<think></think>$1,000$", "So $\\boxed{1000}$"),
    ("<think>x</think> 42", "The answer is 42."),                           # gold without LaTeX
    ("garbage", "The answer is 42."),                                       # scored 1 all the same
    ("", "No formula here"),
    ("", SOL),
    ("<think>x</think>", SOL),
    ("<think>x</think> $\\boxed{5}$ or $\\boxed{6}$", SOL),
    ("<think>x</think> $\\boxed{6}$ or $\\boxed{5}$", SOL),
    ("<think>x</think> \\[ 5 \\]", SOL),
    ("<think>x</think> $\\dfrac{10}{2}$", SOL),
    ("<think>x</think> $\\boxed{5.0}$", SOL),
    ("<think>x</think> $\\boxed{-5}$", SOL),
    ("<think>a</think><think>b</think> $5$", SOL),
    ("<think>\nmulti\nline\n</think>\n$\\boxed{5}$", SOL),
    ("<THINK>x</THINK> $5$", SOL),
    ("<think>x</think> $\\frac{a}{b}$", "so $\\boxed{\\frac{a}{b}}$"),
    ("<think>x</think> $a+b$", "so $\\boxed{b+a}$"),
    ("<think>x</think> $\\boxed{5", SOL),                                   # unbalanced
]


def _easydel_oracle():
    require(__import__("importlib").util.find_spec("math_verify") is not None,
            "math-verify is not installed", "bash scripts/setup")
    import math_verify

    class Tokenizer:  # the tutorial decodes the gold from token ids; here they are the text
        @staticmethod
        def batch_decode(solutions):
            return list(solutions)

    ns = {"re": re, "Any": object, "parse": math_verify.parse, "verify": math_verify.verify,
          "LatexExtractionConfig": math_verify.LatexExtractionConfig, "tokenizer": Tokenizer,
          "num_return_sequences": 1}
    return _functions("easydel_e2e6dccc_launch.py.txt", {"format_reward", "accuracy_reward"}, ns)


@pytest.mark.parametrize("i", range(len(EASYDEL_CASES)))
def test_easydel_rewards_equal_the_tutorials_own(i):
    src = _easydel_oracle()
    c, gold = EASYDEL_CASES[i]
    wrapped = [[{"role": "assistant", "content": c}]]
    theirs = [src.format_reward(wrapped)[0],
              src.accuracy_reward(["q"], wrapped, {"solution_ids": [gold]})[0]]
    ours = [reward_sets.easydel_format(["q"], [c], [gold])[0],
            reward_sets.easydel_accuracy(["q"], [c], [gold])[0]]
    assert ours == theirs


def test_easydel_set_composes_and_the_issue_case():
    require(__import__("importlib").util.find_spec("math_verify") is not None,
            "math-verify is not installed", "bash scripts/setup")
    terms = rewards.terms(_reward_cfg("easydel_numina"), "reasoning", "think")
    c = "<think>abc</think> The answer is \\boxed{2}"
    scored = rewards.score_all(terms, [c], ["so $\\boxed{2}$"])
    assert scored == {"format_reward": [1.0], "accuracy_reward": [1.0]}
    # a gold with no LaTeX is scored 1, not dropped
    assert rewards.score_all(terms, ["x"], ["It is 42."])["accuracy_reward"] == [1.0]


def test_easydel_system_prompt_is_the_tutorials():
    src = (ORACLES / "easydel_e2e6dccc_launch.py.txt").read_text(encoding="utf-8")
    tree = ast.parse(src)
    node = next(n for n in tree.body if isinstance(n, ast.Assign)
                and getattr(n.targets[0], "id", None) == "SYSTEM_PROMPT")
    assert reward_sets.EASYDEL_SYSTEM_PROMPT == ast.literal_eval(node.value)


def test_easydel_eval_metrics():
    """reward=easydel_numina: eval scores by the tutorial's own rewards; by hand."""
    require(__import__("importlib").util.find_spec("math_verify") is not None,
            "math-verify is not installed", "bash scripts/setup")
    terms = rewards.terms(_reward_cfg("easydel_numina"), "reasoning", "think")
    greedy = ["<think>x</think> $\\boxed{5}$", "$\\frac{3}{2}$", "anything"]
    sampled = [["$4$", "$5$"], ["$\\frac{3}{2}$"], ["x"]]
    golds = [SOL, "Thus $\\boxed{\\frac{1}{2}}$", "No LaTeX: 42."]
    m = evaluate.eval_metrics(greedy, sampled, golds, terms, "reasoning", "think")
    assert m["eval/accuracy"] == pytest.approx(2 / 3)
    assert m["eval/format_accuracy"] == pytest.approx(1 / 3)
    assert m["eval/pass_at_k"] == pytest.approx(2 / 3)
    assert m["eval/mean_reward"] == pytest.approx((2 + 0 + 1) / 3)


# ------------------------------------------------------- MaxText at its newest commit

# github.com/AI-Hypercomputer/maxtext @ e591f30cb (2026-08-22), vendored under
# tests/data/oracles/: src/maxtext/trainers/post_train/rl/{utils_rl,evaluate_rl,
# math_verify_pool}.py and src/maxtext/configs/post_train/rl.yml (reward=maxtext_current).
CURRENT = "maxtext_e591f30cb"
CURRENT_NAMES = {"EPSILON", "FALLBACK_ANSWER", "SUBSTITUTIONS", "UNITS", "REMOVED_EXPRESSIONS",
                 "math_verify_func", "boxed", "get_match_format_regex",
                 "get_answer_fallback_regex", "match_format_exactly",
                 "match_format_approximately", "normalize_final_answer",
                 "preprocess_math_string", "fix_latex_escaping", "check_numbers",
                 "extract_answer", "check_correctness"}
# More completions for the newest grading (normalisation, \boxed, math_verify equivalence).
CURRENT_CASES = GSM8K_CASES + [
    (f"{R}<answer>7 3/4</answer>", "7.75"),                              # mixed number
    (f"{R}<answer>\\frac{{1}}{{2}}</answer>", "0.5"),                      # fraction = decimal
    (f"{R}<answer>\\dfrac{{3}}{{4}}</answer>", "0.75"),                    # dfrac
    (f"{R}<answer>\\boxed{{\\frac{{1}}{{2}}}}</answer>", "0.5"),            # nested braces
    (f"{R}<answer>$1,234</answer>", "1234"),                             # currency and comma
    (f"{R}<answer>42 dollars</answer>", "42"),                           # unit word
    (f"{R}<answer>18 cm</answer>", "18"),                                # unit
    (f"{R}<answer>x = 5</answer>", "5"),                                 # after '='
    (f"{R}<answer>5 million</answer>", "5000000"),                       # scale word
    (f"{R}<answer>41</answer>", "42"),                                   # within 10%: partial
    (f"{R}<answer>1</answer> then <answer>42</answer>", "42"),          # last block counts
    (f"{R} so \\boxed{{42}}", "42"),                                      # boxed, no block
    (f"{R}<answer>\\boxed{{41}} or \\boxed{{42}}</answer>", "42"),         # last boxed counts
    (f"{R}<answer>.5</answer>", "0.5"),                                  # leading dot
    (f"{R}<answer>2^{{10}}</answer>", "1024"),                           # power
]
# Constants other than rl.yml's, so that every branch of a reward shows in its score.
DISTINCT = {"reward_exact_answer": 3.0, "reward_white_space_format_match": 1.5,
            "reward_exact_format_match": 0.7, "reward_partial_format_match": 0.5,
            "penalty_incorrect_format": -0.5, "penalty_incorrect_answer": -1.0}


def _top_level(file: str, names: set[str], namespace: dict) -> SimpleNamespace:
    """The named top-level functions and assignments of a source file, run in `namespace`."""
    tree = ast.parse((ORACLES / file).read_text(encoding="utf-8"))
    nodes = [n for n in tree.body
             if isinstance(n, ast.FunctionDef) and n.name in names
             or isinstance(n, ast.Assign) and {getattr(t, "id", None) for t in n.targets} & names]
    exec(compile(ast.Module(body=nodes, type_ignores=[]), file, "exec"), namespace)  # noqa: S102
    missing = names - set(namespace)
    assert not missing, f"{file} lacks {missing}"
    return SimpleNamespace(**{n: namespace[n] for n in names})


def _rl_yml(**overrides) -> SimpleNamespace:
    import yaml

    cfg = yaml.safe_load((ORACLES / f"{CURRENT}_rl.yml.txt").read_text(encoding="utf-8"))
    return SimpleNamespace(**{**cfg, **overrides})


@pytest.fixture(scope="module")
def current(tmp_path_factory):
    """MaxText's own utils_rl and evaluate_rl functions at e591f30cb. Its math_verify pool
    runs for real: spawned workers import the vendored module by name, so it is written out
    as a module file on sys.path (stdlib imports only)."""
    require(__import__("importlib").util.find_spec("math_verify") is not None,
            "math-verify is not installed", "bash scripts/setup")
    import importlib
    import itertools
    import json
    import multiprocessing.pool  # noqa: F401  named by the pool module's annotations
    import sys
    import typing

    from math_verify import parse
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    where = tmp_path_factory.mktemp("maxtext_pool")
    (where / f"{CURRENT}_math_verify_pool.py").write_text(
        (ORACLES / f"{CURRENT}_math_verify_pool.py.txt").read_text(encoding="utf-8"))
    sys.path.insert(0, str(where))
    pool = importlib.import_module(f"{CURRENT}_math_verify_pool")
    log = SimpleNamespace(log=lambda *a, **k: None, warning=lambda *a, **k: None)
    utils = _top_level(f"{CURRENT}_utils_rl.py.txt", CURRENT_NAMES, {
        "re": re, "json": json, "itertools": itertools, "parse": parse,
        "ExprExtractionConfig": ExprExtractionConfig,
        "LatexExtractionConfig": LatexExtractionConfig, "math_verify_pool": pool.math_verify_pool,
        "verify_math_worker": pool.verify_math_worker, "max_logging": log,
        "Any": typing.Any, "Optional": typing.Optional, "Callable": typing.Callable})
    ev = _top_level(f"{CURRENT}_evaluate_rl.py.txt", {"_score_single", "score_responses"}, {
        "utils_rl": utils, "max_logging": log, "collections": __import__("collections"),
        "re": re, "Any": typing.Any})
    yield SimpleNamespace(utils=utils, eval=ev, json=json)
    pool._shutdown_pool()
    sys.path.remove(str(where))


def _theirs_current(current, tmvp) -> list[list[float]]:
    """MaxText's three rewards on every case, as train_rl calls them: one batch, the answer
    a JSON list of acceptable answers ([a, a] for GSM8K, utils_rl.process_data)."""
    kw = {"prompts": ["q"] * len(CURRENT_CASES), "completions": [c for c, _ in CURRENT_CASES],
          "answer": [current.json.dumps([a, a]) for _, a in CURRENT_CASES],
          "question": ["q"] * len(CURRENT_CASES), "tmvp_config": tmvp}
    u = current.utils
    return [u.match_format_exactly(**kw), u.match_format_approximately(**kw),
            u.check_numbers(**kw)]


def _ours_current(**kwargs) -> list[list[float]]:
    cs, refs = [c for c, _ in CURRENT_CASES], [a for _, a in CURRENT_CASES]
    return [f(["q"] * len(cs), cs, refs, template="reasoning", reasoning_tag="reasoning", **kwargs)
            for f in (reward_sets.maxtext_current_format_exact,
                      reward_sets.maxtext_current_format_approx,
                      reward_sets.maxtext_current_check_numbers)]


@pytest.mark.parametrize("constants", ["rl.yml", "distinct", "start tag in prompt"])
def test_maxtext_current_rewards_equal_maxtexts_own(current, constants):
    overrides = {"rl.yml": {}, "distinct": DISTINCT,
                 "start tag in prompt": {**DISTINCT, "reasoning_start_token_in_prompt": True}}
    tmvp = _rl_yml(**overrides[constants])
    theirs = _theirs_current(current, tmvp)
    ours = _ours_current(**{k: v for k, v in overrides[constants].items() if k in DISTINCT},
                         reasoning_start_in_prompt=tmvp.reasoning_start_token_in_prompt)
    for name, t, o in zip(("match_format_exactly", "match_format_approximately",
                           "check_numbers"), theirs, ours):
        diff = [(CURRENT_CASES[i], a, b) for i, (a, b) in enumerate(zip(t, o)) if a != b]
        assert not diff, f"{name}: (case, MaxText, rlexp) {diff}"


def test_maxtext_current_constants_are_rl_ymls():
    cfg = vars(_rl_yml())
    assert reward_sets.MAXTEXT_CURRENT_CONSTANTS == {k: cfg[k] for k in
                                                     reward_sets.MAXTEXT_CURRENT_CONSTANTS}
    assert (cfg["reasoning_start_token"], cfg["solution_start_token"]) == ("<reasoning>",
                                                                          "<answer>")


def test_maxtext_current_differs_from_the_seeds():
    """What moved between the seeds' commit and e591f30cb (why reward=maxtext_current exists):
    check_answer is gone, numbers are graded by math_verify, the format is no longer anchored."""
    require(__import__("importlib").util.find_spec("math_verify") is not None,
            "math-verify is not installed", "bash scripts/setup")
    src = (ORACLES / f"{CURRENT}_utils_rl.py.txt").read_text(encoding="utf-8")
    assert "def check_answer(" not in src and "def check_answer(" in \
        (ORACLES / "maxtext_a4de80cc5_utils_rl.py.txt").read_text(encoding="utf-8")
    comma = f"{R}<answer>1,234</answer>"  # the seeds' first number is 1
    assert reward_sets.maxtext_check_numbers(["q"], [comma], ["1234"]) == [0.0]
    assert reward_sets.maxtext_current_check_numbers(["q"], [comma], ["1234"]) == [1.0]
    lead = f"intro {R}<answer>42</answer>"
    assert reward_sets.maxtext_format_exact(["q"], [lead], ["42"]) == [0.0]
    assert reward_sets.maxtext_current_format_exact(["q"], [lead], ["42"]) == [0.1]


@pytest.mark.parametrize("i", range(len(CURRENT_CASES)))
def test_maxtext_current_evaluation_equals_evaluate_rl(current, i):
    c, a = CURRENT_CASES[i]
    theirs = current.eval.score_responses(_rl_yml(), "q", [c], [a])
    assert evaluate.maxtext_current_score_responses([c], a) == theirs


@pytest.mark.parametrize("mode", ["pass", "maj", "pass_at_1"])
def test_maxtext_current_evaluation_over_several_passes(current, mode):
    """Several passes per question in each eval_mode, ties and early exits included."""
    groups = [[GSM8K_CASES[i][0] for i in idx] for idx in
              ([0, 2], [2, 0], [6, 1, 8], [1, 1], [13, 0], [40, 6], [16, 2, 2], [2, 16])]
    for g in groups:
        theirs = current.eval.score_responses(_rl_yml(eval_mode=mode), "q", g, ["42"])
        assert evaluate.maxtext_current_score_responses(g, "42", eval_mode=mode) \
            == pytest.approx(theirs)


def test_maxtext_current_eval_metrics_by_hand():
    """reward=maxtext_current: MaxText's newest metrics, with maj@k; by hand."""
    require(__import__("importlib").util.find_spec("math_verify") is not None,
            "math-verify is not installed", "bash scripts/setup")
    terms = rewards.terms(_reward_cfg("maxtext_current"), "reasoning")
    greedy = [f"{R}<answer>\\boxed{{42}}</answer>", "Final: <answer>47</answer>",
              f"{R}<answer>1 2</answer>"]
    sampled = [[f"{R}<answer>7</answer>", f"{R}<answer>42</answer>"],
               ["<answer>5</answer>", "<answer>5</answer>", "<answer>6</answer>"],
               ["<answer>2</answer>", "<answer>3</answer>", "<answer>3</answer>"]]
    m = evaluate.eval_metrics(greedy, sampled, ["42", "5", "3"], terms, "reasoning")
    assert m["eval/accuracy"] == pytest.approx(2 / 3)  # "1 2" reads as the mixed number 1+2
    assert m["eval/partial_accuracy"] == pytest.approx(2 / 3)  # 47/5 is far off
    assert m["eval/format_accuracy"] == pytest.approx(2 / 3)
    assert m["eval/pass_at_k"] == pytest.approx(1.0)
    assert m["eval/maj_at_k"] == pytest.approx(2 / 3)          # 7|42 tie -> 7; 5; 3
    assert m["eval/sampled_accuracy"] == pytest.approx((1 / 2 + 2 / 3 + 2 / 3) / 3)
    assert m["eval/mean_reward"] == pytest.approx((1.1 + 0 + 1.1) / 3)
    scored = rewards.score_all(terms, [f"{R}<answer>42</answer>", "The answer is 42"],
                               ["42", "42"])
    assert {k: sum(v) for k, v in scored.items()} == pytest.approx(
        {"match_format_exactly": 0.1, "match_format_approximately": 0.0, "check_numbers": 1.0})
