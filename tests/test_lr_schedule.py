"""The learning-rate schedule as optimizer state (rlexp.engine.lr_schedule): optax's values and
AdamW updates, and one compiled update for any rate, length, warm-up and end rate."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from rlexp.config.schema import LR_SCHEDULES, Config
from rlexp.engine import lr_schedule
from rlexp.engine.tunix_adapter import (host_lr_schedule, optimizer, schedule_numbers,
                                        updates_per_step)

# Values agree to float32 rounding of the peak rate, not bit for bit: optax's own schedule
# differs between eager and jitted evaluation by up to 3.6e-7 of the value (XLA folds its
# constants), and the warm-up's (0 - peak) * (1 - c / n) + peak cancels near its start, where
# one ulp of the fraction is up to 5e-6 of a small value (6.7e-6 at 1e-3 over 149 updates).
RTOL = 1e-6


def optax_schedule(cfg: Config) -> optax.Schedule:
    """The oracle: train.* as optax's own schedules, counted in optimizer updates."""
    t = cfg.train
    total = max(t.steps * updates_per_step(cfg), 1)
    if t.lr_schedule == "constant":
        return optax.constant_schedule(t.learning_rate)
    if t.lr_schedule == "cosine":
        return optax.cosine_decay_schedule(t.learning_rate, total,
                                           alpha=t.end_learning_rate / t.learning_rate)
    warmup = min(t.warmup_steps * updates_per_step(cfg), total - 1)
    if t.lr_schedule == "linear":
        decay = optax.linear_schedule(t.learning_rate, t.end_learning_rate, total - warmup)
        if warmup == 0:
            return decay
        return optax.join_schedules([optax.linear_schedule(0.0, t.learning_rate, warmup), decay],
                                    [warmup])
    return optax.warmup_cosine_decay_schedule(0.0, t.learning_rate, warmup, total,
                                              end_value=t.end_learning_rate)


def config(kind: str, steps: int, warmup: int, lr: float, end: float) -> Config:
    cfg = Config()
    t = cfg.train
    t.lr_schedule, t.steps, t.warmup_steps, t.learning_rate, t.end_learning_rate = \
        kind, steps, warmup, lr, end
    return cfg


CASES = [(steps, warmup, lr, end) for steps in (1, 2, 7, 150) for warmup in (0, 1, 3, 200)
         for lr, end in ((3e-6, 0.0), (1e-3, 1e-4), (7e-5, 3.3e-6))]


@pytest.mark.parametrize("kind", LR_SCHEDULES)
def test_schedules_equal_optax_at_every_update(kind):
    for steps, warmup, lr, end in CASES:
        cfg = config(kind, steps, warmup, lr, end)
        total = steps * updates_per_step(cfg)
        counts = np.arange(total + 3, dtype=np.int32)  # past the end: held at the end value
        ref = optax_schedule(cfg)
        want = np.asarray(jax.jit(jax.vmap(lambda c: ref(c) * jnp.ones((), jnp.float32)))(counts))
        host = host_lr_schedule(cfg)
        got = np.array([host(c) for c in counts], np.float32)
        np.testing.assert_allclose(got, want, rtol=RTOL, atol=RTOL * lr,
                                   err_msg=str((kind, steps, warmup, lr, end)))


def test_schedules_by_hand_in_optimizer_updates():
    """Counted in optimizer updates: 2 mini-batches x 2 iterations = 4 a step, 40 in all."""
    cfg = Config()
    cfg.train.steps, cfg.train.learning_rate = 10, 1e-3
    cfg.algo.num_iterations, cfg.train.batch_size, cfg.train.mini_batch_size = 2, 8, 4
    assert updates_per_step(cfg) == 4
    cfg.train.lr_schedule = "constant"
    assert host_lr_schedule(cfg)(25) == pytest.approx(1e-3)
    cfg.train.lr_schedule = "cosine"
    s = host_lr_schedule(cfg)
    assert s(0) == pytest.approx(1e-3)
    assert s(20) == pytest.approx(0.5e-3, rel=1e-5)  # half way through 40 updates
    assert s(40) == pytest.approx(0.0, abs=1e-9)
    cfg.train.lr_schedule, cfg.train.warmup_steps = "warmup_cosine", 1
    s = host_lr_schedule(cfg)
    assert s(0) == 0.0 and s(2) == pytest.approx(0.5e-3) and s(4) == pytest.approx(1e-3)
    assert all(isinstance(s(k), float) for k in range(42))


def _params():
    keys = jax.random.split(jax.random.key(0), 3)
    return {"w": jax.random.normal(keys[0], (4, 3)), "b": jax.random.normal(keys[1], (3,))}


def _train(tx: optax.GradientTransformation, updates: int) -> dict:
    params = _params()
    state = tx.init(params)
    grads = [jax.tree.map(lambda p, i=i: jnp.sin(p * (i + 1)), params) for i in range(updates)]
    step = jax.jit(tx.update)
    for g in grads:
        delta, state = step(g, state, params)
        params = optax.apply_updates(params, delta)
    return params


@pytest.mark.parametrize("kind", LR_SCHEDULES)
def test_adamw_with_the_schedule_in_its_state_equals_optax_adamw(kind):
    cfg = config(kind, 6, 2, 1e-2, 1e-3)
    cfg.train.grad_clip, cfg.train.weight_decay = 0.5, 0.1
    ref = optax.chain(optax.clip_by_global_norm(0.5),
                      optax.adamw(optax_schedule(cfg), b1=0.9, b2=0.99, weight_decay=0.1))
    want, got = _train(ref, 8), _train(optimizer(cfg), 8)
    for name in want:
        assert not np.allclose(got[name], _params()[name])  # it trained
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=1e-7, err_msg=name)


def _update_program(tx: optax.GradientTransformation) -> str:
    params = _params()
    return jax.jit(tx.update).lower(params, tx.init(params), params).as_text()


def test_one_program_for_any_rate_length_warmup_and_end_rate():
    """A learning-rate or length sweep compiles the update once (and hits the persistent
    compilation cache, keyed by the program, in each later job); optax's schedules do not."""
    a, b = config("warmup_cosine", 8, 1, 3e-6, 0.0), config("warmup_cosine", 150, 10, 1e-4, 1e-5)
    assert _update_program(optimizer(a)) == _update_program(optimizer(b))
    assert _update_program(optax.adamw(optax_schedule(a))) != \
        _update_program(optax.adamw(optax_schedule(b)))
    # the kind is the program's own
    assert _update_program(optimizer(a)) != \
        _update_program(optimizer(config("linear", 8, 1, 3e-6, 0.0)))


def test_restored_numbers_are_replaced_by_the_configs():
    """A checkpoint carries the numbers of the run that saved it; a resumed run with a longer
    train.steps follows its own schedule."""
    from flax import nnx

    saved, resumed = config("warmup_cosine", 8, 1, 1e-3, 0.0), config("warmup_cosine", 20, 1,
                                                                       1e-3, 0.0)
    model = nnx.Linear(3, 2, rngs=nnx.Rngs(0))
    opt = nnx.Optimizer(model, optimizer(saved), wrt=nnx.Param)
    lr_schedule.set_numbers(opt, schedule_numbers(resumed))
    found = {path[-1]: float(v.get_value())
             for path, v in nnx.state(opt, nnx.optimizer.OptState).flat_state()
             if lr_schedule.STATE_KEY in path}
    assert found == {k: float(v) for k, v in schedule_numbers(resumed).items()}
    assert found["decay_steps"] != float(schedule_numbers(saved)["decay_steps"])
