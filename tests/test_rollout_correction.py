"""The trainer/sampler mismatch correction (algo.rollout_correction) against TRL 1.16's own code.

TRL's importance weights (GRPOTrainer._generate_and_score_completions, the block under
`if self.use_vllm and self.vllm_importance_sampling_correction:`), its sampling/* metrics and
its `_compute_loss` with the weights run in a child process (tests/trl_oracle.py) on the same
arrays as rlexp's weights (rlexp.algo.rollout_correction), metrics and loss (the example built
by rlexp.engine.algo_registry.with_sampler_logps, through loss_from_logps). 8 completions of up to 6
tokens; cases cover each mode, bounds (TRL's defaults, two-sided, one-sided), losses (GRPO,
GSPO, DAPO, Dr.GRPO, CISPO, SAPO, LUSPO, VESPO), masks (ragged, full, an empty row) and
samplers (close, far, unknown log-probs as NaN, identical, a gap that overflows exp).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import require
from rlexp.algo import rollout_correction as rc
from rlexp.config.schema import AlgoConfig
from trl_oracle import trl_available, trl_rollout_corrections

from rlexp.engine import algo_registry as registry  # noqa: E402  (a broken import fails here, never skips)
from tunix.rl.grpo.grpo_learner import TrainExample  # noqa: E402

B, T = 8, 6
LENGTHS = [3, 6, 2, 6, 4, 6, 5, 1]

# rlexp settings of each loss and TRL's (loss_type, importance_sampling_level, epsilon_high);
# CISPO's cap is 1 + epsilon_high in rlexp, epsilon_high itself in TRL.
LOSSES = {
    "grpo": (dict(loss_agg="sequence-mean-token-mean", epsilon=0.2), ("grpo", "token", 0.2)),
    "gspo": (dict(loss_agg="sequence-mean-token-mean", epsilon=0.2, ratio_level="sequence"),
             ("grpo", "sequence", 0.2)),
    "dapo": (dict(loss_agg="token-mean", epsilon=0.2, epsilon_high=0.28), ("dapo", "token", 0.28)),
    "dr_grpo": (dict(loss_agg="sequence-mean-token-scale", epsilon=0.2), ("dr_grpo", "token", 0.2)),
    "cispo": (dict(loss="cispo", loss_agg="token-mean", epsilon=1.0, epsilon_high=0.2),
              ("cispo", "token", 1.2)),
    "sapo": (dict(loss="sapo", loss_agg="sequence-mean-token-mean", epsilon=0.2),
             ("sapo", "token", 0.2)),
    "luspo": (dict(loss="luspo", loss_agg="sequence-mean-token-sum", epsilon=0.2,
                   ratio_level="sequence"), ("luspo", "sequence", 0.2)),
    "vespo": (dict(loss="vespo", loss_agg="token-mean", epsilon=0.2), ("vespo", "token", 0.2)),
}

# (mode, clip_min, clip_max, loss, sampler, mask, beta)
CASES = [
    ("token_truncate", None, 3.0, "grpo", "far", "ragged", 0.0),  # TRL's bounds
    ("token_truncate", 0.5, 2.0, "grpo", "far", "ragged", 0.04),  # the KL is not weighted
    ("token_truncate", 0.9, 1.1, "dapo", "close", "full", 0.0),
    ("token_truncate", None, 3.0, "cispo", "far", "ragged", 0.0),
    ("token_truncate", 0.5, 2.0, "vespo", "far", "ragged", 0.0),
    ("token_truncate", None, 3.0, "dapo", "nan", "ragged", 0.0),
    ("token_truncate", None, 3.0, "dapo", "same", "ragged", 0.0),  # weights 1, gap 0
    ("token_truncate", 0.5, 2.0, "dapo", "huge", "ragged", 0.0),  # exp overflows, clipped
    ("token_mask", None, 3.0, "grpo", "far", "ragged", 0.0),
    ("token_mask", 0.5, 2.0, "dapo", "far", "ragged", 0.04),
    ("token_mask", 0.8, None, "sapo", "far", "ragged", 0.0),  # lower bound only
    ("token_mask", 0.5, 2.0, "vespo", "far", "full", 0.0),  # masked tokens: log(1e-8)
    ("token_mask", 0.9, 1.1, "dr_grpo", "close", "ragged", 0.0),
    ("token_mask", None, 3.0, "dapo", "far", "empty_row", 0.0),
    ("sequence_truncate", None, 3.0, "grpo", "far", "ragged", 0.0),
    ("sequence_truncate", 0.5, 2.0, "gspo", "far", "ragged", 0.0),
    ("sequence_truncate", 0.2, 5.0, "dapo", "close", "full", 0.04),
    ("sequence_truncate", None, 3.0, "luspo", "far", "ragged", 0.0),
    ("sequence_truncate", 0.5, 2.0, "dapo", "far", "empty_row", 0.0),
    ("sequence_mask", None, 3.0, "grpo", "far", "ragged", 0.0),  # TRL's default mode
    ("sequence_mask", 0.5, 2.0, "dapo", "far", "ragged", 0.0),
    ("sequence_mask", 0.2, 5.0, "gspo", "close", "ragged", 0.04),
    ("sequence_mask", None, 3.0, "cispo", "nan", "ragged", 0.0),
    ("sequence_mask", None, 3.0, "dapo", "huge", "ragged", 0.0),  # inf weight: masked
    ("sequence_mask", 0.5, None, "sapo", "far", "full", 0.0),
]


def inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    ragged = (np.arange(T)[None, :] < np.array(LENGTHS)[:, None]).astype(np.float32)
    empty = ragged.copy()
    empty[2] = 0.0
    old = np.log(rng.uniform(0.05, 0.95, (B, T))).astype(np.float32)
    logp = (old + rng.normal(0, 0.2, (B, T))).astype(np.float32)  # off-policy: clipping acts
    ref = (logp + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    nan = (old + rng.normal(0, 0.05, (B, T))).astype(np.float32)
    nan[[0, 3, 5], [1, 4, 0]] = np.nan  # tokens the sampler gave no log-prob for
    huge = (old + rng.normal(0, 0.3, (B, T))).astype(np.float32)
    huge[1, 2] = old[1, 2] - 200.0  # exp(200) overflows float32
    return dict(
        logp=logp, old_logp=old, ref_logp=ref,
        advantages=np.array([1.2, -0.8, 0.5, -1.1, 0.9, -0.3, 0.0, 0.7], np.float32),
        ragged=ragged, full=np.ones((B, T), np.float32), empty_row=empty,
        close=(old + rng.normal(0, 0.05, (B, T))).astype(np.float32),
        far=(old + rng.normal(0, 0.6, (B, T))).astype(np.float32),
        nan=nan, same=old.copy(), huge=huge)


def trl_case(mode, lo, hi, loss, sampler, mask, beta) -> dict:
    own, (loss_type, level, eps_high) = LOSSES[loss]
    return dict(mode=mode, clip_min=lo, clip_max=hi, loss_type=loss_type,
                importance_sampling_level=level, epsilon=own["epsilon"], epsilon_high=eps_high,
                beta=beta, max_completion_length=T, mask=mask, sampler=sampler)


def rlexp_case(data, mode, lo, hi, loss, sampler, mask, beta):
    """rlexp's weights, loss, gradient and logged values, through the engine's plumbing."""
    algo = AlgoConfig(name="grpo", num_generations=4, num_iterations=2, beta=beta,
                      kl_estimator="k3", rollout_correction=mode, rollout_correction_clip_min=lo,
                      rollout_correction_clip_max=hi, **LOSSES[loss][0])
    settings = registry.algo_settings(algo, budget=T)
    m = jnp.asarray(data[mask])
    ex = TrainExample(prompt_ids=None, prompt_mask=None,
                      completion_ids=jnp.ones((B, T), jnp.int32), completion_mask=m,
                      advantages=jnp.asarray(data["advantages"]),
                      ref_per_token_logps=jnp.asarray(data["ref_logp"]) if beta else None,
                      old_per_token_logps=jnp.asarray(data["old_logp"]))
    ex = registry.with_sampler_logps(ex, jnp.asarray(data[sampler]))

    def f(lp):
        return registry.loss_from_logps(lp, ex, settings)

    (value, aux), grad = jax.value_and_grad(f, has_aux=True)(jnp.asarray(data["logp"]))
    weights = rc.importance_weights(jnp.asarray(data["old_logp"]), jnp.asarray(data[sampler]),
                                    m, settings.correction)
    return dict(weights=np.asarray(weights), loss=float(value),
                grad=np.asarray(grad), **{k: float(aux[k]) for k in rc_keys()})


def rc_keys() -> tuple[str, ...]:
    return ("logprob_diff", "logprob_diff_max", "is_weight_min", "is_weight_mean",
            "is_weight_max")


@pytest.fixture(scope="module")
def trl_results():
    require(trl_available(), "trl and torch are not installed in the torch directory",
            "bash scripts/setup --test")
    data = inputs()
    return data, dict(zip(CASES, trl_rollout_corrections(data, [trl_case(*c) for c in CASES])))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_weights_metrics_and_loss_equal_trls(trl_results, case):
    data, results = trl_results
    want, got = results[case], rlexp_case(data, *case)
    np.testing.assert_allclose(got["weights"], want["weights"], rtol=1e-6, atol=0)
    for k in rc_keys():
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-7, err_msg=k)
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(got["grad"], want["grad"], rtol=1e-5, atol=1e-8)
    assert np.abs(want["grad"]).max() > 1e-3


def test_the_cases_are_not_vacuous():
    """The bounds bind on some weights and not on all, the NaN and empty-row cases hold what
    they say, and the weights change the loss."""
    data = inputs()
    for mode, lo, hi in (("token_truncate", 0.5, 2.0), ("token_mask", 0.5, 2.0),
                         ("sequence_mask", 0.5, 2.0)):
        c = rc.RolloutCorrection(mode, lo, hi)
        raw = np.exp(np.where(data["ragged"] > 0, data["old_logp"] - data["far"], 0.0))
        if mode.startswith("sequence"):
            raw = raw.prod(-1, keepdims=True)
        w = np.asarray(rc.importance_weights(jnp.asarray(data["old_logp"]),
                                             jnp.asarray(data["far"]),
                                             jnp.asarray(data["ragged"]), c))
        outside = (raw < lo) | (raw > hi)
        assert 0 < outside.sum() < outside.size, mode
        assert not np.allclose(w, raw)
    assert np.isnan(data["nan"]).sum() == 3 and (data["empty_row"].sum(-1) == 0).sum() == 1
    base = rlexp_case(data, "token_truncate", None, 1e9, "grpo", "same", "ragged", 0.0)
    far = rlexp_case(data, "token_truncate", None, 3.0, "grpo", "far", "ragged", 0.0)
    assert abs(base["loss"] - far["loss"]) > 1e-3


def test_identical_log_probs_give_weight_one_and_no_gap():
    old = jnp.asarray(inputs()["old_logp"])
    mask = jnp.asarray(inputs()["ragged"])
    for mode in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask"):
        w = rc.importance_weights(old, old, mask, rc.RolloutCorrection(mode))
        np.testing.assert_array_equal(np.asarray(w), 1.0)
    gap = rc.logprob_gap(old, old, mask)
    assert float(gap["logprob_diff"]) == 0.0 and float(gap["logprob_diff_max"]) == 0.0


def test_no_correction_keeps_the_loss_and_still_logs_the_gap():
    """rollout_correction=none: the example carries the sampler's log-probs, the gap is
    logged, no weights are made, and the loss is the uncorrected one."""
    data = inputs()
    settings = registry.algo_settings(AlgoConfig(name="grpo", beta=0.0), budget=T)
    ex = TrainExample(prompt_ids=None, prompt_mask=None,
                      completion_ids=jnp.ones((B, T), jnp.int32),
                      completion_mask=jnp.asarray(data["ragged"]),
                      advantages=jnp.asarray(data["advantages"]), ref_per_token_logps=None,
                      old_per_token_logps=jnp.asarray(data["old_logp"]))
    plain, _ = registry.loss_from_logps(jnp.asarray(data["logp"]), ex, settings)
    fixed = registry.with_sampler_logps(ex, jnp.asarray(data["far"]))
    loss, aux = registry.loss_from_logps(jnp.asarray(data["logp"]), fixed, settings)
    np.testing.assert_allclose(float(loss), float(plain), rtol=1e-7)
    delta = np.abs(data["old_logp"] - data["far"])[data["ragged"] > 0]
    np.testing.assert_allclose(float(aux["logprob_diff"]), delta.mean(), rtol=1e-5)
    np.testing.assert_allclose(float(aux["logprob_diff_max"]), delta.max(), rtol=1e-6)
    assert "is_weight_mean" not in aux


@pytest.mark.parametrize("old", [False, True])
def test_all_unknown_sampler_log_probs_change_nothing_and_log_no_gap(old):
    """A step without the sampler's log-probs hands the loss an all-NaN array (one compiled
    update for every step): loss and gradient equal those without any, also where
    off_policy_mask_threshold takes pi_old as the behaviour, and the gap is NaN (not logged)."""
    data = inputs()
    settings = registry.algo_settings(AlgoConfig(name="grpo", beta=0.0, num_iterations=2,
                                                 off_policy_mask_threshold=0.01), budget=T)
    ex = TrainExample(prompt_ids=None, prompt_mask=None,
                      completion_ids=jnp.ones((B, T), jnp.int32),
                      completion_mask=jnp.asarray(data["ragged"]),
                      advantages=jnp.asarray(data["advantages"]) - 0.5,
                      ref_per_token_logps=None,
                      old_per_token_logps=jnp.asarray(data["far"]) if old else None)
    unknown = registry.with_sampler_logps(ex, jnp.full((B, T), jnp.nan, jnp.float32))

    def f(example):
        return jax.value_and_grad(registry.loss_from_logps, has_aux=True)(
            jnp.asarray(data["logp"]), example, settings)

    (plain, _), g_plain = f(ex)
    (loss, aux), g = f(unknown)
    np.testing.assert_array_equal(float(loss), float(plain))
    np.testing.assert_array_equal(np.asarray(g), np.asarray(g_plain))
    assert np.isnan(float(aux["logprob_diff"])) and np.isnan(float(aux["logprob_diff_max"]))
    if old:  # the mask acted: the case is not vacuous
        no_mask = registry.algo_settings(AlgoConfig(name="grpo", beta=0.0, num_iterations=2),
                                         budget=T)
        other, _ = registry.loss_from_logps(jnp.asarray(data["logp"]), ex, no_mask)
        assert abs(float(other) - float(plain)) > 1e-6


def test_on_policy_the_loss_compares_the_sampler_with_its_own_forward():
    """num_iterations=1 (no old log-probs): the weights come from this forward's log-probs,
    held constant, and equal those of an example whose old log-probs are the same values."""
    data = inputs()
    settings = registry.algo_settings(
        AlgoConfig(name="grpo", beta=0.0, rollout_correction="token_mask",
                   rollout_correction_clip_min=0.5, rollout_correction_clip_max=2.0), budget=T)
    base = TrainExample(prompt_ids=None, prompt_mask=None,
                        completion_ids=jnp.ones((B, T), jnp.int32),
                        completion_mask=jnp.asarray(data["ragged"]),
                        advantages=jnp.asarray(data["advantages"]), ref_per_token_logps=None,
                        old_per_token_logps=None)
    lp, sampler = jnp.asarray(data["old_logp"]), jnp.asarray(data["far"])
    on = registry.with_sampler_logps(base, sampler)
    off = registry.with_sampler_logps(base, sampler, trainer=lp)

    def f(ex):
        return jax.value_and_grad(registry.loss_from_logps, has_aux=True)(lp, ex, settings)

    (l_on, a_on), g_on = f(on)
    (l_off, a_off), g_off = f(off)
    np.testing.assert_allclose(float(l_on), float(l_off), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(g_on), np.asarray(g_off), rtol=1e-6, atol=1e-9)
    assert float(a_on["is_weight_min"]) == 0.0 < float(a_on["is_weight_max"])  # some masked
    for k in rc_keys():
        np.testing.assert_allclose(float(a_on[k]), float(a_off[k]), rtol=1e-6)


def test_sampler_rows_are_padded_with_unknown_and_cut_to_the_width():
    got = rc.sampler_logps([[-0.5, -1.0], np.array([-0.1, -0.2, -0.3, -0.4]), []], 3)
    np.testing.assert_array_equal(got[:, :2], np.array([[-0.5, -1.0], [-0.1, -0.2],
                                                        [np.nan, np.nan]], np.float32))
    assert np.isnan(got[0, 2]) and got[1, 2] == np.float32(-0.3) and got.dtype == np.float32


def test_bad_settings_are_refused_in_one_line(compose_config):
    from rlexp.base.errors import UserError

    for overrides, words in (
            (["algo.rollout_correction=token_clip"], "valid choices are none, token_truncate"),
            (["algo.rollout_correction=token_mask", "algo.rollout_correction_clip_max=null"],
             "needs a bound"),
            (["algo.rollout_correction=token_mask", "algo.rollout_correction_clip_min=2.0",
              "algo.rollout_correction_clip_max=1.5"], "must be below"),
            (["algo=vespo", "algo.rollout_correction=sequence_mask"], "token_truncate or"),
            (["algo.rollout_correction_clip_max=-1"], "must be in (0, inf)")):
        with pytest.raises(UserError, match="algo.rollout_correction") as err:
            compose_config(*overrides)
        assert words in str(err.value) and "\n" not in str(err.value)
    assert compose_config("algo.rollout_correction=token_truncate").algo.rollout_correction \
        == "token_truncate"


@pytest.mark.slow
def test_vanilla_sampler_and_trainer_agree_at_the_rollout_temperature(tmp_path):
    """One real step of the tiny model sampled at temperature 0.7 with a correction on: the
    vanilla sampler's log-probs (log_softmax(logits / T) in its decode loop) equal the
    trainer's forward at T up to float32 numerics, so the logged gap is ~0 and the weights ~1.
    A temperature left out on either side would show as a gap of tenths of a nat."""
    from test_engine import Recorder, tiny_config

    from rlexp import engine as engine_lib
    from rlexp.base.events import Listeners
    from rlexp.config.validate import validate
    from rlexp.job import loop
    from rlexp.planning.plan import make_plan

    cfg = tiny_config("grpo", tmp_path / "cache")
    cfg.rollout.temperature, cfg.train.steps, cfg.eval.every = 0.7, 1, 0
    cfg.algo.rollout_correction = "token_truncate"
    cfg = validate(cfg)
    eng = engine_lib.build(cfg, make_plan(cfg), tmp_path / "run")
    rec = Recorder()
    loop.train_steps(cfg, eng, Listeners([rec]), tmp_path / "run")
    m = rec.metrics[-1][1]
    assert 0 <= m["rollout/logprob_diff"] < 1e-4, m["rollout/logprob_diff"]
    assert m["rollout/logprob_diff_max"] < 1e-3
    assert abs(m["rollout/is_weight_mean"] - 1) < 1e-3
    assert m["rollout/is_weight_min"] <= 1 <= m["rollout/is_weight_max"] <= 3.0


def test_whitened_advantages_are_whitened_over_the_completion_tokens():
    """The learner's first step after scoring (REINFORCE++): per-row scores -> [B, T] advantages with mean
    0 and unbiased variance 1 over the completion tokens, 0 elsewhere."""
    data = inputs()
    mask = data["ragged"]
    ex = TrainExample(prompt_ids=None, prompt_mask=None,
                      completion_ids=jnp.ones((B, T), jnp.int32), completion_mask=jnp.asarray(mask),
                      advantages=jnp.asarray(np.arange(B, dtype=np.float32)),
                      ref_per_token_logps=None, old_per_token_logps=None)
    got = np.asarray(registry.whitened(ex).advantages)
    kept = got[mask > 0]
    assert got.shape == (B, T) and abs(kept.mean()) < 1e-5 and abs(kept.std(ddof=1) - 1) < 1e-5
    assert (got[mask == 0] == 0).all()


@pytest.mark.slow
def test_the_learner_whitens_then_hands_the_sampler_log_probs(tmp_path, monkeypatch):
    """The real learner, REINFORCE++ with a correction: rlexp's subclasses of Tunix's learner,
    cluster and trainer (Tunix's trainer class set back once built), and the batch the
    learner returns is whitened over the completion tokens and carries the sampler's log-probs
    (both steps ran, in order), with the probe's timings and per-update values recorded."""
    from test_engine import tiny_config

    from rlexp import engine as engine_lib
    from rlexp.config.validate import validate
    from rlexp.planning.plan import make_plan

    cfg = tiny_config("grpo", tmp_path / "cache")
    cfg.algo.advantage, cfg.algo.rollout_correction = "reinforce_pp", "token_truncate"
    cfg = validate(cfg)
    eng = engine_lib.build(cfg, make_plan(cfg), tmp_path / "run")
    from tunix.rl import trainer as rl_trainer

    from rlexp.engine import learner as learner_lib

    with_sampler_logps = registry.with_sampler_logps
    assert isinstance(eng.learner, learner_lib.Learner) and eng.learner.whiten
    assert isinstance(eng.cluster, learner_lib.Cluster)
    assert isinstance(eng.cluster.actor_trainer, learner_lib.ActorTrainer)
    assert rl_trainer.Trainer is learner_lib.ActorTrainer.__base__
    seen = []
    monkeypatch.setattr(registry, "with_sampler_logps",
                        lambda *a, **kw: seen.append(with_sampler_logps(*a, **kw)) or seen[-1])
    m = eng.train_step(eng.splits.train_batch(0, cfg.train.batch_size, cfg.train.seed),
                       engine_lib.rollout_key(cfg.train.seed, 1))
    assert 0 < m["time/rollout_s"] < m["time/prepare_s"] and m["train/updates"] >= 1
    assert "rollout/logprob_diff" in m and "train/grad_norm" in m
    out = seen[0]
    assert isinstance(out, registry.RolloutExample) and out.sampler_logps is not None
    # the loss's runtime numbers ride beside the batch, one row per completion
    from rlexp.algo.losses import runtime_numbers

    rows = np.asarray(out.loss_numbers)
    np.testing.assert_array_equal(
        rows, np.tile(runtime_numbers(cfg.algo.for_loss()), (len(out.completion_mask), 1)))
    mask = np.asarray(out.completion_mask) > 0
    kept = np.asarray(out.advantages)[mask]
    assert abs(kept.mean()) < 1e-4 and abs(kept.std(ddof=1) - 1) < 1e-3


# Trainer and sampler on separate virtual CPU devices (bench/overlap.py's emulated split): the
# sampler holds a copy of the weights that rollout.sync_every refreshes.
SPLIT = ("hardware.emulate=true", "hardware.devices=2", "hardware.chips=2",
         "hardware.split=split", "hardware.trainer_fraction=0.5", "hardware.sampler_fraction=0.5")


@pytest.mark.slow
def test_a_sampler_copy_behind_the_trainer_is_corrected_against_the_trainers_weights(tmp_path):
    """A real run on split meshes, the copy synced every 2nd step, num_iterations=2 (Tunix scores
    old log-probs, on the sampler's copy) and a correction: on steps 2 and 4 the copy is one
    update behind, so the old log-probs must be the trainer's: the gap and the weights show the
    lag (the copy's own scores gave gap 0 and weights 1 at every step: no correction at all),
    and rollout/staleness says it. Steps 1 and 3 follow a sync: the two agree."""
    from mlflow.tracking import MlflowClient

    from helpers import cli

    proc = cli(*SPLIT, "eval.every=0", "eval.num_samples=4", "dataset.num_eval=4",
               "eval.pass_k=1", "train.steps=4", "rollout.sync_every=2",
               "algo.num_iterations=2", "algo.rollout_correction=token_truncate",
               cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    [run] = client.search_runs([client.get_experiment_by_name("rlexp").experiment_id])

    def series(name: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}

    assert series("rollout/staleness") == {1: 0.0, 2: 1.0, 3: 0.0, 4: 1.0}
    gap, weight = series("rollout/logprob_diff_max"), series("rollout/is_weight_min")
    assert all(gap[s] < 1e-3 and abs(weight[s] - 1) < 1e-3 for s in (1, 3)), (gap, weight)
    assert all(gap[s] > 0.05 and weight[s] < 0.99 for s in (2, 4)), (gap, weight)


@pytest.mark.parametrize("overrides, stands", [
    ((), True),  # the default CPU run: the sampler reads the trainer's very weights
    ((*SPLIT, "algo.rollout_correction=token_truncate"), True),  # copy synced every update
    ((*SPLIT, "algo.rollout_correction=token_truncate", "rollout.sync_every=2"), False),
    ((*SPLIT, "algo.rollout_correction=token_truncate", "train.batch_size=8",
      "train.mini_batch_size=4"), False),  # the second mini-batch is sampled by a stale copy
    ((*SPLIT, "rollout.sync_every=2"), True),  # no correction: the behaviour policy's ratio
])
def test_where_the_vanilla_copys_old_log_probs_stand_as_the_losss(compose_config, overrides,
                                                                  stands):
    from rlexp.config.rollouts import rollout_spec
    from rlexp.engine.rollout.vanilla import VanillaBackend

    cfg = compose_config(*overrides)
    assert VanillaBackend(cfg, rollout_spec(cfg)).old_logps_from_trainer is stands
