"""Measure the per-device memory of a GRPO step and compare it with rlexp's memory plan.

    python bench/memory_calibration.py --engine              # tiny + the larger check config,
                                                             # real runs built by the engine
    python bench/memory_calibration.py                       # same shapes, Tunix directly
    python bench/memory_calibration.py model=smollm2-135m    # any config overrides
    python bench/memory_calibration.py --shapes              # SmolLM2 at 3 RL shapes, engine
                                                             # runs, on the device at hand

What is measured (one CPU device, so "per device" is the whole run):
- persistent: bytes of the live JAX arrays between steps (jax.live_arrays): policy, reference
  (beta > 0), optimizer state, whatever else the run keeps;
- train step: XLA's buffer assignment (compiled.memory_analysis()) of the jitted GRPO update:
  temp + outputs - aliased outputs. With --engine it is Tunix's own PeftTrainer train step,
  captured with its real arguments during a second engine step; without, the same program
  rebuilt here (Tunix's `grpo_loss_fn` under `nnx.value_and_grad` + `optimizer.update`,
  optimizer donated, as PeftTrainer jits it);
- rollout: the sampling state (KV cache, buffers) plus XLA's temp of the sampler's prefill and
  decode programs (with --engine: Tunix's Sampler's own compiled functions).
The measured peak is persistent + max(train step, rollout), the same shape as the plan.
XLA's buffer assignment is what a TPU/GPU allocates for these programs; on CPU it is the only
per-device figure JAX reports (`Device.memory_stats()` is None there). On a GPU/TPU the engine
runs also read `memory_stats()['peak_bytes_in_use']` (preallocation off), the measured figure
printed there: plan / measured is the ratio to check (GPU figures so far: a lent H100 measured
the plan 1.35-1.41x above the peak on six SmolLM2 shapes). `--rss` also runs one
step and reports the process's peak RSS growth (includes compiler and runtime overheads).
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rlexp.config.schema import Config

# The two configs the plan is held to +-25% against (tests/test_plan.py runs them, slow).
# The larger one is SmolLM2-135M's architecture in float32 with a realistic RL batch.
CHECK_CONFIGS: dict[str, list[str]] = {
    "tiny": ["model=tiny"],
    "smollm2-135m": ["model=smollm2-135m", "model.dtype=float32", "train.batch_size=2",
                     "train.micro_batch_size=null", "train.remat=none",
                     "algo.num_generations=4", "rollout.max_prompt_length=96",
                     "rollout.max_completion_length=64", "rollout.kv_cache_size=192"],
}

# --shapes: SmolLM2-135M at RL shapes (128 + 128 tokens) that an accelerator holds; on CPU the
# same shapes shrunk so a 24 GiB host runs them (the ratio is what is compared).
SHAPES: dict[str, list[str]] = {
    "bs8xg4-bf16": ["train.batch_size=8", "algo.num_generations=4", "model.dtype=bfloat16"],
    "bs16xg8-mb4-f32": ["train.batch_size=16", "train.micro_batch_size=4",
                        "algo.num_generations=8", "model.dtype=float32"],
    "bs32xg8-mb8-bf16-remat": ["train.batch_size=32", "train.micro_batch_size=8",
                               "algo.num_generations=8", "model.dtype=bfloat16",
                               "train.remat=full"],
}
SHAPE_BASE = ["model=smollm2-135m", "model.param_dtype=float32", "train.micro_batch_size=null",
              "train.remat=none", "rollout.max_prompt_length=128",
              "rollout.max_completion_length=128", "rollout.kv_cache_size=256"]
CPU_SHRINK = ["rollout.max_prompt_length=96", "rollout.max_completion_length=16",
              "rollout.kv_cache_size=112"]
# --shapes --dry: the same 3 shapes on the tiny model, on the CPU, in a minute or two (a check
# that the script runs end to end, e.g. before a lent accelerator's one call).
DRY_BASE = ["model=tiny", "model.param_dtype=float32", "train.micro_batch_size=null",
            "train.remat=none", "rollout.max_prompt_length=64",
            "rollout.max_completion_length=24", "rollout.kv_cache_size=96", "hardware=cpu"]


# Engine runs measure speed and memory, not weights: no warm-start stage, no tracking.
ENGINE_ONLY = ["model.warm_start_steps=0", "tracker=none"]


def merged(*groups: list[str]) -> list[str]:
    """The overrides of `groups` in order, a later group's value of a key replacing an earlier
    one's: pre-flight refuses a key given twice (SHAPE_BASE's micro-batch, then a shape's)."""
    out: dict[str, str] = {}
    for override in (o for group in groups for o in group):
        out[override.split("=", 1)[0]] = override
    return list(out.values())


def shape_runs(platform: str, dry: bool, extra: list[str]) -> dict[str, list[str]]:
    """--shapes: each shape's overrides on this platform (--dry: the tiny model on the CPU);
    `extra` (the command line's overrides) applies to each."""
    if dry:
        return {k: merged(DRY_BASE, v, extra) for k, v in SHAPES.items()}
    hw = {"gpu": ["hardware=gpu"], "cpu": ["hardware=cpu", *CPU_SHRINK]}.get(platform, [])
    return {k: merged(SHAPE_BASE, v, hw, extra) for k, v in SHAPES.items()}


@dataclass
class Measured:
    persistent: int
    train_temp: int
    train_out: int
    rollout_cache: int
    rollout_temp: int
    peak: int
    rss_delta: int = 0
    # memory_stats()['peak_bytes_in_use'] of device 0 (GPU/TPU; None on CPU).
    device_peak: int | None = None


def compose(overrides: list[str]) -> Config:
    """Config from conf/ with `group=option` and `key=value` overrides, as the CLI composes it
    (the validated dataclass that pre-flight hands to a run)."""
    from rlexp.launch.preflight import preflight

    (cfg,) = preflight(["run.dry_run=true", *overrides]).jobs
    cfg.run.dry_run = False
    return cfg


def tunix_model(cfg: Config, seed: int = 0):
    """A randomly initialised Tunix model of cfg.model's architecture and dtype."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    m = cfg.model
    dtype = jnp.bfloat16 if m.dtype == "bfloat16" else jnp.float32
    if m.family == "qwen3":
        from tunix.models.qwen3 import model as lib

        tcfg = lib.ModelConfig(
            num_layers=m.num_layers, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
            hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
            num_kv_heads=m.num_kv_heads, rope_theta=int(m.rope_theta), norm_eps=m.norm_eps,
            use_tied_embedding=m.tie_embeddings, dtype=dtype, param_dtype=dtype)
        model = lib.Qwen3(tcfg, rngs=nnx.Rngs(seed))
    else:
        from tunix.models.llama3 import model as lib

        tcfg = lib.ModelConfig(
            num_layers=m.num_layers, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
            hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
            num_kv_heads=m.num_kv_heads, rope_theta=int(m.rope_theta), norm_eps=m.norm_eps,
            weight_tying=m.tie_embeddings)
        model = lib.Llama3(tcfg, rngs=nnx.Rngs(seed))
        if dtype != jnp.float32:  # Tunix's llama3 has no param dtype; cast like the loader
            state = nnx.state(model)
            nnx.update(model, jax.tree.map(lambda x: x.astype(dtype), state))
    return model


def _live_bytes() -> int:
    import jax

    return sum(x.nbytes for x in jax.live_arrays())


def measure(cfg: Config, rss: bool = False) -> Measured:
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from flax import nnx
    from tunix.rl import algo_core, common
    from tunix.rl.grpo.grpo_learner import GRPOConfig

    from rlexp.planning.plan import micro_batch_prompts

    base_live = _live_bytes()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    policy = tunix_model(cfg, seed=0)
    reference = tunix_model(cfg, seed=1) if cfg.algo.beta > 0 else None
    optimizer = nnx.Optimizer(policy, optax.adamw(cfg.train.learning_rate), wrt=nnx.Param)
    persistent = _live_bytes() - base_live

    r, a = cfg.rollout, cfg.algo
    n = micro_batch_prompts(cfg) * a.num_generations
    rng = np.random.default_rng(0)
    prompt = jnp.asarray(rng.integers(1, cfg.model.vocab_size, (n, r.max_prompt_length)), jnp.int32)
    completion = jnp.asarray(
        rng.integers(1, cfg.model.vocab_size, (n, r.max_completion_length)), jnp.int32)
    example = common.TrainExample(
        prompt_ids=prompt, prompt_mask=jnp.ones_like(prompt),
        completion_ids=completion, completion_mask=jnp.ones_like(completion),
        advantages=jnp.asarray(rng.standard_normal(n), jnp.float32),
        ref_per_token_logps=(jnp.zeros(completion.shape, jnp.float32)
                             if reference is not None else None),
        old_per_token_logps=None)
    algo = GRPOConfig(num_generations=a.num_generations, beta=a.beta, epsilon=a.epsilon)
    algo.temperature = r.temperature  # set by GRPOLearner from the rollout config

    def loss_fn(model, example):
        return algo_core.grpo_loss_fn(model, example, algo, pad_id=0, eos_id=-1)

    def train_step(model, optimizer, example):
        (loss, _), grads = nnx.value_and_grad(loss_fn, has_aux=True)(model, example)
        optimizer.update(model, grads)
        return loss

    step = nnx.jit(train_step, donate_argnames=("optimizer",))
    train = step.lower(policy, optimizer, example).compile().memory_analysis()

    # Rollout: the cache the sampler allocates, then a prefill and a decode step over it.
    dtype = jnp.bfloat16 if cfg.model.dtype == "bfloat16" else jnp.float32
    cache = _init_cache(policy, cfg, n, dtype)
    cache_bytes = sum(x.nbytes for x in jax.tree.leaves(cache))

    def forward(model, tokens, positions, cache, mask):
        logits, new_cache = model(tokens, positions, cache, mask)
        return logits[:, -1], new_cache

    fwd = nnx.jit(forward, donate_argnums=(3,))
    p = r.max_prompt_length
    prefill = fwd.lower(policy, prompt, jnp.broadcast_to(jnp.arange(p), (n, p)), cache,
                        jnp.ones((n, p, r.kv_cache_size), bool)).compile().memory_analysis()
    decode = fwd.lower(policy, prompt[:, :1], jnp.full((n, 1), p), cache,
                       jnp.ones((n, 1, r.kv_cache_size), bool)).compile().memory_analysis()
    roll_temp = max(prefill.temp_size_in_bytes, decode.temp_size_in_bytes)
    train_out = train.output_size_in_bytes - train.alias_size_in_bytes
    peak = persistent + max(train.temp_size_in_bytes + train_out, cache_bytes + roll_temp)
    out = Measured(persistent=persistent, train_temp=train.temp_size_in_bytes,
                   train_out=train_out, rollout_cache=cache_bytes, rollout_temp=roll_temp,
                   peak=peak)
    if rss:
        jax.block_until_ready(step(policy, optimizer, example))
        out.rss_delta = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss0
    return out


def _abstract(tree):
    """ShapeDtypeStructs of a pytree's arrays (donated buffers die with the call)."""
    import jax

    return jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=x.sharding)
                        if isinstance(x, jax.Array) else x, tree)


def _tree_bytes(tree) -> int:
    import jax

    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(tree) if hasattr(x, "dtype"))


def _stage(name: str, since: float) -> float:
    """One progress line per stage of an engine measurement (a cut run shows where it was)."""
    now = time.perf_counter()
    print(f"#   {name} {now - since:.1f}s", flush=True)
    return now


def measure_engine(cfg: Config) -> Measured:
    """The same figures for a run built by the engine (`rlexp.engine.build`, the code the
    entry point runs): live arrays between steps, then XLA's buffer assignment of the very
    programs a step runs, captured from Tunix's trainer and sampler during a second step."""
    import functools

    from rlexp.engine import build, rollout_key
    from rlexp.planning.plan import make_plan

    if cfg.model.name == "smollm2-135m" and cfg.model.path is None:
        from rlexp.inputs.smollm2 import ensure_converted

        cfg.model.path = str(ensure_converted(cfg.run.cache_dir))
    import tempfile

    t = time.perf_counter()
    base = _live_bytes()
    engine = build(cfg, make_plan(cfg), Path(tempfile.mkdtemp(prefix="rlexp-mem-")))
    t = _stage("engine built", t)
    seed = cfg.train.seed
    engine.train_step(engine.splits.train_batch(0, cfg.train.batch_size, seed), rollout_key(seed, 1))
    t = _stage("first step (compiles)", t)
    persistent = _live_bytes() - base  # policy, reference, optimizer state, as between steps

    trainer = engine.cluster.actor_trainer
    sampler = engine.cluster._rollout._sampler
    calls: dict[str, tuple] = {}

    class Recorder:
        """Calls through to a jitted function, keeping the first call's arguments (abstract
        for donated ones); Tunix reads attributes such as `jitted_fn` off it, so delegate."""

        def __init__(self, name, fn, abstract):
            self.name, self.fn, self.abstract = name, fn, abstract

        def __call__(self, *args, **kwargs):
            calls.setdefault(self.name, (_abstract(args) if self.abstract else args, kwargs))
            return self.fn(*args, **kwargs)

        def __getattr__(self, attr):
            return getattr(self.fn, attr)

    # partial(nnx.cached_partial(nnx.jit(train_step), model, optimizer)): called with inputs.
    step_fn = trainer._jitted_train_step_fn
    trainer._jitted_train_step_fn = functools.partial(
        Recorder("train", step_fn.func, abstract=False), *step_fn.args, **step_fn.keywords)
    prefill, decode = sampler._compiled_prefill_fn, sampler._compiled_decode_fn
    sampler._compiled_prefill_fn = Recorder("prefill", prefill, abstract=True)
    sampler._compiled_decode_fn = Recorder("decode", decode, abstract=True)
    engine.train_step(engine.splits.train_batch(1, cfg.train.batch_size, seed), rollout_key(seed, 2))
    t = _stage("second step (programs captured)", t)

    args, kwargs = calls["train"]
    jitted = step_fn.func
    while not hasattr(jitted, "lower"):  # Tunix wraps the nnx.jit function (functools.wraps)
        jitted = jitted.__wrapped__
    train = jitted.lower(trainer.model, trainer.optimizer, *args, **kwargs).compile() \
        .memory_analysis()
    roll = []
    for name, fn in (("prefill", prefill), ("decode", decode)):
        args, kwargs = calls[name]
        stats = fn.lower(*args, **kwargs).compile().memory_analysis()
        # args[1] is the sampling state: KV cache, token buffers (allocated per call).
        roll.append((_tree_bytes(args[1]), stats.temp_size_in_bytes))
    _stage("buffer assignments (the three programs lowered and compiled again)", t)
    cache_bytes = max(b for b, _ in roll)
    roll_temp = max(temp for _, temp in roll)
    train_out = train.output_size_in_bytes - train.alias_size_in_bytes
    peak = persistent + max(train.temp_size_in_bytes + train_out, cache_bytes + roll_temp)
    import jax

    stats = jax.devices()[0].memory_stats() or {}
    return Measured(persistent=persistent, train_temp=train.temp_size_in_bytes,
                    train_out=train_out, rollout_cache=cache_bytes, rollout_temp=roll_temp,
                    peak=peak, device_peak=stats.get("peak_bytes_in_use"))


def _init_cache(model, cfg: Config, batch: int, dtype):
    """The sampler's KV cache: the model's init_cache (qwen3) or Tunix's _init_cache (llama3)."""
    from tunix.generate import sampler

    m, r = cfg.model, cfg.rollout
    if hasattr(model, "init_cache"):
        return model.init_cache(batch, r.kv_cache_size, dtype)
    return sampler._init_cache(n_layers=m.num_layers, cache_size=r.kv_cache_size,
                               batch_size=batch, num_kv_heads=m.num_kv_heads,
                               head_dim=m.head_dim, dtype=dtype)


def compare(name: str, overrides: list[str], rss: bool = False, engine: bool = False) -> dict:
    from rlexp.planning.plan import make_plan

    cfg = compose(overrides)
    plan = make_plan(cfg)
    t0 = time.perf_counter()
    got = measure_engine(cfg) if engine else measure(cfg, rss=rss)
    est = plan.memory_total
    measured = got.device_peak or got.peak  # the device's own peak where it reports one
    return {"config": name, "estimate_bytes": est, "measured_bytes": measured,
            "ratio": est / measured, "seconds": round(time.perf_counter() - t0, 1),
            "source": "memory_stats peak" if got.device_peak else "XLA buffer assignment",
            "device": _platform(),
            "estimate_items": plan.memory, "measured": asdict(got)}


def _platform() -> str:
    import jax

    return jax.devices()[0].platform


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="config overrides (default: the check configs)")
    parser.add_argument("--rss", action="store_true", help="also run a step and report peak RSS growth")
    parser.add_argument("--engine", action="store_true",
                        help="measure a run built by rlexp.engine.build (two real GRPO steps)")
    parser.add_argument("--shapes", action="store_true",
                        help="SmolLM2 at 3 RL shapes through the engine on the device at hand")
    parser.add_argument("--dry", action="store_true",
                        help="with --shapes: the tiny model on the CPU (tiny shapes, minutes)")
    parser.add_argument("--parallel", action="store_true",
                        help="with --shapes: each shape in a process of its own, all at once "
                             "(each reads its own peak); printed as they finish")
    parser.add_argument("--only", help=argparse.SUPPRESS)  # one shape (--parallel's children)
    args = parser.parse_args(argv)
    runs = {"custom": args.overrides} if args.overrides else CHECK_CONFIGS
    if args.shapes:
        import os

        # The device's peak counts what the run allocates, not a preallocated pool.
        os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        # overrides given with --shapes apply to each shape (e.g. run.cache_dir=...)
        runs = shape_runs("cpu" if args.dry else _platform(), args.dry, args.overrides)
        if args.only:
            runs = {args.only: runs[args.only]}
        elif args.parallel:
            return shapes_at_once(runs, args)
        args.engine = True
    for name, overrides in runs.items():
        if args.engine:
            overrides = merged(overrides, ENGINE_ONLY)
        if args.shapes:
            print(f"# {name}: started", flush=True)
        result = compare(name, overrides, rss=args.rss, engine=args.engine)
        print(json.dumps(result), flush=True)
        if args.shapes:
            gib = 1024**3
            print(f"# {name:<24} plan {result['estimate_bytes'] / gib:7.2f} GiB  measured "
                  f"{result['measured_bytes'] / gib:7.2f} GiB ({result['source']}, "
                  f"{result['device']})  plan/measured {result['ratio']:.2f}", flush=True)


def shapes_at_once(runs: dict[str, list[str]], args: argparse.Namespace) -> None:
    """--shapes --parallel: one child process per shape, started together; each one's output
    printed whole when it ends. The weights are converted once, before."""
    import subprocess
    import tempfile

    first = compose(merged(next(iter(runs.values())), ENGINE_ONLY))
    if first.model.name == "smollm2-135m" and first.model.path is None:
        from rlexp.inputs.smollm2 import ensure_converted

        ensure_converted(first.run.cache_dir)
    logs = Path(tempfile.mkdtemp(prefix="rlexp-mem-shapes-"))
    children = {}
    for name in runs:
        with open(logs / f"{name}.log", "w") as log:
            cmd = [sys.executable, __file__, "--shapes", "--only", name,
                   *(["--dry"] if args.dry else []), *(["--rss"] if args.rss else []),
                   *args.overrides]
            children[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    failed = 0
    while children:
        for name, proc in list(children.items()):
            if proc.poll() is None:
                continue
            del children[name]
            print((logs / f"{name}.log").read_text(errors="replace"), end="", flush=True)
            if proc.returncode:
                failed += 1
                print(f"# {name}: FAILED (exit {proc.returncode})", flush=True)
        time.sleep(0.5)
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
