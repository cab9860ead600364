"""The learning-rate schedule as optimizer state: one compiled update for every rate and length.

optax's schedules close over their numbers (peak rate, updates, warm-up, end rate), so XLA
compiles them into the train step as constants: each train.learning_rate, train.steps,
train.warmup_steps or train.end_learning_rate is a program of its own, compiled cold (the
persistent cache is keyed by the program): 14 s of XLA for the tiny model's train step on a
2-core CPU, minutes per job of a learning-rate sweep for a real model on a TPU. Here the same
formulas (optax 0.2.8, schedules/_schedule.py polynomial_schedule, cosine_decay_schedule,
warmup_cosine_decay_schedule and _join.py join_schedules) read those numbers from float32
scalars in the optimizer state, and the update is otherwise optax.adamw's chain. Only the kind
is part of the program. The values equal optax's to float32 rounding of the peak rate, not bit
for bit: XLA folds optax's constants differently (tests/test_lr_schedule.py).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


class ScheduleState(NamedTuple):
    count: jax.Array  # optimizer updates done, as optax.ScaleByScheduleState's
    lr_schedule: dict[str, jax.Array]  # schedule_numbers(): f32 scalars, inputs of the program


# The state's dict key: a restored checkpoint's numbers are replaced by the config's under it.
STATE_KEY = ScheduleState._fields[1]


def schedule_numbers(kind: str, peak: float, end: float, warmup: int, total: int
                     ) -> dict[str, np.float32]:
    """The scalars schedule_value() reads, computed in float64 and rounded once to float32,
    as optax's Python numbers are when traced. `total` updates, the first `warmup` rising from
    0 to `peak` (warmup_cosine and linear); then cosine or a line to `end` at update `total`."""
    if kind in ("constant", "cosine"):
        warmup = 0
    alpha = 0.0 if peak == 0.0 else end / peak
    numbers = {"peak": peak, "end": end, "warmup": warmup, "decay_steps": total - warmup,
               "alpha": alpha, "one_minus_alpha": 1 - alpha,
               "rise": 0.0 - peak, "fall": peak - end}
    return {k: np.float32(v) for k, v in numbers.items()}


def schedule_value(kind: str, count: Any, n: dict[str, Any]) -> Any:
    """The rate at update `count` (int32) from schedule_numbers `n`, in optax's operations."""
    if kind == "constant":
        return n["peak"]

    def rise(c: Any) -> Any:  # linear_schedule(0, peak, warmup)
        c = jnp.clip(c, 0, n["warmup"])
        frac = 1 - c / n["warmup"]
        return n["rise"] * (frac**1) + n["peak"]

    def decay(c: Any) -> Any:
        if kind == "linear":  # linear_schedule(peak, end, total - warmup)
            c = jnp.clip(c, 0, n["decay_steps"])
            frac = 1 - c / n["decay_steps"]
            return n["fall"] * (frac**1) + n["end"]
        # cosine_decay_schedule(peak, total - warmup, alpha=end / peak)
        c = jnp.minimum(c, n["decay_steps"])
        cosine = 0.5 * (1 + jnp.cos(jnp.pi * c / n["decay_steps"]))
        return n["peak"] * (n["one_minus_alpha"] * cosine**1.0 + n["alpha"])

    # join_schedules([rise, decay], [warmup]); with no warm-up the rise is never taken
    return jnp.where(count < n["warmup"], rise(count), decay(count - n["warmup"]))


def scale_by_lr_schedule(kind: str, numbers: dict[str, np.float32]
                         ) -> optax.GradientTransformation:
    """optax.scale_by_learning_rate(schedule) with the schedule's numbers in the state."""

    def init(params: Any) -> ScheduleState:
        del params
        return ScheduleState(jnp.zeros([], jnp.int32),
                             {k: jnp.asarray(v, jnp.float32) for k, v in numbers.items()})

    def update(updates: Any, state: ScheduleState, params: Any = None) -> tuple[Any, Any]:
        del params
        step_size = -1 * schedule_value(kind, state.count, state.lr_schedule)
        updates = jax.tree.map(lambda g: jnp.array(step_size, dtype=g.dtype) * g, updates)
        return updates, ScheduleState(optax.safe_increment(state.count), state.lr_schedule)

    return optax.GradientTransformation(init, update)


def adamw(kind: str, numbers: dict[str, np.float32], b1: float, b2: float,
          weight_decay: float) -> optax.GradientTransformation:
    """optax.adamw(schedule, b1, b2, weight_decay=...) with the schedule in the state."""
    return optax.chain(optax.scale_by_adam(b1=b1, b2=b2),
                       optax.add_decayed_weights(weight_decay),
                       scale_by_lr_schedule(kind, numbers))


def set_numbers(optimizer: Any, numbers: dict[str, np.float32]) -> None:
    """Put `numbers` into an nnx.Optimizer's schedule state, on each array's own sharding (a
    restored checkpoint carries the numbers of the run that saved it; the config decides)."""
    from flax import nnx

    state = nnx.state(optimizer, nnx.optimizer.OptState)
    for path, variable in state.flat_state():
        if len(path) >= 2 and path[-2] == STATE_KEY:
            old, host = variable.get_value(), np.asarray(numbers[path[-1]], np.float32)
            variable.set_value(jax.make_array_from_callback(old.shape, old.sharding,
                                                            lambda index: host[index]))
    nnx.update(optimizer, state)
