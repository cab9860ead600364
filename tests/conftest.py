"""Fixtures shared by the tests: one run cache for the session, one real sqlite MLflow store
per test module for the tracking tests, rlexp's Hydra config composed and typed
(`compose_config`, `hydra_conf`), and `require`, the check of a prerequisite that the setup
installs (`from conftest import require`)."""

from __future__ import annotations

import os

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from mlflow import MlflowClient

from file_durations import load as load_file_durations
from rlexp.config.paths import conf_dir
from rlexp.tracking import prepare_store


def require(ok: bool, what: str, setup_step: str) -> None:
    """A prerequisite the setup provides: when it is missing (`ok` false) the test FAILS under
    CI=true, where the setup must have run, and is skipped elsewhere; either way one line
    says what is missing and the step that provides it. Works at module level too.

        require(shutil.which("chromium") is not None, "chromium is not installed",
                "bash scripts/setup --test")
    """
    if ok:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what}: run `{setup_step}` (required with CI=true)", pytrace=False)
    pytest.skip(f"{what} (`{setup_step}` provides it)", allow_module_level=True)


def pytest_collection_modifyitems(items):
    """Slowest files first (seconds measured in tests/file_durations.json; a file not in it
    first of all, as it may be slow): with `--no-loadscope-reorder` (pyproject addopts) xdist's
    loadfile hands files out in this order, so the two workers finish together."""
    seconds = load_file_durations()
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::")[0], float("inf")))


@pytest.fixture()
def compose_config():
    """compose_config(*overrides) -> rlexp's Config: conf/config.yaml composed by Hydra with
    the overrides, then typed and validated by rlexp's own conversion (as a run's job gets it)."""
    from rlexp.config.convert import to_config

    def compose_typed(*overrides: str):
        GlobalHydra.instance().clear()
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return to_config(compose("config", overrides=list(overrides)))

    yield compose_typed
    GlobalHydra.instance().clear()


@pytest.fixture()
def hydra_conf(request):
    """Hydra initialized on rlexp's conf/ for the test: hydra.compose("config", ...) inside it,
    with return_hydra_config=True for the hydra node (launcher, sweeper)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(str(conf_dir()), version_base="1.3",
                               job_name=request.module.__name__):
        yield
    GlobalHydra.instance().clear()


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    prepare_store(uri)
    return uri


@pytest.fixture(scope="module")
def client(uri) -> MlflowClient:
    return MlflowClient(uri)


@pytest.fixture(scope="session", autouse=True)
def shared_run_cache(tmp_path_factory, worker_id):
    """$RLEXP_CACHE_DIR (the default run.cache_dir) for every run the session starts: the
    tiny model's programs compile once into its JAX cache instead of once per test dir, as
    a user's runs share outputs/cache. The xdist workers of one pytest run share it (their
    temp dirs' parent), as a sweep's concurrent jobs share one cache: a program or warm start
    one worker made, the other loads. Tests about the cache pass run.cache_dir themselves."""
    base = tmp_path_factory.getbasetemp()
    path = (base if worker_id == "master" else base.parent) / "run-cache"
    path.mkdir(exist_ok=True)
    before = os.environ.get("RLEXP_CACHE_DIR")
    os.environ["RLEXP_CACHE_DIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("RLEXP_CACHE_DIR", None)
    else:
        os.environ["RLEXP_CACHE_DIR"] = before


@pytest.fixture(scope="session")
def smollm2_dir(shared_run_cache):
    """SmolLM2-135M converted once for the whole session, in the shared run cache, where a
    `model=smollm2-135m` run converts it too: each conversion is 7.6 s of a busy CPU."""
    from helpers import require_smollm2
    from rlexp.inputs.smollm2 import ensure_converted

    require_smollm2()
    return ensure_converted(shared_run_cache)
