"""model.path sources: local dir, Hugging Face hub id (read from a cache this test lays out,
offline), and fsspec URLs (a memory filesystem standing in for gs://, same copy code)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from rlexp.inputs import model_files, sources
from rlexp.config.schema import ModelConfig
from rlexp.base.errors import UserError
from helpers import cli, said

REPO = Path(__file__).resolve().parents[1]
SHA = "0123456789abcdef0123456789abcdef01234567"
# Qwen/Qwen3-0.6B's config.json, the keys rlexp checks (conf/model/qwen3-0.6b.yaml agrees).
QWEN3_06B = {"model_type": "qwen3", "num_hidden_layers": 28, "hidden_size": 1024,
             "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
             "intermediate_size": 3072, "vocab_size": 151936}


def make_hub_cache(root: Path, repo_id: str, files: dict[str, str], sha: str = SHA,
                   ref: str = "main") -> Path:
    """The layout huggingface_hub reads offline: models--org--name/{refs/<ref>, snapshots/<sha>/}."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    snap = repo / "snapshots" / sha
    snap.mkdir(parents=True)
    for name, text in files.items():
        (snap / name).write_text(text)
    (repo / "refs").mkdir()
    (repo / "refs" / ref).write_text(sha)
    return snap


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


@pytest.mark.parametrize("spec,kind", [
    ("Qwen/Qwen3-0.6B", "hub"), ("Qwen/Qwen3-0.6B@abc123", "hub"), ("gs://b/models/q", "url"),
    ("memory://b/q", "url"), ("/abs/dir", "local"), ("./rel/dir", "local"), ("model", "local"),
    ("file:///abs/dir", "local"), ("a/b/c", "local"),
])
def test_parse_classifies(spec, kind):
    assert sources.parse(spec).kind == kind


def test_existing_local_dir_wins_over_hub_id(tmp_path, monkeypatch):
    (tmp_path / "org" / "name").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert sources.parse("org/name").kind == "local"


def test_hub_id_resolves_from_the_cache_offline(hub_cache):
    snap = make_hub_cache(hub_cache, "org/tiny", {"config.json": "{}", "model.safetensors": "x"})
    assert sources.fetch("org/tiny", "unused") == snap
    assert sources.check("org/tiny", "unused") == snap


def test_hub_revision_reads_its_snapshot(hub_cache):
    other = "f" * 40
    make_hub_cache(hub_cache, "org/tiny", {"config.json": "{}", "model.safetensors": "x"})
    snap = hub_cache / "models--org--tiny" / "snapshots" / other
    snap.mkdir()
    (snap / "config.json").write_text('{"rev": 2}')
    (snap / "model.safetensors").write_text("y")
    assert sources.fetch(f"org/tiny@{other}", "unused") == snap


def test_hub_id_not_cached_offline_is_one_line_naming_the_id(hub_cache):
    with pytest.raises(UserError) as err:
        sources.check("Qwen/Qwen3-0.6B", "unused")
    msg = str(err.value)
    assert "model.path=Qwen/Qwen3-0.6B" in msg and "HF_HUB_OFFLINE=1" in msg and "\n" not in msg


def test_cached_hub_config_must_agree_with_the_yaml(hub_cache):
    bad = dict(QWEN3_06B, num_hidden_layers=12)
    make_hub_cache(hub_cache, "Qwen/Qwen3-0.6B", {"config.json": json.dumps(bad)})
    m = ModelConfig(name="qwen3-0.6b", family="qwen3", path="Qwen/Qwen3-0.6B", num_layers=28)
    with pytest.raises(UserError, match="num_layers=28 but .*num_hidden_layers=12"):
        model_files.check_model(m, "unused")


def _memory_model(url: str, files: dict[str, bytes]) -> None:
    import fsspec

    fs = fsspec.filesystem("memory")
    for name, data in files.items():
        with fs.open(f"{url}/{name}", "wb") as f:
            f.write(data)


def test_url_is_copied_once_into_the_cache(tmp_path):
    """The gs:// path minus gcsfs: same listing, copy, marker and atomic rename."""
    import fsspec

    url = "memory://bucket-e11/models/q"
    _memory_model(url, {"config.json": b"{}", "model.safetensors": b"w" * 10,
                        "README.md": b"not copied", "sub/tokenizer.json": b"{}"})
    cache = tmp_path / "cache"
    assert sources.check(url, str(cache)) is None  # not copied yet, and check copies nothing
    assert not (cache / "models").exists()
    local = sources.fetch(url, str(cache))
    assert local.parent == cache / "models" / "memory"
    assert (local / "model.safetensors").read_bytes() == b"w" * 10
    assert (local / "sub" / "tokenizer.json").is_file() and not (local / "README.md").exists()
    fsspec.filesystem("memory").rm("/bucket-e11", recursive=True)
    assert sources.fetch(url, str(cache)) == local  # second time: the cache, no listing
    assert sources.check(url, str(cache)) == local


def test_url_without_model_files_is_a_user_error(tmp_path):
    _memory_model("memory://bucket-e11/empty", {"notes.md": b"x"})
    with pytest.raises(UserError, match="no config.json"):
        sources.fetch("memory://bucket-e11/empty", str(tmp_path))


def test_gs_without_gcsfs_names_the_extra(tmp_path):
    pytest.importorskip("fsspec")
    try:
        import gcsfs  # noqa: F401
        pytest.skip("gcsfs installed: the missing-backend message cannot show")
    except ImportError:
        pass
    with pytest.raises(UserError, match=r"needs gcsfs \(pip install 'rlexp\[gcs\]'\)"):
        sources.check("gs://bucket/model", str(tmp_path))


def _dry_run(env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return cli("model=qwen3-0.6b", "model.path=Qwen/Qwen3-0.6B", "run.dry_run=true",
               "tracker=none",
               # the memory plan of the cpu profile is not what this test is about
               "train.micro_batch_size=1", cwd=cwd, env=env)


def test_cli_dry_run_hub_id_offline(tmp_path):
    """Acceptance: offline and not cached -> exit 2, one line; cached by the test -> exit 0."""
    cache = tmp_path / "hub"
    cache.mkdir()
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(cache), "HF_HOME": str(tmp_path / "home")}
    missing = _dry_run(env, tmp_path)
    assert missing.returncode == 2, missing.stderr
    lines = said(missing.stderr)
    assert len(lines) == 1 and "Qwen/Qwen3-0.6B" in lines[0], missing.stderr
    assert not (tmp_path / "outputs").exists()

    make_hub_cache(cache, "Qwen/Qwen3-0.6B", {"config.json": json.dumps(QWEN3_06B)})
    cached = _dry_run(env, tmp_path)
    assert cached.returncode == 0, cached.stderr
    assert "dry run" in cached.stdout


# ------------------------------------------------------- outputs on a bucket (run.output_uri)


def test_checkpoint_dir_is_local_or_keeps_the_bucket_scheme(tmp_path):
    from rlexp.inputs import storage

    assert storage.checkpoint_dir(None, tmp_path, "run") == tmp_path / "checkpoints"
    assert storage.checkpoint_dir("file:///mnt/shared/rlexp", tmp_path, "run") == \
        Path("/mnt/shared/rlexp/run/checkpoints")  # a shared mount: orbax writes it as local
    remote = storage.checkpoint_dir("gs://bucket/rlexp/", tmp_path, "grpo-tiny_1a2b3c")
    # what orbax is given, and what a step and a set-aside step are called (no I/O here)
    assert str(remote) == "gs://bucket/rlexp/grpo-tiny_1a2b3c/checkpoints"
    assert str(remote / "3") == "gs://bucket/rlexp/grpo-tiny_1a2b3c/checkpoints/3"
    assert str((remote / "3").with_name("3.unusable-1")).startswith("gs://bucket/")
    from rlexp.base.retention import prune_unusable

    assert prune_unusable(remote) == []  # never turned into a local path


def test_output_uri_is_checked_at_start(tmp_path):
    from rlexp.inputs import storage

    storage.check(None)
    storage.check("gs://b/p")  # pre-flight: the shape only (an xpk launcher needs no gcsfs)
    with pytest.raises(UserError, match="run.output_uri=outputs/x: not a URL"):
        storage.check("outputs/x")
    try:
        import gcsfs  # noqa: F401
    except ImportError:  # where the run runs, the backend must be there
        with pytest.raises(UserError, match=r"run.output_uri=gs://b/p: .*needs gcsfs"):
            storage.check_backend("gs://b/p")


def test_summary_and_export_are_copied_under_the_run_root(tmp_path):
    """Same fsspec calls as gs:// (gcsfs), on fsspec's memory filesystem."""
    import fsspec

    from rlexp.inputs import storage

    run_dir = tmp_path / "run"
    (run_dir / "export").mkdir(parents=True)
    (run_dir / "export" / "config.json").write_text('{"a": 1}')
    (run_dir / "export" / "model.safetensors").write_bytes(b"w" * 64)
    (run_dir / "summary.json").write_text('{"status": "FINISHED"}')
    root = storage.mirror_outputs("memory://bucket-e11-out/exp", "run-x", run_dir)
    assert root == "memory://bucket-e11-out/exp/run-x"
    fs = fsspec.filesystem("memory")
    assert fs.cat(f"{root}/summary.json") == b'{"status": "FINISHED"}'
    assert fs.cat(f"{root}/export/model.safetensors") == b"w" * 64
    assert storage.mirror_outputs(None, "run-x", run_dir) is None
    # a shared mount (file://): parents made as needed
    shared = storage.mirror_outputs(f"file://{tmp_path}/shared", "run-x", run_dir)
    assert (tmp_path / "shared" / "run-x" / "export" / "config.json").read_text() == '{"a": 1}'
    assert shared == f"file://{tmp_path}/shared/run-x"
