"""rollout.off_policy_steps and the sampler's log-prob cadence (rlexp.engine.learner).

The loss's ratio against the behaviour log-probs recorded at sampling, by hand; the rows a batch
sampled ahead hands to Tunix's calls; which steps ask the sampler for log-probs. The staleness
metric and a SIGKILL mid-run are checked with real processes in tests/test_reliability.py.
"""

from __future__ import annotations

import math
from concurrent import futures

import jax.numpy as jnp
import numpy as np
import pytest
from tunix.rl.grpo.grpo_learner import TrainExample
from tunix.rl.rl_cluster import Mode
from tunix.rl.rollout.base_rollout import RolloutOutput

from rlexp.config.schema import AlgoConfig
from rlexp.engine import algo_registry as registry
from rlexp.engine.learner import Ahead, as_behaviour
from rlexp.engine.rollout.vanilla import VanillaBackend
from rlexp.config.rollouts import rollout_spec


def test_the_ratio_is_taken_against_the_behaviour_log_probs():
    """2 rows x 3 tokens, GRPO's clip at 0.2, sequence-mean-token-mean: r = exp(logp - b)."""
    logp = jnp.array([[-1.0, -2.0, -0.5], [-0.3, -1.0, -1.0]])
    behaviour = jnp.array([[-1.2, -1.5, np.nan], [-0.3, np.nan, np.nan]])  # NaN: no token
    example = TrainExample(prompt_ids=None, prompt_mask=None, completion_ids=jnp.ones((2, 3)),
                           completion_mask=jnp.array([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]]),
                           advantages=jnp.array([1.0, -1.0]), ref_per_token_logps=None,
                           old_per_token_logps=None)
    settings = registry.algo_settings(AlgoConfig(name="grpo", beta=0.0, epsilon=0.2), budget=3)
    loss, aux = registry.loss_from_logps(logp, as_behaviour(example, behaviour), settings)
    r = [math.exp(0.2), math.exp(-0.5), 1.0]  # 1.2214, 0.6065 | 1.0
    # token losses max(-A r, -A clip(r, 0.8, 1.2)): -1.2 (clipped), -0.6065 | +1.0
    np.testing.assert_allclose(float(loss), ((-1.2 - r[1]) / 2 + 1.0) / 2, rtol=1e-6)
    np.testing.assert_allclose(float(aux["ratio_mean"]), sum(r) / 3, rtol=1e-6)
    np.testing.assert_allclose([float(aux["ratio_max"]), float(aux["ratio_min"])],
                               [r[0], r[1]], rtol=1e-6)
    assert "logprob_diff" not in aux  # the gap to itself would read 0
    on_policy, _ = registry.loss_from_logps(logp, example, settings)  # ratio 1 everywhere
    np.testing.assert_allclose(float(on_policy), ((-1.0 - 1.0) / 2 + 1.0) / 2, rtol=1e-6)


def _sampled(rows: int) -> RolloutOutput:
    return RolloutOutput(text=[f"c{i}" for i in range(rows)], logits=None,
                         tokens=[np.arange(i + 1) for i in range(rows)],
                         left_padded_prompt_tokens=np.arange(rows * 2).reshape(rows, 2),
                         logprobs=[np.full(i + 1, -0.5 * i) for i in range(rows)])


def test_a_batch_sampled_ahead_hands_out_tunix_s_slices_in_order():
    future = futures.Future()
    future.set_result((_sampled(4), 1.5))
    ahead = Ahead(["a", "a", "b", "b"], version=3, future=future)
    first = ahead.take(["a", "a"])
    assert first.text == ["c0", "c1"] and first.logits is None
    np.testing.assert_array_equal(first.left_padded_prompt_tokens, [[0, 1], [2, 3]])
    second = ahead.take(["b", "b"])
    assert second.text == ["c2", "c3"] and ahead.taken == 4
    np.testing.assert_array_equal(second.logprobs[1], [-1.5] * 4)
    with pytest.raises(RuntimeError, match="not the prompts"):
        Ahead(["a", "b"], 0, future).take(["b"])


@pytest.mark.parametrize("overrides, steps", [
    ((), [1, 10, 20]),
    (("rollout.logprob_gap_every=0",), [1]),
    (("rollout.logprob_gap_every=7",), [1, 7, 14]),
    (("algo.rollout_correction=token_truncate",), list(range(1, 21))),
    (("rollout.off_policy_steps=1",), list(range(1, 21))),
])
def test_the_sampler_returns_log_probs_only_where_used(compose_config, overrides, steps):
    cfg = compose_config(*overrides)
    backend = VanillaBackend(cfg, rollout_spec(cfg))
    assert [s for s in range(1, 21) if backend.logprobs_at(s)] == steps
    every = len(steps) == 20  # the correction or the off-policy loss: every step, EVAL too
    assert {m: c.return_logprobs for m, c in backend.configs().items()} == {
        Mode.TRAIN: every, Mode.EVAL: every}


def test_bad_off_policy_steps_is_refused_in_one_line(compose_config):
    from rlexp.base.errors import UserError

    with pytest.raises(UserError, match=r"^rollout.off_policy_steps=-1 is invalid"):
        compose_config("rollout.off_policy_steps=-1")
