"""Fixtures shared by the tracking tests: one real sqlite MLflow store per test module."""

from __future__ import annotations

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
