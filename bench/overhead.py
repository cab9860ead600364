"""What rlexp costs on top of Tunix, in one script (each part in its own process).

  1. full rlexp run (the default config via Hydra compose, through rlexp.experiment.run
     with its real listeners: console, MLflow): steady-state seconds per step, time from
     process start to the first training step, peak RSS;
  2. bare Tunix: RLCluster + GRPOLearner(GRPOConfig).train() on the same tiny model, the
     same warm-start weights, prompts, rewards and batch shapes: steady-state s/step.

Targets: step-time ratio rlexp/bare <= 1.05; first step <= 30 s; peak RSS <= 3 GB.

    python bench/overhead.py            # 40 steps each (steady state = median after 5)
    python bench/overhead.py --steps 80 -- algo=gspo
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SKIP = 5  # compile and warm-up steps left out of the steady state


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    from rlexp.config import register_configs, to_config
    from rlexp.paths import conf_dir

    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return to_config(compose("config", overrides=overrides))


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def part_rlexp(workdir: Path, overrides: list[str]) -> dict:
    import psutil

    from rlexp import experiment
    from rlexp.events import Listener

    t0 = psutil.Process().create_time()
    cfg = _compose(overrides)
    stamps: dict = {"metrics": [], "eval0": None}

    class Stamps(Listener):
        def on_eval(self, step, metrics, samples):
            if stamps["eval0"] is None:
                stamps["eval0"] = time.time()

        def on_metrics(self, step, metrics):
            stamps["metrics"].append(time.time())

    make = experiment._listeners
    experiment._listeners = lambda c, d: [*make(c, d), Stamps()]
    job = experiment.JobContext(run_dir=workdir / "run", name="overhead", choices={},
                                overrides=overrides)
    (workdir / "run").mkdir(parents=True, exist_ok=True)
    experiment.run(cfg, job)
    m = stamps["metrics"]
    return {"intervals": [b - a for a, b in zip(m, m[1:])],
            "first_step_start_s": stamps["eval0"] - t0, "first_step_done_s": m[0] - t0,
            "peak_rss_mb": _peak_rss_mb()}


def part_bare(overrides: list[str]) -> dict:
    """Tunix's own GRPO loop; nothing of rlexp but config values, weights and data."""
    import numpy as np
    import optax
    from tunix.generate.tokenizer_adapter import TokenizerAdapter
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner
    from tunix.rl.rollout import base_rollout

    from rlexp import models, rewards, warm_start
    from rlexp.engine import models as engine_models
    from rlexp.data import build_splits, load_problems
    from rlexp.hardware import role_meshes

    cfg = _compose(overrides)
    a, t, r = cfg.algo, cfg.train, cfg.rollout
    raw_tok = models.build_tokenizer(cfg.model)
    tok = TokenizerAdapter(raw_tok)
    splits = build_splits(load_problems(cfg.dataset), cfg.dataset.template, tok.encode, tok.decode,
                          r.max_prompt_length - 1)
    meshes = role_meshes(cfg.hardware)
    model = engine_models.build_model(cfg.model, meshes["trainer"], t.seed)
    warm_start.load_params(model, warm_start.cache_path(cfg))  # the rlexp part wrote it
    stamps: list[float] = []
    terms = rewards.terms(cfg.reward, cfg.dataset.template)

    def make_fn(term, first):
        def fn(prompts, completions, answer, **_):
            if first:
                stamps.append(time.time())
            return [term.weight * term.score(c, str(x)) for c, x in zip(completions, answer)]
        fn.__name__ = term.name
        return fn

    reward_fns = [make_fn(term, i == 0) for i, term in enumerate(terms)]
    opt = optax.chain(optax.clip_by_global_norm(t.grad_clip),
                      optax.adamw(t.learning_rate, b1=0.9, b2=0.99, weight_decay=t.weight_decay))
    rollout = base_rollout.RolloutConfig(max_tokens_to_generate=r.max_completion_length,
                                         temperature=r.temperature, top_p=1.0,
                                         max_prompt_length=r.max_prompt_length,
                                         kv_cache_size=r.kv_cache_size)
    cluster = rlc.RLCluster(
        actor=model, reference=engine_models.clone(model) if a.beta > 0 else None, tokenizer=raw_tok,
        cluster_config=rlc.ClusterConfig(
            role_to_mesh={rlc.Role.ACTOR: meshes["trainer"], rlc.Role.REFERENCE: meshes["trainer"],
                          rlc.Role.ROLLOUT: meshes["rollout"]},
            rollout_engine="vanilla", offload_to_cpu=False, rollout_config=rollout,
            training_config=rlc.RLTrainingConfig(
                actor_optimizer=opt, eval_every_n_steps=10**9, max_steps=t.steps,
                mini_batch_size=t.batch_size, train_micro_batch_size=t.batch_size)))
    learner = GRPOLearner(cluster, GRPOConfig(
        num_generations=a.num_generations, num_iterations=a.num_iterations, beta=a.beta,
        epsilon=a.epsilon, loss_algo="gspo-token" if a.name == "gspo" else "grpo",
        kl_loss_mode={"k1": "kl", "k2": "mse_kl", "k3": "low_var_kl"}[a.kl_estimator]),
        reward_fns=reward_fns)
    batches = [splits.train_batch(s, t.batch_size, t.seed) for s in range(t.steps)]
    learner.train(batches)
    return {"intervals": [b - a for a, b in zip(stamps, stamps[1:])], "peak_rss_mb": _peak_rss_mb()}


def median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--part", choices=["rlexp", "bare"], help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    if a.part:
        out = part_rlexp(a.workdir, a.overrides) if a.part == "rlexp" else part_bare(a.overrides)
        print("RESULT " + json.dumps(out), flush=True)
        return
    work = Path(tempfile.mkdtemp(prefix="rlexp-overhead-"))
    overrides = [f"train.steps={a.steps}", "eval.every=0", f"run.cache_dir={work / 'cache'}",
                 f"tracker.uri=sqlite:///{work / 'mlflow.db'}", *a.overrides]
    results = {}
    # rlexp first: it writes the warm-start cache that the bare loop and the warm rerun load.
    for label, part, extra in (("rlexp", "rlexp", []), ("bare", "bare", []),
                               ("rlexp-warm", "rlexp", ["train.steps=6"])):
        work_part = work / label
        work_part.mkdir()
        cmd = [sys.executable, __file__, "--part", part, "--workdir", str(work_part), *overrides, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            sys.exit(f"{label} part failed:\n{proc.stderr[-3000:]}")
        results[label] = json.loads(line[len("RESULT "):])
    ours, bare = (median(results[k]["intervals"][SKIP:]) for k in ("rlexp", "bare"))
    cold, warm = results["rlexp"], results["rlexp-warm"]
    print(f"steady-state s/step ({a.steps} steps, median after {SKIP}): rlexp {ours:.4f}  "
          f"bare Tunix {bare:.4f}  ratio {ours / bare:.3f} (target <= 1.05)")
    for name, r in (("cold cache (warm start trained)", cold), ("warm cache", warm)):
        print(f"start -> first training step, {name}: starts at {r['first_step_start_s']:.1f}s, "
              f"done at {r['first_step_done_s']:.1f}s (target <= 30 s)")
    print(f"peak RSS: rlexp run {cold['peak_rss_mb']:.0f} MB (target <= 3072 MB); "
          f"bare Tunix {results['bare']['peak_rss_mb']:.0f} MB")

if __name__ == "__main__":
    main()
