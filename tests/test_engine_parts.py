"""Engine pieces without compiling a model: step metrics, learning-rate schedules, keys."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.config import Config
from rlexp.engine.probes import StepProbe


def test_probe_metrics_by_hand():
    p = StepProbe()
    p.record_reward("answer_exact", [1.0, 0.0, 0.0, 1.0])
    p.record_reward("format_exact", [0.5, 0.5, 0.5, 0.0])
    for loss, ratio_max, ratio_min, kl in ((0.2, 1.5, 0.9, 0.01), (0.4, 1.2, 0.7, 0.03)):
        p.updates["loss"].append(loss)
        p.updates["ratio_max"].append(ratio_max)
        p.updates["ratio_min"].append(ratio_min)
        p.updates["kl"].append(kl)
    p.completion_tokens, p.completions = 30, 4
    m = p.metrics()
    assert m["train/reward/answer_exact"] == 0.5 and m["train/reward/format_exact"] == 0.375
    assert m["train/reward_mean"] == pytest.approx(0.875)  # the weighted terms add up
    assert m["train/loss"] == pytest.approx(0.3) and m["train/kl"] == pytest.approx(0.02)
    assert m["train/ratio_max"] == 1.5 and m["train/ratio_min"] == 0.7  # extremes, not means
    assert m["train/updates"] == 2 and m["train/completion_length"] == 7.5
    p.reset()
    assert p.metrics() == {}


def test_learning_rate_schedules():
    from rlexp.engine.tunix_adapter import lr_schedule, updates_per_step

    cfg = Config()
    cfg.train.steps, cfg.train.learning_rate = 10, 1e-3
    cfg.algo.num_iterations, cfg.train.batch_size, cfg.train.mini_batch_size = 2, 8, 4
    assert updates_per_step(cfg) == 4  # 2 mini-batches x 2 iterations
    cfg.train.lr_schedule = "constant"
    assert float(lr_schedule(cfg)(25)) == pytest.approx(1e-3)
    cfg.train.lr_schedule = "cosine"
    s = lr_schedule(cfg)
    assert float(s(0)) == pytest.approx(1e-3)
    assert float(s(20)) == pytest.approx(0.5e-3, rel=1e-5)  # half way through 40 updates
    assert float(s(40)) == pytest.approx(0.0, abs=1e-9)
    cfg.train.lr_schedule, cfg.train.warmup_steps = "warmup_cosine", 1
    s = lr_schedule(cfg)
    assert float(s(0)) == 0.0 and float(s(2)) == pytest.approx(0.5e-3) and float(s(4)) == pytest.approx(1e-3)


def test_keys_are_pure_and_distinct():
    import jax

    from rlexp.engine import eval_key, rollout_key

    same = np.asarray(jax.random.key_data(rollout_key(3, 7))) == np.asarray(jax.random.key_data(rollout_key(3, 7)))
    assert same.all()
    data = {tuple(np.asarray(jax.random.key_data(k)).ravel())
            for k in (rollout_key(3, 7), rollout_key(3, 8), rollout_key(4, 7), eval_key(3))}
    assert len(data) == 4
