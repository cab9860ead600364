"""rollout=vllm: the mapping onto Tunix's RolloutConfig and the one-line errors (no vLLM needed)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from rlexp.config.schema import Config
from rlexp.engine import vllm_rollout
from rlexp.base.errors import UserError
from rlexp.planning.memory import GIB, memory_plan


@pytest.fixture()
def vllm_config(compose_config):
    """vllm_config(*overrides) -> the Config of rollout=vllm with the overrides."""

    def compose_vllm(*overrides: str) -> Config:
        return compose_config("rollout=vllm", *overrides)

    return compose_vllm


def _pretend_installed(monkeypatch, *names: str) -> None:
    real = vllm_rollout.importlib.util.find_spec
    monkeypatch.setattr(vllm_rollout.importlib.util, "find_spec",
                        lambda n: SimpleNamespace(name=n) if n in names else real(n))


def test_mapping_uses_tunix_field_names_and_config_values(vllm_config):
    from tunix.rl.rollout import base_rollout

    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt/qwen3", "hardware=v6e-8",
                      "rollout.tensor_parallel_size=4", "rollout.data_parallel_size=2",
                      "rollout.hbm_utilization=0.3", "rollout.max_completion_length=128",
                      "rollout.kv_cache_size=512")
    got = vllm_rollout.vllm_rollout_config(cfg)
    fields = {f.name for f in dataclasses.fields(base_rollout.RolloutConfig)}
    assert set(got) <= fields, set(got) - fields
    assert got["tensor_parallel_size"] == 4
    assert got["data_parallel_size"] == 2
    assert got["rollout_vllm_hbm_utilization"] == 0.3
    assert got["rollout_vllm_model_version"] == "/ckpt/qwen3"
    assert got["max_tokens_to_generate"] == 128
    assert got["kv_cache_size"] == 512  # becomes vLLM's max_model_len
    assert got["rollout_vllm_tpu_backend_type"] == "jax"
    assert got["top_p"] == 1.0  # None in the config = no nucleus cut
    assert vllm_rollout.vllm_rollout_config(cfg, temperature=0.0)["temperature"] == 0.0


def test_gpu_has_no_tpu_backend(vllm_config):
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu")
    assert vllm_rollout.vllm_rollout_config(cfg)["rollout_vllm_tpu_backend_type"] is None


def test_missing_vllm_is_one_line(monkeypatch, vllm_config):
    monkeypatch.setattr(vllm_rollout.importlib.util, "find_spec", lambda name: None)
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu")
    with pytest.raises(UserError) as err:
        vllm_rollout.make_rollout_config(cfg)
    assert str(err.value) == ("rollout=vllm needs vllm, which is not installed (pip install "
                              "'rlexp[vllm]' on a GPU/TPU host); rollout=vanilla runs the same "
                              "recipe with Tunix's sampler")


def test_missing_tpu_inference_on_tpu(monkeypatch, vllm_config):
    monkeypatch.setattr(vllm_rollout.importlib.util, "find_spec",
                        lambda n: SimpleNamespace(name=n) if n == "vllm" else None)
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=v6e-8",
                      "rollout.tensor_parallel_size=8")
    with pytest.raises(UserError, match=r"^rollout=vllm on TPU needs tpu-inference"):
        vllm_rollout.check_vllm_available(cfg)


def test_installed_vllm_gives_a_tunix_rollout_config(monkeypatch, vllm_config):
    _pretend_installed(monkeypatch, "vllm")
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu")
    rc = vllm_rollout.make_rollout_config(cfg)
    assert type(rc).__name__ == "RolloutConfig"
    assert rc.rollout_vllm_model_version == "/ckpt"
    assert rc.rollout_vllm_hbm_utilization == cfg.rollout.hbm_utilization


def test_parallelism_must_tile_the_rollout_mesh(vllm_config):
    cfg = vllm_config("model=qwen3-0.6b", "model.path=/ckpt", "hardware=v6e-8",
                      "rollout.tensor_parallel_size=2", "rollout.data_parallel_size=2")
    with pytest.raises(UserError, match=r"tensor_parallel_size=2 x rollout.data_parallel_size=2 "
                                        r"must equal the 8 devices of hardware.rollout_mesh"):
        vllm_rollout.vllm_rollout_config(cfg)


def test_tensor_parallelism_must_split_the_heads(vllm_config):
    cfg = vllm_config("model=smollm2-135m", "model.path=/ckpt", "hardware=v5p-8",
                      "rollout.tensor_parallel_size=4")
    with pytest.raises(UserError, match=r"tensor_parallel_size=4 does not divide model.num_heads=9"):
        vllm_rollout.vllm_rollout_config(cfg)


def test_needs_a_checkpoint_path(vllm_config):
    with pytest.raises(UserError, match=r"^rollout=vllm needs model.path .* model=tiny has none"):
        vllm_rollout.vllm_rollout_config(vllm_config("model=tiny"))


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
