"""Gradient accumulation and the loss's divisors: micro-batch 1 and micro-batch = mini-batch
give the same update (rlexp.engine.learner.Learner._prepare_data), and Dr.GRPO's
constant is rows x rollout.max_completion_length whatever the masks."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlexp.algo.losses import aggregate, policy_loss, truncated_rows
from rlexp.config.schema import AlgoConfig

from rlexp.engine import algo_registry as registry  # noqa: E402  (a broken import fails here, never skips)
from rlexp.engine.learner import WindowQueue  # noqa: E402
from tunix.rl.grpo.grpo_learner import TrainExample  # noqa: E402

G, PROMPTS, T, V, EOS, BUDGET = 4, 2, 6, 5, 4, 6


def batch(seed: int = 0):
    """8 rows in 2 groups of 4, ragged lengths, rows 1 and 3 truncated (full, no EOS), row 6
    full but ending in EOS; tokens are the contexts of a shared [V, V] logit table."""
    rng = np.random.default_rng(seed)
    lengths = np.array([3, 6, 2, 6, 4, 1, 6, 5])
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float32)
    ids = rng.integers(0, EOS, size=(PROMPTS * G, T))  # never EOS...
    for row, n in enumerate(lengths):
        if row not in (1, 3):
            ids[row, n - 1] = EOS  # ...but at the end of the rows that finished
    ids = np.where(mask > 0, ids, 0).astype(np.int32)
    adv = rng.normal(0, 1, PROMPTS * G).astype(np.float32)
    return ids, mask, adv


def logps(table, ids):
    """Per-token log-probs of a bigram model: one [V, V] table shared by every row."""
    prev = jnp.concatenate([jnp.zeros_like(ids[:, :1]), ids[:, :-1]], axis=1)
    logits = table[prev]
    return jnp.take_along_axis(jax.nn.log_softmax(logits), ids[..., None], -1)[..., 0]


def example(ids, mask, adv, old, ref):
    return TrainExample(prompt_ids=None, prompt_mask=None, completion_ids=jnp.asarray(ids),
                        completion_mask=jnp.asarray(mask), advantages=jnp.asarray(adv),
                        ref_per_token_logps=ref, old_per_token_logps=old)


def update(settings, table, examples):
    """The parameter change that SGD(1) under optax.MultiSteps (Tunix's accumulation, which
    averages the micro-batch gradients) makes after len(examples) micro-steps."""
    opt = optax.MultiSteps(optax.sgd(1.0), len(examples))
    state = opt.init(table)
    params = table

    def loss(p, ex):
        return registry.loss_from_logps(logps(p, ex.completion_ids), ex, settings, EOS)[0]

    for ex in examples:
        updates, state = opt.update(jax.grad(loss)(params, ex), state, params)
        params = optax.apply_updates(params, updates)
    return np.asarray(params - table)


def algo(name, **over):
    defaults = dict(grpo=dict(), gspo=dict(ratio_level="sequence", epsilon=3e-4, epsilon_high=4e-4),
                    dapo=dict(loss_agg="token-mean", epsilon_high=0.28, dynamic_sampling=True),
                    dr_grpo=dict(loss_agg="sequence-mean-token-scale", scale_rewards="none"))
    return AlgoConfig(name=name, num_generations=G, num_iterations=2, beta=0.04,
                      **{**defaults[name], **over})


@pytest.mark.parametrize("name, mask_truncated, agg", [
    *((name, truncate, None) for name in ("grpo", "gspo", "dapo", "dr_grpo")
      for truncate in (False, True)),
    ("grpo", True, "token-mean"), ("grpo", True, "sequence-mean-token-sum")])
def test_micro_batch_one_gives_the_mini_batch_update(name, mask_truncated, agg):
    ids, mask, adv = batch()
    adv[4:] = 0.0 if name == "dapo" else adv[4:]  # dynamic sampling drops group 1
    over = {"loss_agg": agg} if agg else {}
    settings = registry.algo_settings(algo(name, mask_truncated=mask_truncated, **over),
                                      budget=BUDGET)
    rng = np.random.default_rng(1)
    table = jnp.asarray(rng.normal(0, 1, (V, V)), jnp.float32)
    lp = logps(table, ids)  # the old and reference policies: near the current one, so
    old = lp + jnp.asarray(rng.normal(0, 0.3, lp.shape), jnp.float32)  # clipping acts
    ref = lp + jnp.asarray(rng.normal(0, 0.2, lp.shape), jnp.float32)
    whole = update(settings, table, [example(ids, mask, adv, old, ref)])
    micro = [example(ids[i:i + G], mask[i:i + G], adv[i:i + G], old[i:i + G], ref[i:i + G])
             for i in range(0, PROMPTS * G, G)]  # micro-batch 1 prompt = G rows
    windowed = update(settings, table, registry.with_window(micro, settings, EOS))
    np.testing.assert_allclose(windowed, whole, rtol=0, atol=1e-6)
    assert np.abs(whole).max() > 1e-3


@pytest.mark.parametrize("name, mask_truncated", [("dapo", False), ("grpo", True)])
def test_per_micro_batch_divisors_would_change_the_update(name, mask_truncated):
    """The counts differ between the two micro-batches (17 vs 16 tokens; 2 vs 4 rows kept):
    each dividing by its own, as before the window, gives another update."""
    ids, mask, adv = batch()
    settings = registry.algo_settings(algo(name, mask_truncated=mask_truncated,
                                           dynamic_sampling=False), budget=BUDGET)
    table = jnp.asarray(np.random.default_rng(1).normal(0, 1, (V, V)), jnp.float32)
    whole = update(settings, table, [example(ids, mask, adv, None, None)])
    micro = [example(ids[i:i + G], mask[i:i + G], adv[i:i + G], None, None) for i in (0, G)]
    np.testing.assert_allclose(update(settings, table, registry.with_window(micro, settings, EOS)),
                               whole, rtol=0, atol=1e-6)
    assert np.abs(update(settings, table, micro) - whole).max() > 1e-3


def test_window_queue_passes_every_micro_batch_windowed_in_order():
    ids, mask, adv = batch()
    settings = registry.algo_settings(algo("dapo", dynamic_sampling=False), budget=BUDGET)
    a, b = (example(ids[i:i + G], mask[i:i + G], adv[i:i + G], None, None) for i in (0, G))

    class Queue:
        def __init__(self):
            self.items = []

        def put(self, item):
            self.items.append(item)

    out = Queue()
    q = WindowQueue(out, lambda exs: registry.with_window(exs, settings, EOS))
    for item in ([a], [b], [b], [a], None):  # num_iterations=2, the second pass shuffled
        q.put(item)
    assert out.items[-1] is None and len(out.items) == 5
    got = [batch_[0] for batch_ in out.items[:-1]]
    assert all(isinstance(ex, registry.WindowedExample) for ex in got)
    assert got[0] is got[3] and got[1] is got[2]  # one windowed object per micro-batch
    np.testing.assert_array_equal(np.asarray(got[0].completion_ids), ids[:G])
    # kept tokens over the window / 2 micro-batches: (3+6+2+6 + 4+1+6+5) / 2
    np.testing.assert_allclose(np.asarray(got[1].window_tokens), [33 / 2] * G)
    np.testing.assert_allclose(np.asarray(got[1].window_rows), [4.0] * G)


def test_dr_grpo_divides_by_rows_times_the_budget_whatever_the_masks():
    ids, mask, adv = batch()
    x = jnp.ones((8, T))
    kept = jnp.asarray(mask)
    kept = kept.at[1].set(0).at[3].set(0)  # two truncated rows masked out
    total = float(kept.sum())
    # TRL 1.16 loss_type="dr_grpo": (per_token_loss * mask).sum() / (B * max_completion_length)
    assert float(aggregate(x, kept, "sequence-mean-token-scale", budget=8)) == pytest.approx(
        total / (8 * 8))
    assert float(aggregate(x, kept, "sequence-mean-token-scale")) == pytest.approx(total / (8 * T))
    s = AlgoConfig(ratio_level="token", epsilon=0.2, epsilon_high=0.2, beta=0.0,
                   kl_estimator="k3", loss_agg="sequence-mean-token-scale", mask_truncated=True)
    lp = jnp.zeros((8, T))
    adv1 = jnp.ones(8)
    loss, _ = policy_loss(lp, None, None, adv1, jnp.asarray(mask), s,
                          truncated_rows(jnp.asarray(ids), jnp.asarray(mask), EOS, BUDGET), BUDGET)
    assert float(loss) == pytest.approx(-(mask.sum() - 12) / (8 * BUDGET))  # not / (6 * ...)


def test_truncation_is_measured_against_the_budget_not_the_width():
    ids, mask, _ = batch()
    np.testing.assert_array_equal(np.asarray(truncated_rows(jnp.asarray(ids), jnp.asarray(mask),
                                                            EOS)), [i in (1, 3) for i in range(8)])
    wide_ids = np.pad(ids, ((0, 0), (0, 3)))  # the same completions padded to width 9
    wide_mask = np.pad(mask, ((0, 0), (0, 3)))
    np.testing.assert_array_equal(
        np.asarray(truncated_rows(jnp.asarray(wide_ids), jnp.asarray(wide_mask), EOS, BUDGET)),
        [i in (1, 3) for i in range(8)])
    assert not np.asarray(truncated_rows(jnp.asarray(wide_ids), jnp.asarray(wide_mask), EOS)).any()


def _tiny(cache, micro):
    from rlexp.config.schema import Config
    from rlexp.config.validate import validate

    c = Config()
    c.model.num_layers, c.model.embed_dim, c.model.hidden_dim = 1, 32, 64
    c.model.num_heads, c.model.num_kv_heads, c.model.head_dim = 2, 1, 16
    c.model.vocab_size = 128
    c.model.warm_start_steps, c.model.warm_start_batch_size = 60, 16
    a = c.algo
    a.name, a.num_generations, a.num_iterations, a.beta = "dapo", 4, 1, 0.0
    a.loss_agg, a.epsilon_high = "token-mean", 0.28
    a.dynamic_sampling, a.mask_truncated = False, True
    c.dataset.num_train, c.dataset.num_eval = 64, 8
    r = c.rollout
    r.max_prompt_length, r.max_completion_length, r.kv_cache_size = 64, 16, 80
    c.rollout.micro_batch_size = 4  # one sampler call: the same completions at both sizes
    c.train.steps, c.train.batch_size, c.train.micro_batch_size = 1, 4, micro
    c.train.lr_schedule, c.train.grad_clip, c.train.weight_decay = "constant", 0.0, 0.0
    c.train.remat = "none"
    c.eval.num_samples, c.eval.pass_k = 8, 2
    c.run.cache_dir = str(cache)  # the session's run cache: compiled programs, warm starts
    return validate(c)


@pytest.mark.slow
def test_engine_update_is_the_same_at_micro_batch_one(tmp_path_factory, monkeypatch):
    """Through Tunix's learner and trainer (optax.MultiSteps) with SGD(1), so the parameter
    change is the accumulated gradient itself: 4 micro-batches of 1 prompt (4 completions
    of ragged lengths each) vs one of 4 prompts, from the same start, batch and key."""
    from rlexp import engine as engine_lib
    from rlexp.engine import rollout_key, tunix_adapter
    from rlexp.planning.plan import make_plan

    monkeypatch.setattr(tunix_adapter, "optimizer", lambda cfg: optax.sgd(1.0))
    cache = os.environ.get("RLEXP_CACHE_DIR") or tmp_path_factory.mktemp("cache")
    deltas, texts = [], []
    for micro in (None, 1):
        cfg = _tiny(cache, micro)
        eng = engine_lib.build(cfg, make_plan(cfg), tmp_path_factory.mktemp("run"))
        before = eng.policy_state()
        eng.train_step(eng.splits.train_batch(0, cfg.train.batch_size, cfg.train.seed),
                       rollout_key(cfg.train.seed, 1))
        after = eng.policy_state()
        deltas.append({k: after[k] - before[k] for k in before})
        texts.append(list(eng.probe.texts))
    assert texts[0] == texts[1]  # the premise: the same completions
    whole, micro = deltas
    assert max(np.abs(d).max() for d in whole.values()) > 1e-4
    for k in whole:
        np.testing.assert_allclose(micro[k], whole[k], rtol=0, atol=1e-6, err_msg=k)
