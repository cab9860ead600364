"""Evaluation metrics, the on-policy guard and the console table (no JAX)."""

from __future__ import annotations

import io

import pytest

from rlexp.job import guards
from rlexp.data import rewards
from rlexp.config.schema import Config, RewardConfig
from rlexp.job.console import ConsoleListener, before_after_table
from rlexp.job.evaluate import eval_metrics
from rlexp.base.events import RunInfo


def test_eval_metrics_by_hand():
    terms = rewards.terms(RewardConfig(), "answer")
    greedy = ["<answer>4</answer>", "<answer>5</answer>", "4", ""]
    answers = ["4", "6", "4", "1"]
    sampled = [["<answer>1</answer>", "<answer>4</answer>"], ["<answer>5</answer>", "x"],
               ["<answer>4</answer>", "<answer>4</answer>"], ["", ""]]
    m = eval_metrics(greedy, sampled, answers, terms, "answer")
    assert m["eval/accuracy"] == 0.25
    assert m["eval/format_accuracy"] == 0.5
    assert m["eval/partial_accuracy"] == pytest.approx((1 + 0.5 + 0 + 0) / 4)  # 5 is within 20% of 6
    assert m["eval/pass_at_k"] == 0.5
    assert m["eval/sampled_accuracy"] == pytest.approx((0.5 + 0 + 1 + 0) / 4)
    # weighted: 1st = 0.5 + 0.25 + 1 + 0.5, 2nd = 0.5 + 0.25 + 0 + 0.25
    assert m["eval/mean_reward"] == pytest.approx((2.25 + 1.0) / 4)


def test_on_policy_guard():
    cfg = Config()
    cfg.algo.num_iterations = 1
    assert guards.on_policy_noop(cfg)
    cfg.train.mini_batch_size = cfg.train.batch_size // 2  # Tunix re-samples each mini-batch
    assert guards.on_policy_noop(cfg)
    cfg.algo.num_iterations = 2
    assert not guards.on_policy_noop(cfg)
    assert guards.NOOP_KEYS[:4] == ("algo.epsilon", "algo.epsilon_high", "algo.name",
                                    "algo.ratio_level")


def test_noop_warning_is_one_line():
    cfg = Config()
    cfg.algo.num_iterations = 1
    line = guards.noop_warning([cfg], ["algo.epsilon=0.1"], {}, multirun=False)
    assert line and "algo.epsilon" in line and "\n" not in line


def test_before_after_table_and_console_listener():
    before = {"eval/accuracy": 0.1, "eval/pass_at_k": 0.5, "eval/k": 4}
    after = {"eval/accuracy": 0.45, "eval/pass_at_k": 0.75, "eval/k": 4}
    table = before_after_table(before, after)
    assert "accuracy" in table and "+0.350" in table and "+0.250" in table
    out = io.StringIO()
    c = ConsoleListener(Config(), stream=out)
    c.on_run_start(RunInfo(name="t", run_dir=None, params={}, tags={}, total_steps=2))
    c.on_eval(0, before, [])
    c.on_metrics(1, {"train/reward_mean": 1.0, "time/step_s": 0.5})
    c.on_eval(2, after, [])
    c.on_run_end("FINISHED", {"steps_done": 2, "eval_before": before, "eval_after": after})
    text = out.getvalue()
    assert "eval @ step 0: accuracy 0.100" in text and "+0.350" in text and "finished after 2" in text
