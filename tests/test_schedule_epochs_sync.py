"""The linear-to-end learning-rate schedule (train.lr_schedule=linear, train.end_learning_rate),
train.epochs (train.steps derived from the dataset size) and rollout.sync_every, against
hand-computed values."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from rlexp.base.errors import UserError
from rlexp.config.rules import epoch_steps
from rlexp.data import batch_indices

TINY = ("train.batch_size=4", "train.mini_batch_size=null", "train.micro_batch_size=null",
        "algo.num_iterations=1")


def _lrs(cfg, counts):
    from rlexp.engine.tunix_adapter import host_lr_schedule

    schedule = host_lr_schedule(cfg)
    return [schedule(c) for c in counts]


def test_linear_schedule_runs_from_the_peak_to_the_end_value(compose_config):
    # EasyDeL's tutorial: 1e-6 -> 6e-7 in a straight line, no warm-up; 10 updates here.
    cfg = compose_config(*TINY, "train.steps=10", "train.lr_schedule=linear",
                         "train.learning_rate=1e-6", "train.end_learning_rate=6e-7",
                         "train.warmup_steps=0")
    got = _lrs(cfg, [0, 5, 10])
    assert got == pytest.approx([1e-6, 8e-7, 6e-7], rel=1e-6)


def test_linear_schedule_after_a_warm_up(compose_config):
    # 0 -> 1e-3 over 2 updates, then 1e-3 -> 4e-4 over the remaining 8.
    cfg = compose_config(*TINY, "train.steps=10", "train.lr_schedule=linear",
                         "train.learning_rate=1e-3", "train.end_learning_rate=4e-4",
                         "train.warmup_steps=2")
    got = _lrs(cfg, [0, 1, 2, 6, 10])
    assert got == pytest.approx([0.0, 5e-4, 1e-3, 7e-4, 4e-4], rel=1e-6, abs=1e-12)


@pytest.mark.parametrize("schedule", ["cosine", "warmup_cosine"])
def test_cosine_schedules_end_at_end_learning_rate(schedule, compose_config):
    cfg = compose_config(*TINY, "train.steps=8", f"train.lr_schedule={schedule}",
                         "train.learning_rate=1e-3", "train.end_learning_rate=1e-4",
                         "train.warmup_steps=2")
    first, middle, last = _lrs(cfg, [0, 5 if schedule == "warmup_cosine" else 4, 8])
    assert last == pytest.approx(1e-4, rel=1e-6)
    # Half-way through the decay, cosine is at the mean of peak and end.
    assert middle == pytest.approx((1e-3 + 1e-4) / 2, rel=1e-5)
    assert first == pytest.approx(0.0 if schedule == "warmup_cosine" else 1e-3)


def test_end_learning_rate_zero_keeps_the_old_decay(compose_config):
    cfg = compose_config(*TINY, "train.steps=8", "train.lr_schedule=warmup_cosine",
                         "train.learning_rate=1e-3", "train.warmup_steps=2")
    assert _lrs(cfg, [8]) == pytest.approx([0.0], abs=1e-12)


def test_epoch_steps_by_hand():
    assert epoch_steps(3, 72441, 8) == 27166  # 217323 / 8 = 27165.4 -> 27166
    assert epoch_steps(2, 16, 8) == 4  # exact: no spill into a third pass
    assert epoch_steps(1, 5, 8) == 1


def test_epochs_cover_every_prompt_that_many_times():
    """The loop's batches (batch_indices) over epoch_steps steps hold every prompt `epochs`
    times; only the last step reaches into the next pass."""
    n, batch, epochs = 10, 4, 3
    steps = epoch_steps(epochs, n, batch)  # ceil(30 / 4) = 8: 32 positions
    seen = np.concatenate([batch_indices(n, batch, 7, s) for s in range(steps)])
    counts = np.bincount(seen[: epochs * n], minlength=n)
    assert steps == 8 and list(counts) == [epochs] * n
    assert len(seen) - epochs * n == 2 < batch


def test_epochs_set_train_steps_from_the_dataset_size(compose_config):
    cfg = compose_config("dataset.num_train=100", "train.batch_size=8", "train.epochs=2",
                         "train.steps=5")  # train.steps given too: epochs win
    assert cfg.train.steps == 25
    assert compose_config("train.steps=7").train.steps == 7  # epochs unset: steps as given


def test_epochs_that_make_too_many_steps_are_refused(compose_config):
    with pytest.raises(UserError, match=r"^train.epochs=1000 is invalid: makes 2000000 steps"):
        compose_config("dataset.num_train=16000", "train.batch_size=8", "train.epochs=1000")
    with pytest.raises(UserError, match=r"^train.epochs=0 is invalid: must be in \[1, 1000\]"):
        compose_config("train.epochs=0")


def test_sync_every_is_refused_where_the_sampler_shares_the_weights(compose_config):
    with pytest.raises(UserError, match=r"^rollout.sync_every=4 is invalid: has no effect"):
        compose_config("rollout.sync_every=4")  # cpu: vanilla on the trainer's own mesh
    split = compose_config("experiment=maxtext_llama3.3-70b_grpo_v5p-256", "rollout.sync_every=4")
    assert split.rollout.sync_every == 4
    with pytest.raises(UserError, match=r"^rollout.sync_every=0 is invalid"):
        compose_config("rollout.sync_every=0")


class _Cluster:
    def __init__(self) -> None:
        self.global_steps = 0
        self.synced_after: list[int] = []

    def sync_weights(self) -> None:  # Tunix: copy, then count the step (test_tunix_contract)
        self.global_steps += 1
        self.synced_after.append(self.global_steps)

    @property
    def copy_weights(self):
        from rlexp.engine.learner import Cluster

        return Cluster.copy_weights.__get__(self)  # rlexp's own, on this stand-in


def _learner(cluster: _Cluster, separate_copy: bool) -> SimpleNamespace:
    return SimpleNamespace(
        _training_config=SimpleNamespace(mini_batch_size=None, train_micro_batch_size=None,
                                         get_with_default=lambda key, default: default),
        _rollout_micro_batch_size=None, _compute_logps_micro_batch_size=None,
        algo_config=SimpleNamespace(num_generations=2),
        _run_global_step=lambda *args: None, should_sync_weights=separate_copy,
        rl_cluster=cluster)


@pytest.mark.parametrize("sync_every, expected", [(1, [1, 2, 3, 4, 5, 6, 7]), (3, [3, 6]),
                                                  (8, [])])
def test_step_runner_syncs_every_nth_step(sync_every, expected):
    from rlexp.engine.learner import StepRunner

    cluster = _Cluster()
    runner = StepRunner(_learner(cluster, separate_copy=True), batch_size=4, sync_every=sync_every)
    for _ in range(7):
        runner({"prompts": np.array(["p"] * 4, dtype=object)})
    assert cluster.global_steps == 7  # every step counted, synced or not
    assert cluster.synced_after == expected
    assert runner.samples_behind == (sync_every > 1)  # rollout/staleness logged


def test_an_evaluation_between_syncs_scores_the_trainers_weights():
    """sync_every=3, evaluated after step 7: the sampler copy gets step 7's weights first,
    once however many calls the evaluation makes, and the next sync still comes after 9."""
    from rlexp.engine.learner import StepRunner

    cluster = _Cluster()
    runner = StepRunner(_learner(cluster, separate_copy=True), batch_size=4, sync_every=3)
    runner.sync_for_eval()  # before any step: the sampler holds the weights it started with
    assert cluster.synced_after == []
    staleness = []  # updates the copy lags at each step's sampling (rollout/staleness)
    for step in range(1, 8):
        runner({"prompts": np.array(["p"] * 4, dtype=object)}, step)
        staleness.append(runner.staleness)
    runner.sync_for_eval()
    runner.sync_for_eval()
    assert len(cluster.synced_after) == 3 and cluster.global_steps == 7
    for step in (8, 9):
        runner({"prompts": np.array(["p"] * 4, dtype=object)}, step)
        staleness.append(runner.staleness)
    assert cluster.synced_after[3:] == [9] and cluster.global_steps == 9
    assert runner.samples_behind and staleness == [0, 1, 2, 0, 1, 2, 0, 0, 1]
    runner.sync_for_eval()  # synced after step 9 already
    assert len(cluster.synced_after) == 4


def test_a_resume_keeps_the_sync_schedule_of_the_uninterrupted_run():
    """Restored at step 4 of 9 (sync_every=3): the sampler gets the weights at once, and the
    later syncs come after steps 6 and 9 as without the kill; the counter ends at 9."""
    from rlexp.engine.checkpoint_store import EngineCheckpoints
    from rlexp.engine.learner import StepRunner

    cluster = _Cluster()
    learner = _learner(cluster, separate_copy=True)
    cluster.actor_trainer = SimpleNamespace()
    engine = SimpleNamespace(learner=learner, cluster=cluster, probe=SimpleNamespace())
    meta = {"learner_iter_steps": 4, "trainer_train_steps": 4, "trainer_iter_steps": 4,
            "cluster_global_steps": 4, "tokens_seen": 0}
    EngineCheckpoints.resume(SimpleNamespace(engine=engine), meta)
    assert len(cluster.synced_after) == 1 and cluster.global_steps == 4  # the restored weights
    runner = StepRunner(learner, batch_size=4, sync_every=3)
    staleness = []
    for step in range(5, 10):
        runner({"prompts": np.array(["p"] * 4, dtype=object)}, step)
        staleness.append(runner.staleness)
    assert cluster.synced_after[1:] == [6, 9] and cluster.global_steps == 9
    assert staleness == [0, 1, 0, 1, 2]  # the first resumed step samples the restored weights


def test_step_runner_never_syncs_a_shared_copy():
    from rlexp.engine.learner import StepRunner

    cluster = _Cluster()
    runner = StepRunner(_learner(cluster, separate_copy=False), batch_size=4)
    for _ in range(3):
        runner({"prompts": np.array(["p"] * 4, dtype=object)})
    assert (cluster.global_steps, cluster.synced_after) == (3, [])
