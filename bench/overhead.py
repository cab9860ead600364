"""What rlexp costs on top of Tunix, in one script (each part in its own process).

  1. full rlexp run (the default config via Hydra compose, through rlexp.job.experiment.run
     with its real listeners: console, MLflow): steady-state seconds per step, time from
     process start to the first training step, peak RSS;
  2. bare Tunix: RLCluster + GRPOLearner(GRPOConfig).train() on the same tiny model, the
     same warm-start weights, prompts, rewards, batch shapes, optimizer and sampling keys
     (so both decode the same completions): steady-state s/step.

Targets: step-time ratio rlexp/bare <= 1.00; first step <= 30 s warm (40 s cold); peak
RSS <= 3 GB.

    python bench/overhead.py            # 40 steps each (steady state = median after 5)
    python bench/overhead.py --steps 80 -- algo=gspo
    python bench/overhead.py --trace    # + host seconds per phase of a step, rlexp and bare
    python bench/overhead.py --repeats 3   # rlexp and bare alternate 3 times: medians
    python bench/overhead.py --repeats 3 --ab algo.beta=0
        # + a third side, rlexp with this override too, in the same alternation (A/B of a key)
    python bench/overhead.py --repeats 3 --ab rollout.logprob_gap_every=1
        # + rlexp whose sampler returns its per-token log-probs every step (as every step did before rollout.logprob_gap_every)
    python bench/overhead.py --no-warm  # without the warm-cache start-up rerun

Each A/B side also prints CPU seconds per step (all of the process's threads): on a shared
host wall time counts the other jobs' load too. Measured on a quiet 2-core CPU (load < 1), the
default run (MLflow tracking on), `--repeats 3 --steps 40 --no-warm`: rlexp 0.3293 s/step, bare
Tunix 0.3258 (1.011); CPU 0.5611 vs 0.5585 (1.005); bare's own repeats spread 0.3145-0.3331;
the same command half an hour later: 0.3491 vs 0.3374 (1.035), CPU 1.033.
Timed inside both processes (40 steps, medians): Tunix's global step (RLLearner._run_global_step:
rollout, rewards, advantages, update) 325.5-334.6 ms under rlexp vs 325.5-340.8 ms bare, the same
within the spread between processes; what rlexp adds around it is ~4 ms a step (the metrics'
one fetch and statistics 1.2 ms, the listeners 1.1 ms, data and sampling keys ~1 ms). With
tracker=none the CPU ratio is the same (0.996 of the tracked run): MLflow's writer thread
writes in the update's gaps. Earlier figures were taken under load 7-15 (wall ratios 0.86-1.13).
On another 2-core CPU (AMD EPYC, ~2.3x slower a step), per-thread CPU in the steady state
(/proc/<pid>/task/*/stat over 30 s): MLflow's SystemMetricsMonitor thread 3.4% of a core (it read
the run from the sqlite store at every 1 s sample, 20-22 ms of CPU each) and rlexp's MLflow
writer 3.4%, taken from XLA's two threads (148% vs bare's 154%). With rlexp sampling MLflow's
monitors on its own thread: the two tracking threads 2.1%, XLA's 153%; `--repeats 3 --steps 30
--no-warm --ab tracker=none`: rlexp 0.7952 s/step, bare 0.8020 (0.992; CPU 0.992), tracker=none
1.050 of the tracked run: the spread between processes there is +-5-10%; the same command
half an hour later: 0.7868 vs 0.7451 (1.056; CPU 1.066, every rlexp repeat above every bare one).
On an Intel 2-core CPU (load < 1), `--repeats 3 --steps 30 --no-warm`: rlexp 0.8101 s/step,
bare 0.7617 (1.063; CPU 1.024, every rlexp repeat above every bare one); the same with --trace
twenty minutes later: 1.0980 vs 1.1786 (0.932; CPU 0.993; each side's repeats spread 0.87-1.32
s/step). The wall ratio moves more between runs than rlexp's CPU share (0.99-1.07) does.
The same Intel CPU, quiet, `--repeats 3 --steps 30 --no-warm --trace`: rlexp 0.7716 s/step,
bare 0.7892 (0.978; CPU 1.020); phases rollout 0.2005 vs 0.2063, update 0.5402 vs (update +
Tunix's loop) 0.5319, rlexp's loop 2.6 ms, metrics fetch 0.9 ms; a day later, the same command:
0.6899 vs 0.6995 (0.986; CPU 0.989), update 0.4956 vs 0.5139. The loss alone (rlexp's registered
loss vs Tunix's grpo_loss_fn, value_and_grad under jit, the default batch of 128 rows, 60
alternated calls): 400.5 vs 399.7 ms (1.002): its extra statistics (entropy, its 10% quantile,
ratio and gap statistics) cost nothing measurable beside the model's forward and backward.

--trace splits a step into the same phases on both sides (median over the steady steps):
rollout (the sampler calls, incl. their device time), reward/advantage/log-probs (the rest of
Tunix's data preparation), update (the policy update(s) as the host sees them), metrics fetch
(rlexp's one device->host copy, which waits for the last update) and the loop around the step
(data, learning rate, logging, listeners).
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

    from rlexp.config.convert import to_config
    from rlexp.config.schema import register_configs
    from rlexp.config.paths import conf_dir

    register_configs()
    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        return to_config(compose("config", overrides=overrides))


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def part_rlexp(workdir: Path, overrides: list[str]) -> dict:
    import psutil

    from rlexp.job import experiment
    from rlexp.base.events import Listener

    t0 = psutil.Process().create_time()
    cfg = _compose(overrides)
    stamps: dict = {"metrics": [], "cpu": [], "eval0": None, "times": []}

    class Stamps(Listener):
        def on_eval(self, step, metrics, samples):
            if stamps["eval0"] is None:
                stamps["eval0"] = time.time()

        def on_metrics(self, step, metrics):
            stamps["metrics"].append(time.time())
            stamps["cpu"].append(time.process_time())
            stamps["times"].append({k: v for k, v in metrics.items() if k.startswith("time/")
                                    or k.startswith("train/completion_length")})

    make = experiment.listeners_for
    experiment.listeners_for = lambda c, d: [*make(c, d), Stamps()]
    job = experiment.JobContext(run_dir=workdir / "run", name="overhead", choices={},
                                overrides=overrides)
    (workdir / "run").mkdir(parents=True, exist_ok=True)
    experiment.run(cfg, job)
    m, c = stamps["metrics"], stamps["cpu"]
    return {"intervals": [b - a for a, b in zip(m, m[1:])],
            "cpu_intervals": [b - a for a, b in zip(c, c[1:])],
            "first_step_start_s": stamps["eval0"] - t0, "first_step_done_s": m[0] - t0,
            "peak_rss_mb": _peak_rss_mb(), "times": stamps["times"]}


def part_bare(overrides: list[str], trace: bool = False) -> dict:
    """Tunix's own GRPO loop; nothing of rlexp but config values, weights and data."""
    from tunix.generate.tokenizer_adapter import TokenizerAdapter
    from tunix.rl import rl_cluster as rlc
    from tunix.rl.grpo.grpo_learner import GRPOConfig, GRPOLearner
    from tunix.rl.rollout import base_rollout

    from rlexp.inputs import model_files as models
    from rlexp.data import rewards
    from rlexp.engine import warm_start
    from rlexp.engine import tunix_models as engine_models
    from rlexp.engine.tunix_adapter import optimizer
    from rlexp.data import build_splits, load_problems
    from rlexp.planning.hardware import role_meshes

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
    cpu: list[float] = []
    terms = rewards.for_run(cfg)

    lengths: list[dict] = []

    def make_fn(term, first):
        def fn(prompts, completions, answer, **_):
            if first:
                stamps.append(time.time())
                cpu.append(time.process_time())
                n = [len(raw_tok.encode(c)) for c in completions]  # decode steps ~ the longest
                lengths.append({"train/completion_length": sum(n) / len(n),
                                "train/completion_length_max": max(n)})
            return list(term(prompts, completions, [str(x) for x in answer]))  # weighted
        fn.__name__ = term.name
        return fn

    reward_fns = [make_fn(term, i == 0) for i, term in enumerate(terms)]
    # The run's optimizer as optax values (clip, AdamW, its learning-rate schedule): the same
    # updates on both sides, so both policies decode the same lengths.
    opt = optimizer(cfg)
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
    _fresh_sampling_keys(cluster, stamps, t.seed)
    times = _trace_bare(learner, cluster, stamps) if trace else []
    learner.train(batches)
    for entry, n in zip(times, lengths):
        entry.update(n)
    return {"intervals": [b - a for a, b in zip(stamps, stamps[1:])],
            "cpu_intervals": [b - a for a, b in zip(cpu, cpu[1:])], "peak_rss_mb": _peak_rss_mb(),
            "times": times}


def _fresh_sampling_keys(cluster, stamps: list, seed: int) -> None:
    """Tunix 0.1.7's vanilla rollout passes one RolloutConfig.seed to every sampler call, so
    bare Tunix samples the same noise at every step: fewer long outliers, and the decode
    loop (which runs until the longest row ends) does less work than rlexp's, whose key is
    fresh per step. Give the bare loop rlexp's own SamplingKeys, reset to rollout_key(seed,
    step) at each step as rlexp's loop does, so both sides sample the same completions."""
    import dataclasses

    from rlexp.engine import rollout_key
    from rlexp.engine.rollout import SamplingKeys

    keys = SamplingKeys()
    generate = cluster.rollout.generate
    reset_for = {"step": -1}

    def stepped_generate(prompts, rollout_config, **kw):
        step = len(stamps)  # the reward stamp of step k comes after its rollout
        if reset_for["step"] != step:
            keys.reset(rollout_key(seed, step + 1))
            reset_for["step"] = step
        return generate(prompts, dataclasses.replace(rollout_config, seed=keys.next()), **kw)

    cluster.rollout.generate = stepped_generate


def _trace_bare(learner, cluster, stamps: list) -> list:
    """Per-step rollout and data-preparation seconds of the bare loop (same cut as rlexp's
    time/rollout_s and time/prepare_s). Step k's preparation starts before its reward stamp,
    so it is the entry numbered by the stamps so far."""
    times: list[dict] = []
    generate, prepare = cluster.generate, learner._generate_and_compute_advantage

    def entry() -> dict:
        while len(times) <= len(stamps):
            times.append({"time/rollout_s": 0.0, "time/prepare_s": 0.0})
        return times[len(stamps)]

    def timed_generate(*args, **kw):
        e, t = entry(), time.perf_counter()
        out = generate(*args, **kw)
        e["time/rollout_s"] += time.perf_counter() - t
        return out

    def timed_prepare(*args, **kw):
        e, t = entry(), time.perf_counter()
        out = prepare(*args, **kw)
        e["time/prepare_s"] += time.perf_counter() - t
        return out

    cluster.generate, learner._generate_and_compute_advantage = timed_generate, timed_prepare
    return times


def median(xs: list[float]) -> float:
    import statistics

    return statistics.median(xs) if xs else float("nan")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--part", choices=["rlexp", "bare"], help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--trace", action="store_true", help="print host seconds per phase of a step")
    p.add_argument("--repeats", type=int, default=1,
                   help="alternate rlexp and bare this many times; medians of the repeats")
    p.add_argument("--ab", action="append", default=[], metavar="KEY=VALUE",
                   help="a third side: rlexp with this override too (repeatable), alternating "
                        "with the others")
    p.add_argument("--no-warm", action="store_true",
                   help="skip the warm-cache rerun (its start-up figure)")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    if a.part:
        out = (part_rlexp(a.workdir, a.overrides) if a.part == "rlexp"
               else part_bare(a.overrides, a.trace))
        print("RESULT " + json.dumps(out), flush=True)
        return
    work = Path(tempfile.mkdtemp(prefix="rlexp-overhead-"))
    overrides = [f"train.steps={a.steps}", "eval.every=0", f"run.cache_dir={work / 'cache'}",
                 f"tracker.uri=sqlite:///{work / 'mlflow.db'}", *a.overrides]
    results: dict = {}

    def part(label: str, kind: str, extra: list[str]) -> dict:
        work_part = work / label
        work_part.mkdir()
        cmd = [sys.executable, __file__, "--part", kind, "--workdir", str(work_part),
               *(["--trace"] if a.trace else []), *overrides, *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1"})
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            sys.exit(f"{label} part failed:\n{proc.stderr[-3000:]}")
        return json.loads(line[len("RESULT "):])

    # rlexp first: it writes the warm-start cache that the bare loop and the warm rerun load.
    # Then the two alternate: a process's steady s/step varies by up to ~10% from one
    # process to the next on a shared VM, so each side's figure is the median of its repeats.
    # sides: label -> (part kind, extra overrides)
    sides: dict[str, tuple[str, list[str]]] = {"rlexp": ("rlexp", []), "bare": ("bare", [])}
    if a.ab:
        sides["rlexp B"] = ("rlexp", a.ab)
    steady: dict[str, list[float]] = {side: [] for side in sides}
    # CPU seconds per step (all of the process's threads): on a shared host, wall time also
    # counts the other jobs' load; the work a step does is what an A/B compares.
    steady_cpu: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(a.repeats):
        for side, (kind, extra) in sides.items():
            label = side.replace(" ", "-") + ("" if i == 0 else f"-{i}")
            started = time.perf_counter()
            results[label] = part(label, kind, extra)
            steady[side].append(median(results[label]["intervals"][SKIP:]))
            steady_cpu[side].append(median(results[label]["cpu_intervals"][SKIP:]))
            # as it goes: a run cut by a time limit (bench/device_check.sh) still shows these
            print(f"steady-state of part {label}: {steady[side][-1]:.4f} s/step, CPU "
                  f"{steady_cpu[side][-1]:.4f} s/step ({time.perf_counter() - started:.0f} s)",
                  flush=True)
    if not a.no_warm:
        results["rlexp-warm"] = part("rlexp-warm", "rlexp", ["train.steps=6"])
    if a.repeats > 1:
        for side in sides:
            print(f"  {side} s/step per repeat: {' '.join(f'{x:.4f}' for x in steady[side])}"
                  f"  (CPU s/step {' '.join(f'{x:.4f}' for x in steady_cpu[side])})")
    for side in sides:
        if side not in ("rlexp", "bare"):
            what = " ".join(a.ab)
            for unit, table in (("s/step", steady), ("CPU s/step", steady_cpu)):
                b, r = median(table[side]), median(table["rlexp"])
                print(f"A/B: {side} ({what}) {b:.4f} {unit} vs rlexp {r:.4f}: ratio "
                      f"{b / r:.3f}; vs bare Tunix {b / median(table['bare']):.3f}")
    ours, bare = median(steady["rlexp"]), median(steady["bare"])
    cold, warm = results["rlexp"], results.get("rlexp-warm")
    print(f"steady-state s/step ({a.steps} steps, median after {SKIP}"
          f"{f', median of {a.repeats} repeats' if a.repeats > 1 else ''}): rlexp {ours:.4f}  "
          f"bare Tunix {bare:.4f}  ratio {ours / bare:.3f} (target <= 1.00)")
    ours_cpu, bare_cpu = median(steady_cpu["rlexp"]), median(steady_cpu["bare"])
    print(f"steady-state CPU s/step (all threads): rlexp {ours_cpu:.4f}  bare Tunix "
          f"{bare_cpu:.4f}  ratio {ours_cpu / bare_cpu:.3f}")
    for name, r, target in (("cold caches (warm start trained, JAX compiles)", cold, 40),
                            ("warm caches", warm, 30)):
        if r is None:
            continue
        print(f"start -> first training step, {name}: starts at {r['first_step_start_s']:.1f}s, "
              f"done at {r['first_step_done_s']:.1f}s (target <= {target} s)")
    print(f"peak RSS: rlexp run {cold['peak_rss_mb']:.0f} MB (target <= 3072 MB); "
          f"bare Tunix {results['bare']['peak_rss_mb']:.0f} MB")
    if a.trace:
        print_trace(results["rlexp"], results["bare"])


def phases(result: dict) -> dict[str, float]:
    """Median host seconds per phase over the steady steps (see the module docstring)."""
    steps = result["times"][SKIP:]
    gaps = result["intervals"][SKIP - 1:]
    rows = []
    for t, gap in zip(steps, gaps):
        rollout, prepare = t.get("time/rollout_s", 0.0), t.get("time/prepare_s", 0.0)
        row = {"completion tokens, mean": t.get("train/completion_length", float("nan")),
               "completion tokens, longest": t.get("train/completion_length_max", float("nan")),
               "step interval": gap, "rollout (sampler)": rollout,
               "reward, advantage, log-probs": prepare - rollout}
        if "time/step_s" in t:  # rlexp: the step is timed from outside, the fetch inside
            fetch = t.get("time/fetch_s", 0.0)
            row.update({"update(s)": t["time/step_s"] - prepare - fetch, "metrics fetch": fetch,
                        "loop around the step": gap - t["time/step_s"]})
        else:  # bare: the rest of Tunix's loop (update, its metrics, its bookkeeping)
            row["update(s) and Tunix's loop"] = gap - prepare
        rows.append(row)
    return {k: median([r[k] for r in rows]) for k in rows[0]} if rows else {}


def print_trace(ours: dict, bare: dict) -> None:
    mine, theirs = phases(ours), phases(bare)
    print(f"host seconds per step phase (median of steady steps): {'rlexp':>9} {'bare':>9}")
    for k in dict.fromkeys([*mine, *theirs]):
        a, b = mine.get(k), theirs.get(k)
        print(f"  {k:<36} {'' if a is None else f'{a:9.4f}':>9} {'' if b is None else f'{b:9.4f}':>9}")

if __name__ == "__main__":
    main()
