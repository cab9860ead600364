"""The Ray launcher (hydra/launcher=rlexp_ray) against a real `ray start --head` on 127.0.0.1.

Fast: how a job's hardware becomes Ray tasks (one per process) and the variables that join
them, TPU slices as Ray's TPU resources (per-host chips, the slice head), the workers'
environment, and the dry run's printed placement (no Ray cluster). Slow: a sweep of a one-process and a two-process (cpu-2host) rlexp job under one MLflow
parent, and a two-process job of a plain Hydra app whose two Ray tasks each join
jax.distributed and reduce one array sharded over both processes' 4 CPU devices with gloo.

Ray is pinned in scripts/setup --test (ray alone installs beside the JAX stack: the launcher
needs no hydra-ray-launcher, whose cloudpickle<3 pin joblib 1.6 refuses).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from conftest import require
from rlexp.tracking.ui import free_port
from sweep_helpers import TWO_HOST, explain, finished_sweep, only_sweep_dir, rlexp

from hydra_plugins.rlexp_ray_launcher.ray_launcher import (Layout, bundles, job_layout,
                                                           process_env, worker_env)
from rlexp.base.runtime import environment  # os.environ copied safely from other threads


# ------------------------------------------------------------------------------------ fast


@pytest.mark.parametrize("hw,want", [
    ({"hosts": 1, "runtime": "single", "platform": "cpu", "cpus_per_task": 2},
     Layout(1, 2.0, 0.0, "PACK")),
    ({"hosts": 2, "runtime": "multi_controller", "platform": "cpu", "cpus_per_task": 1},
     Layout(2, 1.0, 0.0, "PACK")),  # cpu-2host: both processes on one node
    ({"hosts": 2, "runtime": "multi_controller", "platform": "gpu", "cpus_per_task": 8,
      "gpus_per_node": 8}, Layout(2, 8.0, 8.0, "STRICT_SPREAD")),  # one per node
    ({"hosts": 2, "runtime": "multi_controller", "platform": "cpu", "emulate": True,
      "cpus_per_task": 1}, Layout(1, 1.0, 0.0, "PACK")),  # emulated: one process
    ({"hosts": 8, "runtime": "pathways", "platform": "tpu", "cpus_per_task": 8},
     Layout(1, 8.0, 0.0, "STRICT_SPREAD")),  # one controller, no chips
    ({"hosts": 8, "runtime": "multi_controller", "platform": "tpu", "chips": 32,
      "accelerator_type": "v4-64", "cpus_per_task": 8},
     Layout(8, 8.0, 0.0, "STRICT_SPREAD", 4.0, "TPU-v4-64-head")),  # a host's 4 chips each
    ({"hosts": 1, "runtime": "single", "platform": "tpu", "chips": 8,
      "accelerator_type": "v6e-8", "cpus_per_task": 8},
     Layout(1, 8.0, 0.0, "STRICT_SPREAD", 8.0, "TPU-v6e-8-head")),
    ({"hosts": 1, "runtime": "single", "platform": "tpu", "chips": 8, "emulate": True,
      "accelerator_type": "v6e-8", "cpus_per_task": 8},
     Layout(1, 8.0, 0.0, "STRICT_SPREAD")),  # emulated on CPU devices: no TPU asked for
])
def test_a_jobs_processes_and_resources_come_from_its_hardware(hw, want):
    from dataclasses import astuple

    # astuple: Hydra's plugin scan re-executes the module, so the class may be another copy.
    assert astuple(job_layout({}, OmegaConf.create({"hardware": hw}))) == astuple(want)


def test_the_launcher_value_wins_and_each_process_gets_its_index():
    job = OmegaConf.create({"hardware": {"hosts": 1, "cpus_per_task": 4}})
    assert job_layout({"cpus_per_task": 0.5, "gpus_per_task": None}, job).cpus == 0.5
    assert process_env("10.0.0.1:1234", 2, 1) == {
        "JAX_COORDINATOR_ADDRESS": "10.0.0.1:1234", "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "1"}
    assert process_env(None, 1, 0) == {}


def _hardware(name: str):
    from rlexp.config.paths import conf_dir

    return OmegaConf.create({"hardware": OmegaConf.load(conf_dir() / "hardware" / f"{name}.yaml")})


def test_tpu_bundles_are_rays_tpu_resources():
    """v4-64: 8 hosts of 4 chips, the slice reserved through its head; v6e-8: one host
    holding its 8 chips and the head. The names are the ones Ray's TPU support gives a host
    (ray/_private/accelerators/tpu.py: "TPU" = chips, "TPU-<pod type>-head" on worker 0, with
    the pod type it infers from a topology: v4 2x4x4 -> v4-64)."""
    lay = job_layout({}, _hardware("v4-64"))
    assert (lay.processes, lay.tpus, lay.head) == (8, 4.0, "TPU-v4-64-head")
    assert bundles(lay, "my-slice") == [{"CPU": 8.0, "TPU": 4.0, "my-slice": 1}] * 8
    one = job_layout({}, _hardware("v6e-8"))
    assert bundles(one) == [{"CPU": 8.0, "TPU": 8.0, "TPU-v6e-8-head": 1}]
    assert job_layout({"tpus_per_task": 2}, _hardware("v6e-8")).tpus == 2.0
    assert bundles(job_layout({}, _hardware("cpu-2host"))) == [{"CPU": 1.0}] * 2
    if importlib.util.find_spec("ray") is not None:
        from ray._private.accelerators import tpu

        assert f"TPU-{tpu.infer_tpu_pod_type_from_topology('2x4x4', 'TPU-V4')}-head" == lay.head
        assert tpu.get_chips_per_host("2x4x4", "v4") == lay.tpus


def test_workers_get_the_named_variables_and_the_launchers_env():
    environ = {"HF_TOKEN": "hf_x", "HF_HOME": "", "PATH": "/bin", "PYTHONPATH": "src"}
    params = {"env_from_driver": ["HF_TOKEN", "HF_HOME", "PYTHONPATH", "WANDB_API_KEY"],
              "env": {"HF_HOME": "/dev/shm/huggingface", "EASYDEL_AUTO": 1}}
    assert worker_env(params, environ) == {"HF_TOKEN": "hf_x", "PYTHONPATH": "src",
                                           "HF_HOME": "/dev/shm/huggingface",
                                           "EASYDEL_AUTO": "1"}  # unset/empty ones skipped


def test_dry_run_prints_the_tpu_placement_and_starts_nothing(tmp_path):
    """`hydra.launcher.dry_run=true` on v4-64: the slice head, 8 bundles of 4 chips, the
    environment's names (secrets never printed), exit 0; no Ray connection (no RAY_ADDRESS
    cluster exists here), no MLflow store, no sweep dir left."""
    env = {**environment(), "HF_TOKEN": "hf_do_not_print", "RAY_ADDRESS": "127.0.0.1:9"}
    proc = rlexp(["-m", "hydra/launcher=rlexp_ray", "hydra.launcher.dry_run=true",
                  "hardware=v4-64", "train.steps=1",
                  "+hydra.launcher.env={HF_HOME: /dev/shm/huggingface}"], tmp_path, env=env,
                 timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, explain(proc)
    assert "[{'TPU-v4-64-head': 1}]" in out
    hosts = [line for line in out.splitlines() if "'TPU': 4" in line]
    assert len(hosts) == 8 and all("'CPU': 8" in line for line in hosts), out
    assert "JAX_NUM_PROCESSES=8" in out
    assert "HF_HOME=/dev/shm/huggingface" in out and "HF_TOKEN" in out
    assert "hf_do_not_print" not in out
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.*"))


# ------------------------------------------------------------------------------ real Ray


@pytest.fixture(scope="module")
def ray_head(tmp_path_factory):
    """`ray start --head` on loopback with 2 CPUs, in its own session, shared by the module's
    tests (each job's task runs in the launching directory); the whole process group is
    killed at the end."""
    require(importlib.util.find_spec("ray") is not None, "ray is not installed (pip install "
            "'rlexp[ray]')", "bash scripts/setup --test")
    ray_bin = str(Path(sys.executable).parent / "ray")
    port = free_port()
    # Short: Ray's unix socket paths under it must stay below 108 characters.
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = {**environment(), "RAY_USAGE_STATS_ENABLED": "0"}
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=2", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp}"],
        cwd=tmp_path_factory.mktemp("ray-head"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        env=env)
    pgid = head.pid  # its own session: the group id is its pid, and outlives it
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            assert head.poll() is None, head.stdout.read().decode()[-2000:]
            time.sleep(0.5)
        else:
            pytest.fail("ray head did not listen within 120 s")
        yield f"127.0.0.1:{port}"
    finally:
        # gcs_server and raylet outlive a SIGTERM by seconds: TERM, a grace period, KILL.
        for sig, grace in ((signal.SIGTERM, 5), (signal.SIGKILL, 0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            time.sleep(grace)
        head.wait(timeout=30)
        shutil.rmtree(temp, ignore_errors=True)


@pytest.mark.slow
def test_ray_launcher_runs_a_sweep_with_a_two_process_job_under_one_parent(tmp_path, ray_head):
    """hardware=cpu-2host as a sweep: one job of two Ray tasks, one per host, joined by
    jax.distributed (cpu-2host refuses to run as one plain process), one finished child under
    the parent, one summary. A one-process job adds nothing the two-process one does not
    cover (tests/test_launchers.py runs one-process jobs through the other launchers)."""
    t0 = time.perf_counter()
    proc = rlexp(["-m", "hydra/launcher=rlexp_ray", f"hydra.launcher.address={ray_head}",
                  *TWO_HOST], tmp_path)
    assert proc.returncode == 0, explain(proc)
    assert "(2 process(es), 1 CPU, 0 GPU each)" in proc.stdout + proc.stderr
    sweep_dir = only_sweep_dir(tmp_path)
    assert finished_sweep(sweep_dir, lambda r: r.data.params["hardware.name"]) == ["cpu-2host"]
    print(f"ray sweep (2 processes): {time.perf_counter() - t0:.1f} s")


JAX_APP = textwrap.dedent('''
    """One job = the processes Ray started for it; each joins jax.distributed from JAX's own
    variables and reduces an array sharded over every process's 2 CPU devices."""
    import json, os
    from pathlib import Path

    import hydra


    @hydra.main(config_path="conf", config_name="config", version_base="1.3")
    def main(cfg):
        os.environ["JAX_PLATFORMS"] = "cpu"
        os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        import jax
        import jax.numpy as jnp
        import numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(os.environ["JAX_COORDINATOR_ADDRESS"],
                                   int(os.environ["JAX_NUM_PROCESSES"]),
                                   int(os.environ["JAX_PROCESS_ID"]),
                                   initialization_timeout=60)
        mesh = Mesh(np.array(jax.devices()), ("x",))
        values = np.arange(1, 5, dtype=np.float32)  # 1+2+3+4 = 10 over 4 devices
        arr = jax.make_array_from_callback((4,), NamedSharding(mesh, P("x")),
                                           lambda index: values[index])
        total = jax.jit(jnp.sum, out_shardings=NamedSharding(mesh, P()))(arr)
        out = {"index": jax.process_index(), "count": jax.process_count(),
               "devices": jax.device_count(), "local": jax.local_device_count(),
               "total": float(total), "pid": os.getpid()}
        from hydra.core.hydra_config import HydraConfig
        Path(HydraConfig.get().runtime.output_dir,
             f"process-{out['index']}.json").write_text(json.dumps(out))
        jax.distributed.shutdown()
        return out["total"]


    if __name__ == "__main__":
        main()
''')


@pytest.mark.slow
def test_a_two_process_job_is_two_ray_tasks_joined_by_jax_distributed(tmp_path, ray_head):
    (tmp_path / "conf" / "hardware").mkdir(parents=True)
    (tmp_path / "app.py").write_text(JAX_APP)
    (tmp_path / "conf" / "config.yaml").write_text(
        "defaults:\n  - hardware: two\n  - _self_\nhydra:\n  job:\n    chdir: false\n")
    (tmp_path / "conf" / "hardware" / "two.yaml").write_text(
        "name: two\nplatform: cpu\nhosts: 2\nruntime: multi_controller\ncpus_per_task: 1\n"
        "gpus_per_node: 0\ntimeout_min: 5\n")
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, str(tmp_path / "app.py"), "-m", "hardware=two",
                           "hydra/launcher=rlexp_ray", f"hydra.launcher.address={ray_head}",
                           f"hydra.sweep.dir={tmp_path}/sweep"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, explain(proc)
    reports = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/process-*.json")]
    assert sorted(r["index"] for r in reports) == [0, 1], (reports, explain(proc))
    for r in reports:  # each process: 2 of the 4 global devices, the same global sum
        assert (r["count"], r["devices"], r["local"], r["total"]) == (2, 4, 2, 10.0), r
    assert len({r["pid"] for r in reports}) == 2  # two processes (Ray workers)
    print(f"ray two-process job: {time.perf_counter() - t0:.1f} s")
