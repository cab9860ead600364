"""Hardware profiles: facts, platform set-up, device checks and the meshes of every profile."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest

from rlexp.planning import hardware
from rlexp.config.schema import HardwareConfig
from rlexp.base.errors import UserError
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

PROFILES = ("cpu", "v5p-8", "v6e-8", "v5p-64", "gpu")


@pytest.fixture()
def profile(compose_config):
    """profile(name, *overrides) -> the composed HardwareConfig of hardware=<name>."""

    def compose_profile(name: str, *overrides: str) -> HardwareConfig:
        return compose_config(f"hardware={name}", *overrides).hardware

    return compose_profile


# ------------------------------------------------------------------------------- profiles


@pytest.mark.parametrize("name,chips,devices,hosts,hbm,tflops", [
    # No datasheet bf16 peak for a CPU: no perf/mfu (planning/perf.py).
    ("cpu", 1, 1, 1, 24.0, None),
    # Google Cloud TPU docs: v5p 95 GB HBM2e and 459 bf16 TFLOP/s per chip, v5p-8 = 4 chips.
    ("v5p-8", 4, 4, 1, 95.0, 459.0),
    # Google Cloud TPU docs: v6e 32 GB HBM and 918 bf16 TFLOP/s per chip, 8 chips per host.
    ("v6e-8", 8, 8, 1, 32.0, 918.0),
    # 2x4x4 topology: 32 chips on 8 hosts.
    ("v5p-64", 32, 32, 8, 95.0, 459.0),
    # NVIDIA H100 SXM datasheet: 80 GB, 989 dense bf16 TFLOP/s.
    ("gpu", 1, 1, 1, 80.0, 989.0),
])
def test_profile_facts(name, chips, devices, hosts, hbm, tflops, profile):
    hw = profile(name)
    assert (hw.chips, hw.devices, hw.hosts) == (chips, devices, hosts)
    assert hw.hbm_gib_per_device == pytest.approx(hbm)
    assert hw.peak_bf16_tflops == (None if tflops is None else pytest.approx(tflops))


def test_gpu_type_picks_the_figures(profile):
    h200 = profile("gpu", "hardware.gpu_type=h200")
    assert (h200.hbm_gib_per_device, h200.peak_bf16_tflops) == (141.0, 989.0)
    assert h200.accelerator_type == "nvidia-h200-141gb"
    assert hardware.device_mismatch(h200, "gpu", 1, "NVIDIA H200") is None
    assert hardware.device_mismatch(h200, "gpu", 1, "NVIDIA H100 80GB HBM3") is not None


def test_unknown_gpu_type_is_one_line_naming_the_choices(profile):
    with pytest.raises(UserError, match=r"hardware.gpu_type='b200'.*h100, h200"):
        profile("gpu", "hardware.gpu_type=b200")


def test_v5p_64_splits_trainer_and_sampler_in_halves(profile):
    hw = profile("v5p-64")
    ranges = hardware.role_device_ranges(hw)
    assert (ranges.trainer, ranges.rollout) == ((0, 16), (16, 32))
    assert not ranges.colocated


def test_single_host_profiles_are_colocated_on_one_shared_mesh(profile):
    for name in ("cpu", "v5p-8", "v6e-8", "gpu"):
        hw = profile(name)
        assert hardware.role_device_ranges(hw).colocated
        assert hw.trainer_mesh == hw.rollout_mesh


# ------------------------------------------------------------------------------ platform


def test_platform_env_cpu_pins_the_platform_only(profile):
    assert hardware.platform_env(profile("cpu"), {}) == {"JAX_PLATFORMS": "cpu"}


def test_platform_env_emulation_sets_the_device_count_and_keeps_other_flags(profile):
    hw = profile("v5p-64", "hardware.emulate=true")
    env = {"XLA_FLAGS": "--xla_cpu_foo=1 --xla_force_host_platform_device_count=2"}
    got = hardware.platform_env(hw, env)
    assert got["JAX_PLATFORMS"] == "cpu"
    assert got["XLA_FLAGS"].split() == ["--xla_cpu_foo=1",
                                        "--xla_force_host_platform_device_count=32"]


def test_platform_env_leaves_tpus_alone_and_lets_jax_use_95_percent_of_a_gpu(profile):
    assert hardware.platform_env(profile("v6e-8"), {"XLA_FLAGS": "--x=1"}) == {}
    assert hardware.platform_env(profile("gpu"), {}) == {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.95"}
    # A user's own setting wins.
    assert hardware.platform_env(profile("gpu"), {"XLA_PYTHON_CLIENT_MEM_FRACTION": ".5"}) == {}
    assert hardware.usable_hbm_fraction(profile("gpu")) == 0.95
    assert hardware.usable_hbm_fraction(profile("v5p-8")) == 1.0
    # rollout=vllm: vLLM needs its gpu_memory_utilization free when it starts, after JAX.
    assert hardware.platform_env(profile("gpu"), {}, vllm_share=0.4) == \
        {"XLA_PYTHON_CLIENT_MEM_FRACTION": "0.55"}


def test_init_distributed_joins_nothing_for_one_process(monkeypatch, profile):
    """The real jax.distributed (no stand-in): one-process runtimes are process 0 of 1 and
    never join; a multi-controller profile started as one plain process is refused before it
    tries. Two real processes joining: tests/test_multihost.py."""
    import jax

    from rlexp.base import runtime

    for name in ("JAX_COORDINATOR_ADDRESS", "OMPI_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS",
                 "TPU_WORKER_HOSTNAMES"):
        monkeypatch.delenv(name, raising=False)
    hardware.init_distributed(profile("v5p-64", "hardware.emulate=true"))
    hardware.init_distributed(profile("v6e-8"))
    assert not jax.distributed.is_initialized()
    assert (runtime.process_index(), runtime.process_count()) == (0, 1)
    with pytest.raises(UserError, match=r"one plain process: start it with `mpirun -n 2"):
        hardware.init_distributed(profile("v6e-8", "hardware.hosts=2",
                                          "hardware.runtime=multi_controller"))
    assert not jax.distributed.is_initialized()


# ------------------------------------------------------------------------------- devices


def _devices(n: int, platform: str = "cpu", kind: str = "cpu"):
    return [SimpleNamespace(platform=platform, device_kind=kind, id=i) for i in range(n)]


def test_tpu_profile_on_this_cpu_machine_is_one_line_with_the_fix(profile):
    with pytest.raises(UserError) as err:
        hardware.check_devices(profile("v6e-8"), _devices(1))
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith("hardware=v6e-8 expects 8 tpu device(s)")
    assert "JAX sees 1 cpu device(s)" in msg
    assert "hardware.emulate=true" in msg


def test_real_jax_devices_do_not_match_a_tpu_profile(profile):
    # The pytest process has CPU devices only: the real check must refuse a TPU profile.
    with pytest.raises(UserError, match=r"expects 4 tpu device\(s\).*JAX sees \d+ cpu"):
        hardware.check_devices(profile("v5p-8"))


def test_emulation_needs_the_virtual_device_count(profile):
    hw = profile("v5p-8", "hardware.emulate=true")
    hardware.check_devices(hw, _devices(4))
    with pytest.raises(UserError, match=r"\(emulated\) expects 4 cpu device\(s\).*sees 1 cpu"):
        hardware.check_devices(hw, _devices(1))


@pytest.mark.parametrize("kind,ok", [("TPU v5", True), ("TPU v5p", True), ("TPU v5 lite", False)])
def test_device_kind_of_v5p(kind, ok, profile):
    assert (hardware.device_mismatch(profile("v5p-8"), "tpu", 4, kind) is None) == ok


def test_device_kind_of_v6e(profile):
    hw = profile("v6e-8")
    assert hardware.device_mismatch(hw, "tpu", 8, "TPU v6 lite") is None
    assert "of kind" in hardware.device_mismatch(hw, "tpu", 8, "TPU v5 lite")


# -------------------------------------------------------------------------------- meshes

_MESH_SCRIPT = textwrap.dedent("""
    import json, sys
    from rlexp.config.schema import HardwareConfig, MeshConfig
    from rlexp.planning import hardware

    def profile(d):
        meshes = {k: MeshConfig(**d.pop(k)) for k in ("trainer_mesh", "rollout_mesh")}
        return HardwareConfig(**d, **meshes)

    profiles = {k: profile(v) for k, v in json.loads(sys.argv[1]).items()}
    # The largest profile sets the virtual device count, through the real set-up path.
    hardware.setup_platform(profiles["v5p-64"])
    import jax
    out = {"device_count": jax.device_count()}
    for name, hw in profiles.items():
        meshes = hardware.role_meshes(hw, jax.devices()[:hw.devices])
        out[name] = {role: {"shape": dict(m.shape), "axes": list(m.axis_names),
                            "ids": sorted(int(d.id) for d in m.devices.flat)}
                     for role, m in meshes.items()}
        out[name]["same_object"] = meshes["trainer"] is meshes["rollout"]
    # No devices argument: all 32 virtual devices must match the emulated v5p-64 exactly.
    rollout = hardware.role_meshes(profiles["v5p-64"])["rollout"]
    out["v5p-64-default"] = sorted(int(d.id) for d in rollout.devices.flat)
    print(json.dumps(out))
""")


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in environment().items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}


def test_every_profile_builds_its_meshes_under_emulation(profile):
    """One subprocess (the device count is fixed when JAX starts) with 32 virtual devices."""
    import dataclasses

    payload = json.dumps({n: dataclasses.asdict(profile(n, "hardware.emulate=true"))
                          for n in PROFILES})
    proc = subprocess.run([sys.executable, "-c", _MESH_SCRIPT, payload], capture_output=True,
                          text=True, timeout=300, env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["device_count"] == 32
    for name in PROFILES:
        hw = profile(name)
        got = out[name]
        for role, mesh in (("trainer", hw.trainer_mesh), ("rollout", hw.rollout_mesh)):
            assert got[role]["shape"] == {"fsdp": mesh.fsdp, "tp": mesh.tp}, (name, role)
            assert got[role]["axes"] == ["fsdp", "tp"]
        if name == "v5p-64":
            assert got["trainer"]["ids"] == list(range(16))
            assert got["rollout"]["ids"] == list(range(16, 32))
            assert not got["same_object"]
        else:
            assert got["trainer"]["ids"] == list(range(hw.devices))
            assert got["same_object"]  # colocated, one mesh: Tunix shares the weights
    assert out["v5p-64-default"] == list(range(16, 32))


_IMPORTED_FIRST = textwrap.dedent("""
    import json, sys
    import jax  # imported before setup_platform, as in a worker forked from a fork server
    from rlexp.config.schema import HardwareConfig, MeshConfig
    from rlexp.planning import hardware

    d = json.loads(sys.argv[1])
    meshes = {k: MeshConfig(**d.pop(k)) for k in ("trainer_mesh", "rollout_mesh")}
    hardware.setup_platform(HardwareConfig(**d, **meshes))
    print(json.dumps({"platforms": jax.config.jax_platforms, "count": jax.device_count(),
                      "platform": jax.devices()[0].platform}))
""")


def test_setup_platform_reaches_a_jax_imported_before_it(profile):
    """JAX reads JAX_PLATFORMS when it is imported: setup_platform sets JAX's config too."""
    import dataclasses

    hw = profile("v5p-8", "hardware.emulate=true")
    proc = subprocess.run([sys.executable, "-c", _IMPORTED_FIRST,
                           json.dumps(dataclasses.asdict(hw))], capture_output=True, text=True,
                          timeout=300, env=_clean_env())
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"platforms": "cpu", "count": hw.devices, "platform": "cpu"}


def test_cpu_profile_meshes_in_process(profile):
    import jax

    meshes = hardware.role_meshes(profile("cpu"), jax.devices()[:1])
    assert meshes["trainer"] is meshes["rollout"]
    assert dict(meshes["trainer"].shape) == {"fsdp": 1, "tp": 1}
