"""TRL's own GRPO loss as an oracle: `GRPOTrainer._compute_loss` (trl 1.16) on given tensors.

trl and torch are not dependencies of rlexp: `scripts/setup --test` installs them (trl and
accelerate with --no-deps) into the torch directory of tests/hf_forward.py, and this module
runs TRL in a child process that appends that directory to sys.path, so the test process
stays torch-free.

The trainer is `object.__new__(GRPOTrainer)` with the attributes `_compute_loss` reads, set
as GRPOTrainer.__init__ sets them from a real `GRPOConfig`; the model's forward pass is
replaced by the given per-token log-probs and entropies (leaf tensors, whose gradients are
returned). Optional case keys: entropy_coef and top_entropy_quantile (TRL's entropy bonus and
high-entropy mask), sapo_temperature_pos/_neg and vespo_k_pos/_lambda_pos/_k_neg/_lambda_neg,
use_bias_correction_kl, delta and off_policy_mask_threshold (off, as rlexp's defaults, when
absent; TRL's own use_bias_correction_kl default is on).
Advantages, the truncation mask and `num_items_in_batch` are computed as
GRPOTrainer._generate_and_score_completions computes them (trl/trainer/grpo_trainer.py,
1.16.0, "sum_then_normalize" and "mask_truncated_completions"), with trl's own nanstd.

    python tests/trl_oracle.py IN.npz OUT.npz      # what trl_losses() runs

The rollout correction (trl_rollout_corrections) runs TRL's own text: the two blocks of
GRPOTrainer._generate_and_score_completions under `if self.use_vllm and
self.vllm_importance_sampling_correction:` (the importance weights of
vllm_importance_sampling_mode, and the sampling/* metrics), cut from its source by their
anchor lines and executed as they stand, then `_compute_loss` with those weights.

    python tests/trl_oracle.py --correction IN.npz OUT.npz
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

TORCH_SITE = Path(os.environ.get("RLEXP_TORCH_SITE", "/opt/rlexp-torch"))
TRL_VERSION = "1.16.0"


def trl_available() -> bool:
    return ((TORCH_SITE / "torch" / "__init__.py").is_file()
            and (TORCH_SITE / "trl" / "__init__.py").is_file()
            and (TORCH_SITE / "accelerate" / "__init__.py").is_file())


def trl_losses(arrays: dict[str, np.ndarray], cases: list[dict]) -> list[dict[str, np.ndarray]]:
    """For each case (keys: loss_type, importance_sampling_level, epsilon, epsilon_high, beta,
    scale_rewards, mask_truncated, max_completion_length, num_generations), TRL's loss, the
    gradient of the loss w.r.t. the per-token log-probs (and w.r.t. the per-token entropies
    `arrays["entropy"]`, when given) and the advantages it used."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.npz"
        np.savez(src, cases=np.array(json.dumps(cases)), **arrays)
        got = _run([str(src)], "loss")
    return [{k: got[f"{i}/{k}"] for k in ("loss", "grad", "grad_entropy", "advantages")}
            for i in range(len(cases))]


# The anchors of the two TRL blocks the rollout-correction oracle runs (1.16.0 source).
IS_ANCHOR = "# Compute the importance sampling ratio when using vLLM"
METRICS_ANCHOR = "delta = torch.abs(old_per_token_logps - sampling_per_token_logps)"
IS_HEADER = "if self.use_vllm and self.vllm_importance_sampling_correction:"
CORRECTION_OUTPUTS = ("weights", "loss", "grad", "logprob_diff", "logprob_diff_max",
                      "is_weight_min", "is_weight_mean", "is_weight_max")
# TRL's metric names of the outputs above.
TRL_METRICS = {"logprob_diff": "sampling/sampling_logp_difference/mean",
               "logprob_diff_max": "sampling/sampling_logp_difference/max",
               "is_weight_min": "sampling/importance_sampling_ratio/min",
               "is_weight_mean": "sampling/importance_sampling_ratio/mean",
               "is_weight_max": "sampling/importance_sampling_ratio/max"}


def _run(args: list[str], what: str) -> dict[str, np.ndarray]:
    from rlexp.base.runtime import environment  # safe from other threads' unsets

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.npz"
        proc = subprocess.run([sys.executable, __file__, *args, str(out)],
                              capture_output=True, text=True, timeout=600,
                              env={**environment(), "TRANSFORMERS_VERBOSITY": "error",
                                   "CUDA_VISIBLE_DEVICES": "",
                                   # trl's profiling imports mlflow when it can (2-3 s)
                                   "DISABLE_MLFLOW_INTEGRATION": "TRUE"})
        if proc.returncode != 0:
            raise AssertionError(f"TRL's {what} failed:\n{proc.stderr[-3000:]}")
        return dict(np.load(out))


def trl_rollout_corrections(arrays: dict[str, np.ndarray], cases: list[dict]
                            ) -> list[dict[str, np.ndarray]]:
    """For each case (keys: mode, clip_min, clip_max, loss_type, importance_sampling_level,
    epsilon, epsilon_high, beta, max_completion_length, and `mask`, `sampler`: names of arrays),
    TRL's importance weights, its sampling/* metrics, its loss with them and the loss's
    gradient w.r.t. the per-token log-probs. Arrays: logp (current policy), old_logp (the
    trainer's at rollout time), ref_logp, advantages [B], and the named masks and sampler
    log-probs [B, T]."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.npz"
        np.savez(src, cases=np.array(json.dumps(cases)), **arrays)
        got = _run(["--correction", str(src)], "rollout correction")
    return [{k: got[f"{i}/{k}"] for k in CORRECTION_OUTPUTS} for i in range(len(cases))]


def _if_block(source: str, anchor: str, offset: int) -> str:
    """The `if` block whose header is `offset` lines from the line holding `anchor`, dedented
    (header included): the lines below it indented deeper, blank lines kept."""
    import textwrap

    lines = source.splitlines()
    found = [k for k, line in enumerate(lines) if anchor in line]
    assert len(found) == 1, f"TRL's source has {len(found)} lines with {anchor!r}"
    start = found[0] + offset
    assert lines[start].strip() == IS_HEADER, lines[start]
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = start + 1
    while end < len(lines) and (not lines[end].strip()
                                or len(lines[end]) - len(lines[end].lstrip()) > indent):
        end += 1
    return textwrap.dedent("\n".join(lines[start:end]))


def _main_correction(src: str, out: str) -> None:
    sys.path.append(str(TORCH_SITE))
    import inspect
    import math
    from collections import defaultdict
    from types import SimpleNamespace

    import torch
    import trl
    from trl.trainer import grpo_trainer
    from trl.trainer.grpo_trainer import GRPOTrainer

    assert trl.__version__ == TRL_VERSION, trl.__version__
    source = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    weights_code = compile(_if_block(source, IS_ANCHOR, 1), "trl-is-weights", "exec")
    metrics_code = compile(_if_block(source, METRICS_ANCHOR, -1), "trl-is-metrics", "exec")
    data = np.load(src)
    cases = json.loads(str(data["cases"]))
    logp0 = torch.tensor(data["logp"])
    old = torch.tensor(data["old_logp"])
    ref = torch.tensor(data["ref_logp"])
    advantages = torch.tensor(data["advantages"])
    results = {}
    for i, case in enumerate(cases):
        mask = torch.tensor(data[case["mask"]]).int()
        sampler = torch.tensor(data[case["sampler"]])
        logp = logp0.clone().requires_grad_(True)
        trainer = object.__new__(GRPOTrainer)
        args = SimpleNamespace(use_bias_correction_kl=case.get("use_bias_correction_kl", False),
                               delta=case.get("delta"), steps_per_generation=1,
                               sapo_temperature_pos=1.0, sapo_temperature_neg=1.05,
                               vespo_k_pos=2.0, vespo_lambda_pos=3.0, vespo_k_neg=3.0,
                               vespo_lambda_neg=2.0)
        metrics = defaultdict(lambda: defaultdict(list))
        trainer.__dict__.update(
            args=args, model=torch.nn.Module(), loss_type=case["loss_type"],
            importance_sampling_level=case["importance_sampling_level"],
            epsilon_low=case["epsilon"], epsilon_high=case["epsilon_high"], beta=case["beta"],
            max_completion_length=case["max_completion_length"], top_entropy_quantile=1.0,
            aux_loss_enabled=False, use_vllm=True,
            off_policy_mask_threshold=case.get("off_policy_mask_threshold"),
            vllm_importance_sampling_correction=True,
            vllm_importance_sampling_mode=case["mode"],
            vllm_importance_sampling_clip_min=case["clip_min"],
            vllm_importance_sampling_clip_max=case["clip_max"],
            _entropy_bonus_enabled=False, entropy_coef=0.0, use_adaptive_entropy=False,
            current_gradient_accumulation_steps=1, _metrics=metrics,
            accelerator=SimpleNamespace(num_processes=1, gather=lambda x: x, sync_gradients=True,
                                        reduce=lambda x, reduction="sum": x,
                                        pad_across_processes=lambda x, dim=0, pad_index=0: x),
            _get_per_token_logps_and_entropies=lambda *a, **k: (logp, torch.zeros_like(logp),
                                                                None))
        # _generate_and_score_completions' locals the two blocks read.
        scope = dict(vars(grpo_trainer), self=trainer, torch=torch, math=math,
                     old_per_token_logps=old, sampling_per_token_logps=sampler,
                     completion_mask=mask, tool_mask=None, mode="train", device="cpu")
        with torch.no_grad():
            exec(weights_code, scope)
            exec(metrics_code, scope)
        ratio = scope["vllm_importance_sampling_ratio"]
        n = len(mask)
        inputs = {"prompt_ids": torch.zeros((n, 1), dtype=torch.long),
                  "prompt_mask": torch.ones((n, 1), dtype=torch.long),
                  "completion_ids": torch.ones(mask.shape, dtype=torch.long),
                  "completion_mask": mask, "advantages": advantages,
                  "old_per_token_logps": old, "sampling_per_token_logps": sampler,
                  "importance_sampling_ratio": ratio, "num_items_in_batch": mask.sum()}
        if case["beta"]:
            inputs["ref_per_token_logps"] = ref
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
        results[f"{i}/weights"] = ratio.numpy()
        results[f"{i}/loss"] = loss.detach().numpy()
        results[f"{i}/grad"] = logp.grad.numpy()
        for key, name in TRL_METRICS.items():
            results[f"{i}/{key}"] = np.array(metrics["train"][name][-1])
    np.savez(out, **results)


def _main(src: str, out: str) -> None:
    sys.path.append(str(TORCH_SITE))  # appended: the test environment's own packages win
    from collections import defaultdict
    from types import SimpleNamespace

    import torch
    import trl
    from trl.trainer.grpo_trainer import GRPOTrainer
    from trl.trainer.utils import nanstd

    assert trl.__version__ == TRL_VERSION, trl.__version__
    data = np.load(src)
    cases = json.loads(str(data["cases"]))
    logp0 = torch.tensor(data["logp"])
    old = torch.tensor(data["old_logp"])
    ref = torch.tensor(data["ref_logp"])
    mask0 = torch.tensor(data["mask"]).int()
    rewards = torch.tensor(data["rewards"])
    entropy0 = torch.tensor(data["entropy"]) if "entropy" in data else torch.zeros_like(logp0)
    ids = data["completion_ids"]
    lengths = data["mask"].sum(-1).astype(int)
    eos, pad = int(data["eos"]), int(data["pad"])
    completion_ids_list = [list(ids[i, :n]) for i, n in enumerate(lengths)]
    results = {}
    for i, case in enumerate(cases):
        g = case["num_generations"]
        # _generate_and_score_completions, sum_then_normalize (one reward function).
        mean = torch.nanmean(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
        if case["scale_rewards"] in ("group", "none"):
            std = nanstd(rewards.view(-1, g), dim=1).repeat_interleave(g, dim=0)
        else:
            std = nanstd(rewards).expand_as(rewards)
        advantages = rewards - mean
        if case["scale_rewards"] != "none":
            advantages = advantages / (std + 1e-4)
        mask = mask0
        if case["mask_truncated"]:
            is_truncated = torch.tensor([row[-1] not in (eos, pad) for row in completion_ids_list])
            mask = mask * (~is_truncated).unsqueeze(1).int()
        num_items_in_batch = mask.sum()

        trainer = object.__new__(GRPOTrainer)
        args = SimpleNamespace(use_bias_correction_kl=case.get("use_bias_correction_kl", False),
                               delta=case.get("delta"), steps_per_generation=1,
                               sapo_temperature_pos=case.get("sapo_temperature_pos", 1.0),
                               sapo_temperature_neg=case.get("sapo_temperature_neg", 1.05),
                               vespo_k_pos=case.get("vespo_k_pos", 2.0),
                               vespo_lambda_pos=case.get("vespo_lambda_pos", 3.0),
                               vespo_k_neg=case.get("vespo_k_neg", 3.0),
                               vespo_lambda_neg=case.get("vespo_lambda_neg", 2.0))
        logp = logp0.clone().requires_grad_(True)
        entropy = entropy0.clone().requires_grad_(True)
        entropy_coef = case.get("entropy_coef", 0.0)
        trainer.__dict__.update(
            args=args, model=torch.nn.Module(), loss_type=case["loss_type"],
            importance_sampling_level=case["importance_sampling_level"],
            epsilon_low=case["epsilon"], epsilon_high=case["epsilon_high"], beta=case["beta"],
            max_completion_length=case["max_completion_length"],
            top_entropy_quantile=case.get("top_entropy_quantile", 1.0),
            aux_loss_enabled=False, use_vllm=False,
            off_policy_mask_threshold=case.get("off_policy_mask_threshold"),
            vllm_importance_sampling_correction=False,
            _entropy_bonus_enabled=entropy_coef != 0.0, entropy_coef=entropy_coef,
            use_adaptive_entropy=False,
            current_gradient_accumulation_steps=1, _metrics=defaultdict(lambda: defaultdict(list)),
            accelerator=SimpleNamespace(num_processes=1, gather=lambda x: x, sync_gradients=True,
                                        reduce=lambda x, reduction="sum": x,
                                        pad_across_processes=lambda x, dim=0, pad_index=0: x),
            _get_per_token_logps_and_entropies=lambda *a, **k: (logp, entropy, None))
        inputs = {"prompt_ids": torch.zeros((len(ids), 1), dtype=torch.long),
                  "prompt_mask": torch.ones((len(ids), 1), dtype=torch.long),
                  "completion_ids": torch.tensor(ids), "completion_mask": mask,
                  "advantages": advantages, "old_per_token_logps": old,
                  "num_items_in_batch": num_items_in_batch}
        if case["beta"]:
            inputs["ref_per_token_logps"] = ref
        loss = trainer._compute_loss(trainer.model, inputs)
        loss.backward()
        results[f"{i}/loss"] = loss.detach().numpy()
        results[f"{i}/grad"] = logp.grad.numpy()
        results[f"{i}/grad_entropy"] = (entropy.grad if entropy.grad is not None
                                        else torch.zeros_like(entropy)).numpy()
        results[f"{i}/advantages"] = advantages.numpy()
    np.savez(out, **results)


if __name__ == "__main__":
    if sys.argv[1] == "--correction":
        _main_correction(*sys.argv[2:4])
    else:
        _main(*sys.argv[1:3])
