"""Pathways single-controller (hardware.runtime=pathways, the v5p-64 profile).

Pure: the proxy environment, the device check taking the proxy's TPU devices. Real process:
`python -m rlexp hardware=v5p-64` started with a sitecustomize that records, from inside the
process, the environment at the moment JAX is first imported and every call of JAX's
distributed initialization; the run then reaches the real pathwaysutils.initialize() and
the real IFRT proxy client, which finds no proxy on this machine and ends in one line.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap

import pytest

from conftest import require
from helpers import cli, one_line_exit_2
from rlexp.planning import hardware, pathways
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

PROXY_VARS = ("JAX_PLATFORMS", "JAX_BACKEND_TARGET", "ENABLE_PATHWAYS_PERSISTENCE")


@pytest.fixture()
def profile(compose_config):
    return lambda name, *o: compose_config(f"hardware={name}", *o).hardware


def test_v5p64_runs_under_pathways_and_sets_the_proxy_environment(profile):
    hw = profile("v5p-64")
    assert hw.runtime == "pathways" and pathways.uses_pathways(hw)
    assert hardware.platform_env(hw, {}) == {
        "JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": "grpc://127.0.0.1:29000",
        "ENABLE_PATHWAYS_PERSISTENCE": "1"}
    # What the workload or the user set wins (a proxy elsewhere, persistence off).
    assert hardware.platform_env(hw, {"JAX_BACKEND_TARGET": "grpc://10.0.0.2:29000",
                                      "ENABLE_PATHWAYS_PERSISTENCE": "0"}) == \
        {"JAX_PLATFORMS": "proxy"}
    assert pathways.command_prefix() == ("JAX_PLATFORMS=proxy JAX_BACKEND_TARGET="
                                         "grpc://127.0.0.1:29000 ENABLE_PATHWAYS_PERSISTENCE=1")
    # Emulated, the same meshes run on 32 virtual CPU devices in one plain process.
    emulated = profile("v5p-64", "hardware.emulate=true")
    assert not pathways.uses_pathways(emulated)
    assert hardware.platform_env(emulated, {})["JAX_PLATFORMS"] == "cpu"
    assert not pathways.uses_pathways(profile("v6e-8"))


@pytest.mark.parametrize("platform,count,kind,ok", [
    ("tpu", 32, "TPU v5", True), ("proxy", 32, "TPU v5p", True),  # the proxy's TPU devices
    ("tpu", 16, "TPU v5", False), ("cpu", 32, "cpu", False), ("proxy", 32, "TPU v6 lite", False),
])
def test_the_device_check_takes_the_proxys_tpu_devices(profile, platform, count, kind, ok):
    assert (hardware.device_mismatch(profile("v5p-64"), platform, count, kind) is None) == ok
    # Only under Pathways: a single-host TPU profile still wants platform tpu.
    assert hardware.device_mismatch(profile("v6e-8"), "proxy", 8, "TPU v6 lite") is not None


# Loaded at start-up through PYTHONPATH: records, from inside `python -m rlexp`, the
# environment when `jax` is first imported and any start of jax.distributed (every path to it
# goes through jax._src.distributed.State.initialize).
RECORDER = textwrap.dedent('''
    import importlib.abc, json, os, sys

    LOG = os.environ["PW_RECORD"]

    def record(event, **data):
        with open(LOG, "a") as f:
            f.write(json.dumps({"event": event, **data}) + "\\n")

    class _Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "jax":
                record("import jax", env={k: os.environ.get(k) for k in
                       ("JAX_PLATFORMS", "JAX_BACKEND_TARGET", "ENABLE_PATHWAYS_PERSISTENCE")})
            if name == "jax._src.distributed":
                from importlib.machinery import PathFinder
                spec = PathFinder.find_spec(name, path)
                run = spec.loader.exec_module
                def exec_module(module):
                    run(module)
                    original = module.State.initialize
                    def initialize(self, *a, **k):
                        record("jax.distributed.initialize")
                        return original(self, *a, **k)
                    module.State.initialize = initialize
                spec.loader.exec_module = exec_module
                return spec
            return None

    sys.meta_path.insert(0, _Watch())
''')


def _records(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _recorded_run(tmp_path, *args, env=None):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORDER)
    log = tmp_path / "record.jsonl"
    import os

    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    proc = cli("hardware=v5p-64", "tracker=none", "train.steps=1", *args, cwd=tmp_path,
               timeout=300, env={"PYTHONPATH": path, "PW_RECORD": str(log),
                                 **{k: "" for k in PROXY_VARS}, **(env or {})})
    return proc, _records(log)


def test_the_recorder_sees_jax_and_a_jax_distributed_start(tmp_path):
    """The positive control of the next test: the same sitecustomize, a process that does
    import JAX and start jax.distributed (one process, its own coordinator)."""
    import os

    from rlexp.tracking.ui import free_port

    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(RECORDER)
    log = tmp_path / "record.jsonl"
    code = (f"import jax; jax.distributed.initialize('127.0.0.1:{free_port()}', 1, 0); "
            "jax.distributed.shutdown()")
    path = os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])
    env = {**environment(), "PYTHONPATH": path, "PW_RECORD": str(log), "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    events = [r["event"] for r in _records(log)]
    assert events[0] == "import jax" and "jax.distributed.initialize" in events, events


def test_the_proxy_environment_is_set_before_jax_and_jax_distributed_is_never_called(tmp_path):
    require(importlib.util.find_spec("pathwaysutils") is not None,
            "pathwaysutils is not installed (pip install 'rlexp[pathways]')",
            "bash scripts/setup --test")
    proc, records = _recorded_run(tmp_path, env={"PATHWAYS_PROXY_CONNECTION_TIMEOUT_SECS": "5"})
    # No proxy listens here: the real IFRT proxy client, registered as JAX's "proxy" backend
    # by pathwaysutils.initialize(), fails to connect, and that is one line naming it.
    one_line_exit_2(proc, "hardware.runtime=pathways", "grpc://127.0.0.1:29000",
                    "ifrt_proxy")
    imports = [r for r in records if r["event"] == "import jax"]
    assert imports, records  # the engine imported JAX...
    assert imports[0]["env"] == {"JAX_PLATFORMS": "proxy",  # ...with the proxy already set
                                 "JAX_BACKEND_TARGET": "grpc://127.0.0.1:29000",
                                 "ENABLE_PATHWAYS_PERSISTENCE": "1"}
    # 8 hosts, and still no jax.distributed: the one controller joins no one.
    assert not [r for r in records if r["event"] == "jax.distributed.initialize"], records


def test_a_head_without_pathwaysutils_is_one_line_naming_the_extra(tmp_path):
    # sitecustomize hides the package (sys.modules[name] = None makes `import` fail).
    site = tmp_path / "hide"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import sys\nsys.modules['pathwaysutils'] = None\n")
    import os

    proc = cli("hardware=v5p-64", "tracker=none", "train.steps=1", cwd=tmp_path, timeout=300,
               env={"PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
                    **{k: "" for k in PROXY_VARS}})
    one_line_exit_2(proc, "hardware.runtime=pathways needs pathwaysutils",
                    "pip install 'rlexp[pathways]'")
