"""What a researcher sees in MLflow 3.17's UI, checked in headless Chromium against
`python -m rlexp.ui` on 127.0.0.1: the experiment opens in the model-training view, a run's
page shows its source, params, metrics (system metrics too) and dataset input, the eval
samples render as a table, and the four runs of a sweep have names that tell them apart.

The UI is a React app: pages are read with `chromium --headless --dump-dom` after a virtual
time budget (the rendered DOM's text), facts that drive the UI's behaviour from the REST API.
The sweep runs on the scripted engine (tests/fake_engine.py), so no JAX compile is needed.
Chromium comes from Debian through `scripts/setup --test` (~2 min the first time); under
CI=true its absence is a failure.
Screenshots of each page are written to $RLEXP_BROWSER_SHOTS when it is set.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from html import unescape
from pathlib import Path

import pytest

from conftest import require

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
JOBS = [("0", "0.1"), ("0", "0.2"), ("0.04", "0.1"), ("0.04", "0.2")]


def text_of(html: str) -> str:
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


class Browser:
    def __init__(self, root: Path):
        self.root = root
        self.shots = Path(os.environ.get("RLEXP_BROWSER_SHOTS", root / "shots"))
        self.shots.mkdir(parents=True, exist_ok=True)

    def page(self, url: str, name: str) -> str:
        """The text of the page once the app rendered (a fresh profile: no saved UI state)."""
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                f"--user-data-dir={self.root / ('profile-' + name)}",
                "--window-size=1400,1000", "--virtual-time-budget=20000"]
        subprocess.run([*args, f"--screenshot={self.shots / (name + '.png')}", url],
                       capture_output=True, timeout=180)
        out = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True,
                             timeout=180)
        return text_of(out.stdout)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    require(CHROMIUM is not None, "chromium is not installed", "bash scripts/setup --test")
    from fake_engine import sweep_env
    from sweep_helpers import explain, only_sweep_dir, rlexp

    root = tmp_path_factory.mktemp("browser")
    proc = rlexp(["-m", "algo.beta=0,0.04", "algo.epsilon=0.1,0.2", "train.steps=3",
                  "eval.every=1", "run.progress=false", "run.export=false",
                  "tracker.system_metrics_every_s=0.3"], cwd=root, env=sweep_env(root),
                 timeout=600)
    assert proc.returncode == 0, explain(proc)
    sweep = only_sweep_dir(root)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    server = subprocess.Popen([sys.executable, "-m", "rlexp.ui", "--port", "0"], cwd=root,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              text=True)
    try:
        first = server.stdout.readline()
        links = [server.stdout.readline().strip()]  # one experiment with runs: rlexp
        base = re.search(r"http://127\.0\.0\.1:\d+", first).group(0)
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{base}/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, "the MLflow UI did not answer in 120 s"
                time.sleep(1)
        yield {"base": base, "links": links, "sweep": sweep, "browser": Browser(root)}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def api(base: str, path: str, **query) -> dict:
    url = f"{base}/api/2.0/mlflow/{path}?{urllib.parse.urlencode(query)}"
    with urllib.request.urlopen(url, timeout=30) as resp:
        return json.loads(resp.read())


def children(ui) -> list[dict]:
    parent = json.loads((ui["sweep"] / "parent_run.json").read_text())
    body = json.dumps({"experiment_ids": [parent["experiment_id"]], "max_results": 100,
                       "filter": f"tags.`mlflow.parentRunId` = '{parent['run_id']}'"}).encode()
    req = urllib.request.Request(f"{ui['base']}/api/2.0/mlflow/runs/search", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())["runs"]


def test_experiment_opens_in_the_model_training_view(ui):
    exp = api(ui["base"], "experiments/get-by-name", experiment_name="rlexp")["experiment"]
    tags = {t["key"]: t["value"] for t in exp.get("tags", [])}
    assert tags["mlflow.experimentKind"] == "custom_model_development"
    name, url = ui["links"][0].split(": ", 1)
    assert name == "rlexp" and url.endswith(f"/#/experiments/{exp['experiment_id']}"
                                            "?workflowType=machine_learning")
    text = ui["browser"].page(url, "experiment")
    assert "Run Name" in text and "matching runs" in text  # the runs table
    assert "Evaluation runs" not in text and "Observability" not in text  # GenAI's views


def test_run_page_shows_source_params_metrics_system_metrics_and_dataset(ui):
    run = children(ui)[0]
    rid, exp_id = run["info"]["run_id"], run["info"]["experiment_id"]
    url = f"{ui['base']}/#/experiments/{exp_id}/runs/{rid}?workflowType=machine_learning"
    text = ui["browser"].page(url, "run")
    assert "Source python -m rlexp" in text and "Created by" in text
    assert "algo.beta" in text and "eval/accuracy" in text and "train/reward_mean" in text
    assert re.search(r"System metrics \(\d+\) system/cpu_utilization_percentage", text), text
    assert "arithmetic-train" in text  # the dataset input, in "Datasets"


def test_eval_samples_render_as_a_table(ui):
    run = children(ui)[0]
    rid, exp_id = run["info"]["run_id"], run["info"]["experiment_id"]
    url = (f"{ui['base']}/#/experiments/{exp_id}/runs/{rid}/artifacts/eval_samples/"
           "step_000003.json?workflowType=machine_learning")
    text = ui["browser"].page(url, "samples")
    # the table view's header row, then the sample's cells (tests/fake_engine.py's sample)
    assert re.search(r"question completion reward 1\+1 <answer>2</answer>", text), text


def test_the_four_runs_of_a_sweep_have_distinct_names(ui):
    runs = children(ui)
    names = sorted(r["info"]["run_name"] for r in runs)
    assert names == sorted(f"beta={b},epsilon={e}" for b, e in JOBS)
    ids = urllib.parse.quote(json.dumps([r["info"]["run_id"] for r in runs]))
    exp = urllib.parse.quote(json.dumps([runs[0]["info"]["experiment_id"]]))
    text = ui["browser"].page(f"{ui['base']}/#/compare-runs?runs={ids}&experiments={exp}",
                              "compare")
    assert "Comparing 4 Runs" in text
    shown = re.search(r"Run Name: (.*?) Start Time:", text).group(1).split()
    assert sorted(shown) == names
