"""Data-parallel sampler replicas (rollout.replicas), the per-device sampler batch
(rollout.per_device_batch_size) and the weight-sync interval bound (rollout.sync_every):
MaxText's inference_replicas x inference_devices_per_replica, its inference per_device_batch_size
and inference_rollouts. The plan counts a whole copy of the weights per replica (tensor-parallel
over the replica's chips) and each replica's share of the KV cache; the mesh builder splits the
rollout devices into the replicas (checked on virtual CPU devices)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import cli, one_line_exit_2
from rlexp.base.errors import UserError
from rlexp.planning.memory import memory_plan, param_count, rollout_micro_prompts
from rlexp.planning.plan import make_plan
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

ROOT = Path(__file__).resolve().parents[1]
V5P_256 = "experiment=maxtext_llama3.3-70b_grpo_v5p-256"
DEMO_70B = "experiment=maxtext_grpo_demo_llama3.1-70b_pathways"
GIB = 1024**3


def test_each_sampler_replica_holds_a_whole_copy_tensor_parallel_over_its_chips(compose_config):
    """v5p-256: 64 sampler chips as 8 replicas x tp 8. Each chip holds 1/8 of the 70B bf16
    weights (16.4 GiB), not 1/64 of one copy over every chip (2.05 GiB)."""
    cfg = compose_config(V5P_256)
    assert (cfg.rollout.replicas, cfg.hardware.rollout_mesh.fsdp, cfg.hardware.rollout_mesh.tp) \
        == (8, 8, 8)
    n = param_count(cfg.model)
    rollout = memory_plan(cfg).rollout
    assert rollout["rollout weights"] == pytest.approx(n * 2 / 8)
    assert rollout["rollout weights"] / GIB == pytest.approx(16.43, abs=0.01)
    one_copy = memory_plan(compose_config(V5P_256, "rollout.replicas=1")).rollout
    assert one_copy["rollout weights"] / GIB == pytest.approx(2.05, abs=0.01)


def test_each_replica_holds_the_kv_cache_of_its_share_of_the_rows(compose_config):
    """A call of 64 prompts x 2 completions over 8 replicas: 16 rows each, 512 tokens of
    80 layers x (k, v) x 8 KV heads x 128 x bf16 per row."""
    cfg = compose_config(V5P_256)
    assert rollout_micro_prompts(cfg) == 64
    per_row = 512 * 80 * 2 * 8 * 128 * 2
    assert memory_plan(cfg).rollout["kv cache"] == pytest.approx(16 * per_row)
    two = memory_plan(compose_config(V5P_256, "rollout.replicas=2")).rollout
    assert two["kv cache"] == pytest.approx(64 * per_row)
    assert two["rollout weights"] == pytest.approx(param_count(cfg.model) * 2 / 32)


def test_the_plan_names_the_replicas_and_the_sampler_batch(compose_config):
    plan = make_plan(compose_config(V5P_256))
    assert plan.fits, plan.why
    text = "\n".join(plan.lines)
    assert ("rollout devices 64-127 (fsdp=8, tp=8) as 8 sampler replicas (fsdp=1, tp=8, a whole "
            "copy of the weights each)") in text
    assert ("micro batch 64 prompts (8 per device x 64 devices = 512, capped at the "
            "mini-batch), 8 prompts per replica, weights synced every 5 steps") in text


def test_per_device_batch_size_sizes_the_sampler_call(compose_config):
    # 2 prompts x 16 sampler chips = 32 a call: capped at a 16-prompt step, whole at 64.
    assert rollout_micro_prompts(compose_config(DEMO_70B)) == 16
    assert rollout_micro_prompts(compose_config(DEMO_70B, "train.batch_size=64")) == 32
    assert rollout_micro_prompts(compose_config(DEMO_70B, "rollout.per_device_batch_size=null",
                                                "rollout.micro_batch_size=8")) == 8


def test_the_seed_002_70b_demo_fits_with_one_or_four_replicas(compose_config):
    plan = make_plan(compose_config(DEMO_70B))
    assert plan.fits, plan.why
    n = param_count(compose_config(DEMO_70B).model)
    assert plan.memory["rollout weights"] == pytest.approx(n * 2 / 16)
    four = make_plan(compose_config(DEMO_70B, "rollout.replicas=4"))
    assert four.fits, four.why
    assert four.memory["rollout weights"] == pytest.approx(n * 2 / 4)


@pytest.mark.parametrize("overrides,message", [
    (("rollout.replicas=3",),
     "rollout.replicas=3 is invalid: must divide hardware.rollout_mesh.fsdp=8 (each replica "
     "takes fsdp/replicas x tp=8 of the 64 rollout devices): one of 1, 2, 4, 8"),
    (("rollout.sync_every=21",),
     "rollout.sync_every=21 is invalid: must be in [1, train.steps=20]: the sampler would "
     "never get trained weights"),
    (("rollout.micro_batch_size=64",),
     "rollout.per_device_batch_size=8 is invalid: sizes the sampler call as "
     "rollout.micro_batch_size=64 does: set one of them (the other null)"),
    (("rollout.per_device_batch_size=0",),
     "rollout.per_device_batch_size=0 is invalid: must be in [1, 65536]"),
    (("train.batch_size=256", "rollout.per_device_batch_size=3"),
     "rollout.per_device_batch_size=3 is invalid: x 64 rollout devices = 192 prompts a sampler "
     "call, which must divide or be a multiple of both the train micro batch (256) and the "
     "mini-batch (256)"),
    (("rollout=vllm", "rollout.tensor_parallel_size=8", "rollout.data_parallel_size=8"),
     "rollout.replicas=8 is invalid: rollout=vllm runs its replicas as "
     "rollout.data_parallel_size (vLLM's data parallelism): use rollout.replicas=1"),
])
def test_bad_settings_are_refused_naming_the_key_and_valid_values(overrides, message,
                                                                  compose_config):
    with pytest.raises(UserError) as err:
        compose_config(V5P_256, *overrides)
    assert str(err.value) == message


def test_a_bad_replica_count_is_one_line_and_exit_2(tmp_path):
    proc = cli(V5P_256, "rollout.replicas=5", "run.dry_run=true", "tracker=none", cwd=tmp_path)
    one_line_exit_2(proc, "rollout.replicas=5 is invalid", "one of 1, 2, 4, 8")


_MESH_SCRIPT = textwrap.dedent("""
    import json
    import numpy as np
    import jax, jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P
    from rlexp.config.schema import HardwareConfig, MeshConfig
    from rlexp.planning.hardware import make_mesh, role_meshes

    devs = jax.devices()
    out = {"count": len(devs)}
    # 8 devices as 2 replicas of fsdp 2 x tp 2; a weight sharded the way Tunix's models name it.
    mesh = make_mesh(MeshConfig(fsdp=4, tp=2), devs, replicas=2)
    out["axes"], out["shape"] = list(mesh.axis_names), list(mesh.devices.shape)
    out["replica_ids"] = [sorted(int(d.id) for d in mesh.devices[r].flat) for r in range(2)]
    w = np.arange(64, dtype=np.float32).reshape(8, 8)
    arr = jax.device_put(w, NamedSharding(mesh, P("fsdp", "tp")))
    out["shard_shapes"] = sorted({tuple(s.data.shape) for s in arr.addressable_shards})
    # Per replica: its devices' shards tile the whole weight exactly once.
    cover = []
    for r in range(2):
        ids = set(out["replica_ids"][r])
        seen = np.zeros((8, 8), dtype=int)
        for s in arr.addressable_shards:
            if s.device.id in ids:
                seen[s.index] += 1
                assert (np.asarray(s.data) == w[s.index]).all()
        cover.append(int(seen.min()) == 1 == int(seen.max()))
    out["cover"] = cover
    # The mesh computes: x @ w with w on the replica mesh equals the plain product.
    x = np.ones((4, 8), dtype=np.float32)
    got = jax.jit(lambda a, b: a @ b)(x, arr)
    out["matmul_ok"] = bool(np.allclose(np.asarray(got), x @ w))
    # role_meshes: split 4 + 4; the rollout half as 2 replicas; colocated + 1 replica shares.
    split = HardwareConfig(devices=8, chips=8, split="split", trainer_fraction=0.5,
                           sampler_fraction=0.5, trainer_mesh=MeshConfig(4, 1),
                           rollout_mesh=MeshConfig(2, 2))
    m = role_meshes(split, replicas=2)
    out["rollout_axes"] = list(m["rollout"].axis_names)
    out["rollout_ids"] = sorted(int(d.id) for d in m["rollout"].devices.flat)
    out["rollout_replica_ids"] = [sorted(int(d.id) for d in m["rollout"].devices[r].flat)
                                  for r in range(2)]
    col = HardwareConfig(devices=8, chips=8, trainer_mesh=MeshConfig(8, 1),
                         rollout_mesh=MeshConfig(8, 1))
    out["shared_one"] = role_meshes(col)["rollout"] is role_meshes(col)["trainer"]
    two = role_meshes(col, replicas=2)
    out["shared_two"] = two["rollout"] is two["trainer"]
    # Why rules.replicas_need_an_accelerator: a trainer-sharded weight copied into the
    # replicas goes through the host, which Tunix's CPU weight sync forbids.
    src = make_mesh(MeshConfig(4, 1), devs[:4])
    w_t = jax.device_put(w, NamedSharding(src, P("fsdp", "tp")))
    dst = NamedSharding(m["rollout"], P("fsdp", "tp"))
    guarded = {}
    for guard in ("disallow_explicit", "allow"):
        try:
            with jax.transfer_guard_host_to_device(guard):
                jax.device_put(w_t, dst).block_until_ready()
            guarded[guard] = "ok"
        except Exception as exc:
            guarded[guard] = "Disallowed host-to-device" in str(exc) and "refused" or repr(exc)
    out["guarded"] = guarded
    print(json.dumps(out))
""")


def test_the_mesh_builder_splits_the_rollout_devices_into_whole_copies():
    """8 virtual CPU devices (the count is fixed when JAX starts: one subprocess)."""
    env = {k: v for k, v in environment().items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env.update(XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-c", _MESH_SCRIPT], capture_output=True, text=True,
                          timeout=300, env=env, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["count"] == 8
    assert (out["axes"], out["shape"]) == (["replica", "fsdp", "tp"], [2, 2, 2])
    assert out["replica_ids"] == [[0, 1, 2, 3], [4, 5, 6, 7]]  # consecutive chips per replica
    assert out["shard_shapes"] == [[4, 4]]  # 1/(fsdp 2 x tp 2) of the weight per device
    assert out["cover"] == [True, True]  # each replica holds the whole weight once
    assert out["matmul_ok"]
    assert out["rollout_axes"] == ["replica", "fsdp", "tp"]
    assert out["rollout_ids"] == [4, 5, 6, 7]
    assert out["rollout_replica_ids"] == [[4, 5], [6, 7]]
    assert out["shared_one"] and not out["shared_two"]
    assert out["guarded"] == {"disallow_explicit": "refused", "allow": "ok"}


def test_replicas_are_refused_on_the_cpu(compose_config):
    emulated = ("hardware.devices=4", "hardware.chips=4", "hardware.emulate=true",
                "hardware.split=split", "hardware.trainer_fraction=0.5",
                "hardware.sampler_fraction=0.5", "hardware.trainer_mesh.fsdp=2",
                "hardware.rollout_mesh.fsdp=2")
    with pytest.raises(UserError, match=r"^rollout.replicas=2 is invalid: needs a TPU or GPU"):
        compose_config(*emulated, "rollout.replicas=2")
    assert compose_config(*emulated).rollout.replicas == 1
