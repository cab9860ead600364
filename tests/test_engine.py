"""Slow: real Tunix runs of the tiny model (GRPO and GSPO), fresh sampling keys.

Two engines are built once per session (compiles are the cost) and differ only in
algo.name, so a difference in their updates is the token- vs sequence-level ratio.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.experimental.compilation_cache import compilation_cache

from rlexp.config.schema import Config
from rlexp.config.validate import validate
from rlexp.base.events import Listener, Listeners

pytestmark = pytest.mark.slow

STEPS = 3


def tiny_config(name: str, cache: Path) -> Config:
    c = Config()
    c.model.num_layers, c.model.embed_dim, c.model.hidden_dim = 1, 32, 64
    c.model.num_heads, c.model.num_kv_heads, c.model.head_dim = 2, 1, 16
    c.model.vocab_size = 128
    c.model.warm_start_steps, c.model.warm_start_batch_size = 60, 16
    c.algo.name, c.algo.num_generations, c.algo.num_iterations = name, 4, 2
    c.algo.beta, c.algo.epsilon, c.algo.epsilon_high = 0.04, 0.2, 0.28
    c.dataset.num_train, c.dataset.num_eval = 64, 8
    c.rollout.max_prompt_length, c.rollout.max_completion_length, c.rollout.kv_cache_size = 64, 16, 80
    c.train.steps, c.train.batch_size, c.train.learning_rate = STEPS, 4, 1e-3
    # The toy settings these tests were written with (the schema's defaults are real-model's).
    c.train.lr_schedule, c.train.grad_clip, c.train.weight_decay = "constant", 1.0, 0.0
    c.train.remat = "none"
    c.eval.num_samples, c.eval.pass_k, c.eval.every = 8, 2, 2
    c.run.cache_dir = str(cache)
    return validate(c)


class Recorder(Listener):
    def __init__(self):
        self.metrics, self.evals, self.rollouts = [], [], []

    def on_metrics(self, step, metrics):
        self.metrics.append((step, metrics))

    def on_eval(self, step, metrics, samples):
        self.evals.append((step, metrics, samples))

    def on_rollouts(self, step, rows):
        self.rollouts.append((step, rows))


@pytest.fixture(scope="session")
def runs(tmp_path_factory):
    """Build both engines from the same seed and warm start; run STEPS steps each."""
    from rlexp import engine as engine_lib
    from rlexp.job import loop
    from rlexp.planning.plan import make_plan

    cache = tmp_path_factory.mktemp("cache")
    # JAX opens its persistent compilation cache once per process, at the first compile: an
    # earlier test file's run in this worker would have opened its own dir. Reset it, so these
    # runs' programs land in this fixture's <run.cache_dir>/jax, whatever ran before.
    compilation_cache.reset_cache()
    out = {}
    for name in ("grpo", "gspo"):
        cfg = tiny_config(name, cache)
        run_dir = tmp_path_factory.mktemp(name)
        eng = engine_lib.build(cfg, make_plan(cfg), run_dir)
        before = eng.policy_state()
        rec = Recorder()
        with CompileLog() as compiles:
            summary = loop.train_steps(cfg, eng, Listeners([rec]), run_dir)
        out[name] = dict(cfg=cfg, engine=eng, before=before, after=eng.policy_state(),
                         rec=rec, summary=summary, compiles=compiles.names)
    return out


class CompileLog(logging.Handler):
    """The names of the programs JAX compiles (or loads from its cache) while open, read from
    the lines jax_log_compiles makes it log."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.names: list[str] = []
        self.logger = logging.getLogger("jax._src.interpreters.pxla")

    def emit(self, record):
        match = re.match(r"Compiling jit\((\w+)\)", record.getMessage())
        if match:
            self.names.append(match.group(1))

    def __enter__(self):
        self.was = jax.config.jax_log_compiles
        jax.config.update("jax_log_compiles", True)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc):
        self.logger.removeHandler(self)
        jax.config.update("jax_log_compiles", self.was)


@pytest.mark.parametrize("name", ["grpo", "gspo"])
def test_steps_with_and_without_sampler_log_probs_share_one_compiled_update(runs, name):
    """Step 1 has the sampler's log-probs (rollout.logprob_gap_every: the first step), steps 2
    and 3 none: the update's inputs keep one structure, so its program compiles once (twice
    cost a 15 s compile of the tiny model on a 2-core CPU, minutes for a real one)."""
    r = runs[name]
    assert r["cfg"].rollout.logprob_gap_every > STEPS
    assert r["compiles"].count("_train_step") == 1, r["compiles"]
    gaps = [s for s, m in r["rec"].metrics if "rollout/logprob_diff" in m]
    assert gaps == [1]


@pytest.mark.parametrize("name", ["grpo", "gspo"])
def test_three_step_run_learns_and_reports(runs, name):
    r = runs[name]
    changed = [k for k in r["before"] if not np.allclose(r["before"][k], r["after"][k])]
    assert len(changed) == len(r["before"])  # every parameter moved
    steps = [s for s, _ in r["rec"].metrics]
    assert steps == [1, 2, 3]
    m = r["rec"].metrics[-1][1]
    for key in ("train/reward_mean", "train/loss", "train/kl", "train/clip_fraction",
                "train/grad_norm", "train/completion_length", "time/step_s",
                "time/rollout_s", "time/train_s", "throughput/tokens_per_s",
                "train/learning_rate", *[f"train/reward/{t.name}" for t in r["engine"].terms]):
        assert np.isfinite(m[key]), key
    assert m["train/updates"] == 2  # num_iterations=2
    assert m["train/reward_mean"] == pytest.approx(
        sum(m[f"train/reward/{t.name}"] for t in r["engine"].terms))
    # step diagnostics (TRL GRPOTrainer's family), from the step's own data
    cap = r["cfg"].rollout.max_completion_length
    assert (1 <= m["train/completion_length_min"] <= m["train/completion_length"]
            <= m["train/completion_length_max"] <= cap)
    assert 0 <= m["train/clipped_ratio"] <= 1 and 0 <= m["train/zero_std_groups"] <= 1
    assert 0 < m["train/entropy"] <= np.log(r["cfg"].model.vocab_size) + 1e-4
    seen = [x["train/tokens_seen"] for _, x in r["rec"].metrics]
    rows = r["cfg"].train.batch_size * r["cfg"].algo.num_generations
    assert seen[0] >= rows * r["rec"].metrics[0][1]["train/completion_length"]
    assert all(b > a for a, b in zip(seen, seen[1:]))  # cumulative
    assert m["time/fetch_s"] >= 0
    # JAX's persistent compilation cache is on by default, under <run.cache_dir>/jax
    used = Path(jax.config.jax_compilation_cache_dir or "/nonexistent")
    assert used == Path(r["cfg"].run.cache_dir) / "jax"
    assert used.is_dir() and any(used.iterdir())
    assert [s for s, _, _ in r["rec"].evals] == [0, 2, 3]  # before, every 2, after
    ev, samples = r["rec"].evals[-1][1], r["rec"].evals[-1][2]
    for key in ("eval/accuracy", "eval/partial_accuracy", "eval/format_accuracy",
                "eval/mean_reward", "eval/pass_at_k"):
        assert 0 <= ev[key] <= max(1.0, ev["eval/mean_reward"])
    assert samples and set(samples[0]) == {"prompt", "completion", "answer", "reward", "correct"}
    s = r["summary"]
    assert s["steps_done"] == STEPS and s["eval_after"] == ev and s["train_final"] == m
    assert s["eval_before"] == r["rec"].evals[0][1]



@pytest.mark.parametrize("name", ["grpo", "gspo"])
def test_training_rollouts_and_their_distributions_come_from_the_step(runs, name):
    """At each evaluation (eval.every=2, and the last step) the step's completions, one row
    each; the rewards add up, the advantages are the group-normalised totals, and the step's
    reward/advantage quantiles are those of the rows."""
    from rlexp.algo.advantages import group_advantages

    r = runs[name]
    cfg, terms = r["cfg"], r["engine"].terms
    assert [s for s, _ in r["rec"].rollouts] == [2, 3]
    step, rows = r["rec"].rollouts[-1]
    assert len(rows) == cfg.train.batch_size * cfg.algo.num_generations
    assert set(rows[0]) == {"prompt", "completion", "reward", "advantage", "length",
                            "truncated", *[t.name for t in terms]}
    total = np.array([row["reward"] for row in rows])
    assert total == pytest.approx([sum(row[t.name] for t in terms) for row in rows])
    adv = np.array([row["advantage"] for row in rows])
    np.testing.assert_allclose(adv, group_advantages(total, cfg.algo.num_generations),
                               atol=1e-5)
    prompts = [row["prompt"] for row in rows]
    G = cfg.algo.num_generations
    assert all(len(set(prompts[i:i + G])) == 1 for i in range(0, len(rows), G))
    cap = cfg.rollout.max_completion_length
    assert all(row["truncated"] == (row["length"] >= cap) for row in rows)
    m = dict(r["rec"].metrics)[step]
    assert m["train/reward_dist/p50"] == pytest.approx(np.percentile(total, 50))
    assert m["train/advantage_dist/min"] == pytest.approx(adv.min(), abs=1e-5)
    assert m["train/reward_mean"] == pytest.approx(total.mean())


def test_warm_start_is_cached_and_shared(runs):
    assert runs["grpo"]["engine"].info["warm_start/cached"] == 0
    assert runs["gspo"]["engine"].info["warm_start/cached"] == 1
    for k in runs["grpo"]["before"]:
        np.testing.assert_array_equal(runs["grpo"]["before"][k], runs["gspo"]["before"][k])


def test_gspo_and_grpo_updates_differ_off_policy(runs):
    """Same start, data and keys; only the ratio level differs (num_iterations=2)."""
    g, s = runs["grpo"], runs["gspo"]
    # the premise: rewards vary within groups, and the second update is off-policy
    assert any(m["train/reward_mean"] > 0 for _, m in g["rec"].metrics)
    assert any(m["train/ratio_max"] > 1.0001 for _, m in g["rec"].metrics)
    diff = max(np.abs(g["after"][k] - s["after"][k]).max() for k in g["after"])
    assert diff > 1e-6


def test_fresh_sampling_key_every_step(runs):
    from rlexp.engine import rollout_key

    eng = runs["grpo"]["engine"]
    prompts = [e.prompt for e in eng.splits.eval[:4]] * 4
    a = eng.generate(prompts, rollout_key(0, 1), greedy=False)
    b = eng.generate(prompts, rollout_key(0, 1), greedy=False)
    c = eng.generate(prompts, rollout_key(0, 2), greedy=False)
    assert a == b  # the key alone decides the noise
    assert sum(x != y for x, y in zip(a, c)) >= len(a) // 2
    # the training path: the same prompts on two consecutive steps sample differently
    cfg = runs["grpo"]["cfg"]
    batch = eng.splits.train_batch(0, cfg.train.batch_size, cfg.train.seed)
    texts = []
    for step in (10, 11):
        eng.train_step(batch, rollout_key(cfg.train.seed, step))
        texts.append(list(eng.probe.texts))
    same = sum(x == y for x, y in zip(*texts))
    assert same < len(texts[0]) // 2, f"{same} of {len(texts[0])} completions repeated"
