"""Fixtures shared by the tests: one run cache for the session, and one real sqlite MLflow
store per test module for the tracking tests."""

from __future__ import annotations

import os

import pytest
from mlflow import MlflowClient

from rlexp.tracking import prepare_store


@pytest.fixture(scope="module")
def uri(tmp_path_factory) -> str:
    uri = f"sqlite:///{tmp_path_factory.mktemp('store') / 'mlflow.db'}"
    prepare_store(uri)
    return uri


@pytest.fixture(scope="module")
def client(uri) -> MlflowClient:
    return MlflowClient(uri)


@pytest.fixture(scope="session", autouse=True)
def shared_run_cache(tmp_path_factory):
    """$RLEXP_CACHE_DIR (the default run.cache_dir) for every run the session starts: the
    tiny model's programs compile once into its JAX cache instead of once per test dir, as
    a user's runs share outputs/cache. Tests about the cache pass run.cache_dir themselves."""
    path = tmp_path_factory.mktemp("run-cache")
    before = os.environ.get("RLEXP_CACHE_DIR")
    os.environ["RLEXP_CACHE_DIR"] = str(path)
    yield path
    if before is None:
        os.environ.pop("RLEXP_CACHE_DIR", None)
    else:
        os.environ["RLEXP_CACHE_DIR"] = before
