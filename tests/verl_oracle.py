"""verl's own policy losses and advantage estimators as an oracle (verl 0.9.1,
verl/trainer/ppo/core_algos.py) on given arrays.

verl is not a dependency of rlexp: `scripts/setup --test` installs it with --no-deps (and the
three small packages its import needs: tensordict, pyvers, codetiming) into the torch
directory of tests/hf_forward.py. Like tests/trl_oracle.py, it runs in a child process that
appends that directory to sys.path, so the test process stays torch-free.

The functions are verl's registered ones, called as verl's actor calls them
(`get_policy_loss_fn(mode)(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode,
config)`, `get_adv_estimator_fn(name)(token_level_rewards, response_mask, index, config=...)`);
the config is a namespace holding only the fields those functions read, with verl's names
(clip_ratio*, policy_loss.clip_cov_*, policy_loss.kl_cov_ratio, policy_loss.ppo_kl_coef,
policy_loss.dro_beta,
global_batch_info; gamma for REINFORCE++). Log-probs are a leaf tensor whose gradient is
returned.

    python tests/verl_oracle.py IN.npz OUT.npz      # what verl_losses()/verl_advantages() run
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
VERL_VERSION = "0.9.1"


def verl_available() -> bool:
    return all((TORCH_SITE / p / "__init__.py").is_file()
               for p in ("torch", "verl", "tensordict", "codetiming", "pyvers"))


def _run(arrays: dict[str, np.ndarray], cases: list[dict]) -> list[dict[str, np.ndarray]]:
    from rlexp.base.runtime import environment  # safe from other threads' unsets

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / "in.npz", Path(tmp) / "out.npz"
        np.savez(src, cases=np.array(json.dumps(cases)), **arrays)
        proc = subprocess.run([sys.executable, __file__, str(src), str(out)],
                              capture_output=True, text=True, timeout=600,
                              env={**environment(), "CUDA_VISIBLE_DEVICES": "",
                                   "DISABLE_MLFLOW_INTEGRATION": "TRUE"})
        if proc.returncode != 0:
            raise AssertionError(f"verl failed:\n{proc.stderr[-3000:]}")
        got = np.load(out)
        return [{k.split("/", 1)[1]: got[k] for k in got.files if k.startswith(f"{i}/")}
                for i in range(len(cases))]


def verl_losses(arrays: dict[str, np.ndarray], cases: list[dict]) -> list[dict[str, np.ndarray]]:
    """arrays: logp, old_logp, mask [B, T], and per case `advantages` key naming an array
    [B]. Each case: loss_mode (geo_mean | clip_cov | kl_cov | dro), advantages, loss_agg_mode,
    clip_ratio_low, clip_ratio_high, and the mode's own knobs. Returns loss and grad."""
    return _run(arrays, [dict(c, kind="loss") for c in cases])


def verl_advantages(arrays: dict[str, np.ndarray], cases: list[dict]
                    ) -> list[dict[str, np.ndarray]]:
    """Each case: estimator (rloo | reinforce_plus_plus | reinforce_plus_plus_baseline),
    rewards (array name, [B]), mask (array name, [B, T]), group_size. The outcome reward sits
    on each completion's last token, as verl's reward manager puts it. Returns advantages
    [B, T]."""
    return _run(arrays, [dict(c, kind="advantage") for c in cases])


def _main(src: str, out: str) -> None:
    sys.path.append(str(TORCH_SITE))  # appended: the test environment's own packages win
    from types import SimpleNamespace

    import torch
    import verl
    from verl.trainer.ppo import core_algos

    assert verl.__version__ == VERL_VERSION, verl.__version__
    data = np.load(src)
    cases = json.loads(str(data["cases"]))
    results = {}
    for i, case in enumerate(cases):
        if case["kind"] == "loss":
            mask = torch.tensor(data["mask"])
            adv = torch.tensor(data[case["advantages"]])[:, None] * mask  # verl tiles them
            logp = torch.tensor(data["logp"]).requires_grad_(True)
            old = torch.tensor(data["old_logp"])
            policy = SimpleNamespace(**{k: case.get(k) for k in (
                "clip_cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_ratio", "ppo_kl_coef",
                "dro_beta")})
            config = SimpleNamespace(clip_ratio=case["clip_ratio_low"],
                                     clip_ratio_low=case["clip_ratio_low"],
                                     clip_ratio_high=case["clip_ratio_high"],
                                     policy_loss=policy, global_batch_info={})
            fn = core_algos.get_policy_loss_fn(case["loss_mode"])
            loss, _ = fn(old, logp, adv, mask, loss_agg_mode=case["loss_agg_mode"],
                         config=config)
            loss.backward()
            results[f"{i}/loss"] = loss.detach().numpy()
            results[f"{i}/grad"] = logp.grad.numpy()
        else:
            mask = torch.tensor(data[case["mask"]])
            rewards = torch.tensor(data[case["rewards"]])
            last = mask.sum(-1).long() - 1
            token_rewards = torch.zeros_like(mask)
            token_rewards[torch.arange(len(rewards)), last] = rewards
            index = np.repeat(np.arange(len(rewards) // case["group_size"]), case["group_size"])
            fn = core_algos.get_adv_estimator_fn(case["estimator"])
            adv, _ = fn(token_level_rewards=token_rewards, response_mask=mask, index=index,
                        config=SimpleNamespace(gamma=1.0))
            results[f"{i}/advantages"] = adv.numpy()
    np.savez(out, **results)


if __name__ == "__main__":
    _main(*sys.argv[1:3])
