"""SmolLM2-135M-Instruct (shipped weights) through the engine on CPU: a few GRPO steps of its
recipe shrunk to CPU size, in bfloat16 compute on float32 master weights with training remat
(the real-model path: llama3 compute cast, sampler without remat, dedicated pad id). The
learning result itself is bench/real_model.py's (an accelerator run).

The model is SmolLM2's first BLOCKS of its 30 blocks (its embedding, vocabulary, tokenizer,
widths and final norm as shipped): Tunix's Llama unrolls its blocks, so each one compiles on
its own: this test took 162 s alone on a 2-core CPU with the 30, 72 s with 4.
Every block's own code path is the same; the full depth's numbers are test_smollm2's (greedy
decoding against NumPy) and test_export's (the round trip)."""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.slow
BLOCKS = 4

SMALL = ["model=smollm2-135m", "hardware=cpu", "model.dtype=bfloat16", "model.param_dtype=float32",
         "train.remat=full", "train.steps=2", "train.batch_size=2", "train.micro_batch_size=null",
         "algo.num_generations=4", "rollout.max_prompt_length=96",
         "rollout.max_completion_length=8", "rollout.kv_cache_size=112",
         "dataset.num_train=32", "dataset.num_eval=4", "eval.num_samples=4",
         # log-probs on both steps: one sampler program, not one with and one without (each
         # a decode program to compile), and the real model's trainer/sampler gap
         "rollout.logprob_gap_every=1", "tracker=none"]


def letter_reward(prompts, completions, answers, **_):
    """Share of letters in each completion (a plug-in reward that varies from step one: the
    first blocks' 8 tokens are words and punctuation, ', and I I, and, I', without digits)."""
    return [sum(c.isalpha() for c in text) / max(len(text), 1) for text in completions]


def first_blocks(src, n: int, dst):
    """A copy of the converted SmolLM2 dir `src` whose checkpoint keeps blocks 0..n-1."""
    import json
    import shutil

    from safetensors import safe_open
    from safetensors.numpy import save_file

    dst.mkdir()
    for f in src.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, dst / f.name)
    hf = json.loads((src / "config.json").read_text())
    (dst / "config.json").write_text(json.dumps({**hf, "num_hidden_layers": n}))
    with safe_open(str(src / "model.safetensors"), "np") as f:  # reads the kept tensors only
        keep = {k: f.get_tensor(k) for k in f.keys()
                if not k.startswith("model.layers.") or int(k.split(".")[2]) < n}
    save_file(keep, str(dst / "model.safetensors"))
    return dst


def test_smollm2_steps_on_cpu_have_finite_changing_loss_and_varied_rewards(tmp_path,
                                                                           compose_config,
                                                                           smollm2_dir):
    from rlexp import engine as engine_lib
    from rlexp.engine import rollout_key
    from rlexp.planning.plan import make_plan

    path = first_blocks(smollm2_dir, BLOCKS, tmp_path / "smollm2")
    cfg = compose_config(*SMALL, f"model.path={path}", f"model.num_layers={BLOCKS}")
    assert cfg.train.learning_rate == pytest.approx(5e-6)  # the recipe's lr
    # 8 tokens of an untrained SmolLM2 never reach <answer> (format and answer rewards are all
    # 0 at the start); a letter-density reward plug-in varies within every group.
    from rlexp.config.schema import RewardFunctionConfig

    cfg.reward.functions.append(RewardFunctionConfig(
        f"{letter_reward.__module__}.letter_reward", 1.0, "letters"))
    eng = engine_lib.build(cfg, make_plan(cfg), tmp_path / "run")
    pad = eng.tokenizer.pad_id()
    assert pad != eng.tokenizer.eos_id()
    assert all(pad not in eng.tokenizer.encode(e.prompt) for e in eng.splits.train)
    before = eng.policy_state()
    metrics = []
    for step in range(cfg.train.steps):
        batch = eng.splits.train_batch(step, cfg.train.batch_size, cfg.train.seed)
        metrics.append(eng.train_step(batch, rollout_key(cfg.train.seed, step + 1)))
    losses = [m["train/loss"] for m in metrics]
    assert all(np.isfinite(losses)), losses
    assert len(set(losses)) > 1, losses
    gaps = [m["rollout/logprob_diff"] for m in metrics]
    assert all(0 <= g < 0.1 for g in gaps), gaps  # bfloat16 sampler vs trainer, same weights
    rewards = [m["train/reward_std"] for m in metrics]
    assert max(rewards) > 0, rewards  # completions of a group score differently
    assert max(m["train/reward_std/letters"] for m in metrics) > 0
    after = eng.policy_state()
    assert {str(v.dtype) for v in after.values()} == {"float32"}  # the master stays float32
    moved = sum(int((after[k] != before[k]).sum()) for k in before)
    assert moved > 0.5 * sum(v.size for v in before.values())
