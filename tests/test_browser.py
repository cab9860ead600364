"""What a researcher sees in MLflow 3.17's UI, checked in headless Chromium against
`python -m rlexp.ui` on 127.0.0.1: the UI starts quietly, the experiment opens in the
model-training view and stays there when one clicks into a run, the sweep's parent and Compare;
the parent's Overview answers which group is better, with the group table, and links to the
chart view of its group runs, where one chart draws both groups;
a run's page shows its source, params, metrics (system metrics too) and dataset input, the eval
samples and training rollouts render as tables, the sweep's parent shows its seed groups' table
and CI band plot (and copies no child's values), its children carry their group (rlexp.group),
and the four runs of a sweep have short names that tell them apart.

Pages are read two ways: `chromium --headless --dump-dom` after a virtual time budget (the
rendered DOM's text), and, for clicks, Chromium driven over the DevTools protocol on a pipe
(--remote-debugging-pipe: no extra package). Facts that drive the UI's behaviour come from the
REST API. The sweep runs on the scripted engine (tests/fake_engine.py), so no JAX compile is
needed. Chromium comes from Debian through `scripts/setup --test` (~2 min the first time);
under CI=true its absence is a failure. Screenshots of each page are written to
$RLEXP_BROWSER_SHOTS when it is set.
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
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# (algo.beta, train.seed): two groups of two seeds
JOBS = [("0", "0"), ("0", "1"), ("0.04", "0"), ("0.04", "1")]


def text_of(html: str) -> str:
    html = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html, flags=re.S)
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


# Where screenshots go; None (unset): none taken, which spares a Chromium start per page.
SHOTS = os.environ.get("RLEXP_BROWSER_SHOTS")


class Browser:
    def __init__(self, root: Path):
        self.root = root
        self.shots = Path(SHOTS) if SHOTS else None
        if self.shots:
            self.shots.mkdir(parents=True, exist_ok=True)

    def page(self, url: str, name: str) -> str:
        """The text of the page once the app rendered (a fresh profile: no saved UI state)."""
        args = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                f"--user-data-dir={self.root / ('profile-' + name)}",
                "--window-size=1400,1000", "--virtual-time-budget=20000"]
        if self.shots:
            subprocess.run([*args, f"--screenshot={self.shots / (name + '.png')}", url],
                           capture_output=True, timeout=180)
        out = subprocess.run([*args, "--dump-dom", url], capture_output=True, text=True,
                             timeout=180)
        return text_of(out.stdout)


class Chrome:
    """Headless Chromium driven over the DevTools protocol on a pipe: commands on fd 3,
    replies on fd 4, JSON messages ended by a NUL byte (--remote-debugging-pipe)."""

    def __init__(self, profile: Path):
        to_chrome, self._to = os.pipe()
        self._from, from_chrome = os.pipe()

        def pipes() -> None:  # in the child, before exec
            os.dup2(to_chrome, 3)
            os.dup2(from_chrome, 4)

        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
             f"--user-data-dir={profile}", "--window-size=1400,1000", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(3, 4),
            preexec_fn=pipes)
        os.close(to_chrome)
        os.close(from_chrome)
        self._buf, self._id = b"", 0
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target,
                                 flatten=True)["sessionId"]

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._to, json.dumps(message).encode() + b"\0")
        while True:
            while b"\0" not in self._buf:
                chunk = os.read(self._from, 1 << 16)
                assert chunk, "chromium closed its DevTools pipe"
                self._buf += chunk
            raw, self._buf = self._buf.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._id:
                assert "error" not in reply, f"{method}: {reply['error']}"
                return reply.get("result", {})

    def js(self, expression: str):
        out = self.call("Runtime.evaluate", self.session, expression=expression,
                        returnByValue=True, awaitPromise=True)
        return out.get("result", {}).get("value")

    def goto(self, url: str) -> None:
        self.call("Page.navigate", self.session, url=url)

    def text(self) -> str:
        return self.js("document.body ? document.body.innerText : ''") or ""

    def wait_for(self, needle: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            if needle in text:
                return text
            time.sleep(0.5)
        raise AssertionError(f"{needle!r} not on the page in {timeout:g} s: {self.text()[:3000]}")

    def click(self, element_js: str) -> None:
        """A real mouse click (pressed, released) at the centre of the element."""
        deadline = time.monotonic() + 60  # links render after the page's text
        while True:
            box = self.js(f"(() => {{const e = {element_js}; if (!e) return null; "
                          "e.scrollIntoView({block: 'center'}); "
                          "const r = e.getBoundingClientRect(); "
                          "return [r.x + r.width / 2, r.y + r.height / 2]})()")
            if box is not None or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert box is not None, f"nothing to click: {element_js}"
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", self.session, type=kind, x=box[0], y=box[1],
                      button="left", clickCount=1)

    def screenshot(self, name: str) -> None:
        """The page as <$RLEXP_BROWSER_SHOTS>/NAME.png, MLflow's assistant panel closed (it
        covers a third of it); nothing when RLEXP_BROWSER_SHOTS is unset."""
        import base64

        if not SHOTS:
            return
        path = Path(SHOTS) / f"{name}.png"
        self.js("document.querySelector('button[aria-label=Close]')?.click()")
        time.sleep(1)
        path.write_bytes(base64.b64decode(self.call("Page.captureScreenshot", self.session,
                                                    format="png")["data"]))

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()


# The names of the runs one chart of MLflow's chart view draws: the Plotly plot (its .data, a
# trace per run) whose smallest enclosing card is titled METRIC.
CHART_RUNS = """(() => {
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    for (let card = plot.parentElement; card; card = card.parentElement) {
      if (card.querySelectorAll('.js-plotly-plot').length > 1) break;
      if (card.innerText.split('\\n').some(line => line.trim() == 'METRIC'))
        return (plot.data || []).map(trace => trace.name);
    }
  }
  return null;
})()"""


def sidebar(text: str) -> str:
    """The left sidebar's text (the page text up to its Docs link)."""
    return text.split("\nDocs\n", 1)[0]


def in_model_training(text: str) -> bool:
    """MLflow 3.17's sidebar in the model-training view lists Runs and Models; in the GenAI
    view it lists Overview, Observability, Sessions, Judges, Evaluation runs instead."""
    side = sidebar(text).split("\n")
    return "Runs" in side and "Models" in side and not {
        "Observability", "Sessions", "Judges", "Evaluation runs"} & set(side)


@pytest.fixture(scope="module")
def ui(tmp_path_factory):
    require(CHROMIUM is not None, "chromium is not installed", "bash scripts/setup --test")
    from fake_engine import sweep_env
    from sweep_helpers import explain, only_sweep_dir, rlexp

    root = tmp_path_factory.mktemp("browser")
    proc = rlexp(["-m", "algo.beta=0,0.04", "train.seed=0,1", "train.steps=3",
                  "eval.every=1", "run.progress=false", "run.export=false",
                  "tracker.system_metrics_every_s=0.3"], cwd=root, env=sweep_env(root),
                 timeout=600)
    assert proc.returncode == 0, explain(proc)
    sweep = only_sweep_dir(root)
    env = {k: v for k, v in environment().items() if k != "MLFLOW_TRACKING_URI"}
    errors = root / "ui.stderr"
    server = subprocess.Popen([sys.executable, "-m", "rlexp.ui", "--port", "0"], cwd=root,
                              env=env, stdout=subprocess.PIPE, stderr=errors.open("w"),
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
        yield {"base": base, "links": links, "sweep": sweep, "browser": Browser(root),
               "root": root, "first": first, "errors": errors, "sweep_out": proc.stdout}
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
    """The sweep's job runs (not its group runs)."""
    parent = json.loads((ui["sweep"] / "parent_run.json").read_text())
    body = json.dumps({"experiment_ids": [parent["experiment_id"]], "max_results": 100,
                       "filter": f"tags.`mlflow.parentRunId` = '{parent['run_id']}'"}).encode()
    req = urllib.request.Request(f"{ui['base']}/api/2.0/mlflow/runs/search", data=body,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        runs = json.loads(resp.read())["runs"]
    return [r for r in runs if {"key": "rlexp.role", "value": "group"} not in r["data"]["tags"]]


def test_the_ui_starts_quietly(ui):
    """Two lines of links on stdout, nothing on stderr (MLflow's and uvicorn's start-up lines
    and Starlette's deprecation warning were 8 lines)."""
    assert ui["first"].startswith("MLflow UI: http://127.0.0.1:")
    assert ui["links"][0].startswith("rlexp: http://127.0.0.1:")
    assert ui["errors"].read_text() == ""


def test_the_sweep_ends_with_its_group_table_and_parent(ui):
    parent = json.loads((ui["sweep"] / "parent_run.json").read_text())["run_id"]
    lines = ui["sweep_out"].splitlines()
    end = [line for line in lines if line.startswith("rlexp: sweep ")]
    assert end and f"MLflow run {parent} in sqlite:///" in end[-1]
    groups = [line for line in lines if re.match(r"β=0(\.04)?\s+2\s+\d\.\d{3} ±", line)]
    assert len(groups) == 2, ui["sweep_out"]  # one line a group, with its CI
    assert sum(line.startswith("final acc, β=0.04 - β=0: ") for line in lines) == 1


def test_clicks_from_the_link_stay_in_model_training(ui):
    """From rlexp.ui's link: click the sweep's parent, then a child run and its rollout table,
    then select every run and click Compare. Each page shows the model-training sidebar (in
    MLflow 3.17 in-app links drop ?workflowType= and a new browser falls back to GenAI)."""
    link = ui["links"][0].split(": ", 1)[1]
    parent = json.loads((ui["sweep"] / "parent_run.json").read_text())["run_id"]
    chrome = Chrome(ui["root"] / "profile-clicks")
    try:
        chrome.goto(link)
        assert in_model_training(chrome.wait_for("sweep: beta,seed"))
        chrome.click(f"document.querySelector('a[href$=\"/runs/{parent}\"]')")
        text = chrome.wait_for("Child runs")
        assert in_model_training(text), sidebar(text)
        # the parent copies no child's values; its group runs carry the groups' mean curves
        assert "Metrics (0)" in chrome.wait_for("β=0.04: mean of 2")
        assert "rlexp.best_child" not in text
        # its artifacts: the group table (a table view) and the CI band plot
        chrome.click("document.querySelector('[role=tab][aria-controls$=content-artifacts]')")
        chrome.click("document.querySelector('[data-testid=artifact-tree-node]"
                     "[aria-label=\"groups.json\"]')")
        text = chrome.wait_for("final acc")
        assert re.search(r"group\s+n\s+final acc", text) and re.search(r"β=0\.04\s+2\s", text), \
            text[:3000]
        chrome.click("document.querySelector('[data-testid=artifact-tree-node]"
                     "[aria-label=\"groups.png\"]')")
        deadline = time.monotonic() + 60  # the PNG as an image, full size (1100 px wide)
        while not chrome.js("Array.from(document.images).some(i => i.complete && "
                            "i.naturalWidth >= 1000)"):
            assert time.monotonic() < deadline, ("the band plot did not render", chrome.js(
                "Array.from(document.images).map(i => [i.src.slice(0, 80), i.naturalWidth])"))
            time.sleep(0.5)

        chrome.goto(link)
        chrome.wait_for("sweep: beta,seed")
        chrome.click(f"document.querySelector('a[href$=\"/runs/{parent}\"]')")
        chrome.wait_for("Child runs")
        chrome.click("Array.from(document.querySelectorAll('a[href*=\"/runs/\"]'))"
                     ".find(a => a.innerText.trim() == 'β=0.04 seed=1')")  # a child run
        text = chrome.wait_for("Parameters")
        assert in_model_training(text) and "β=0.04 seed=1" in text, sidebar(text)
        assert "rlexp.group" in text
        chrome.click("document.querySelector('[role=tab][aria-controls$=content-artifacts]')")
        chrome.click("document.querySelector('[data-testid=artifact-tree-node]"
                     "[aria-label=rollouts]')")
        chrome.click("document.querySelector('[data-testid=artifact-tree-node]"
                     "[aria-label=\"step_000003.json\"]')")
        # the training-rollout table: its reward columns (tests/fake_engine.py's rollouts)
        text = chrome.wait_for("advantage")
        assert re.search(r"prompt\s+completion\s+format_exact\s+answer_exact\s+reward\s+"
                         r"advantage\s+length\s+truncated", text), text[:3000]
        assert in_model_training(text)

        chrome.goto(link)
        chrome.wait_for("sweep: beta,seed")
        chrome.click("document.querySelector('button[data-component-id$="
                     "\"runnamecellrenderer.tsx_46\"]')")  # expand the parent's children
        chrome.wait_for("β=0 seed=0")
        chrome.click("document.querySelector('input[aria-label=\"Select all runs\"]')")
        chrome.click("document.querySelector('[data-testid=runs-compare-button]')")
        text = chrome.wait_for("Comparing 7 Runs")  # the parent, 4 jobs, 2 group runs
        assert in_model_training(text), sidebar(text)
    finally:
        chrome.close()


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
    assert re.search(r"System metrics \(\d+\) (system/\S+ \S+ )*system/cpu_utilization_percentage",
                     text), text
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
    assert names == sorted(f"β={b} seed={s}" for b, s in JOBS)  # short: the full values are tags
    for run in runs:  # MLflow's "Group by" rlexp.group puts each group's seeds together
        tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
        assert tags["sweep.algo.beta"] in ("0", "0.04")
        assert tags["rlexp.group"] == f"β={tags['sweep.algo.beta']}"
    ids = urllib.parse.quote(json.dumps([r["info"]["run_id"] for r in runs]))
    exp = urllib.parse.quote(json.dumps([runs[0]["info"]["experiment_id"]]))
    text = ui["browser"].page(f"{ui['base']}/#/compare-runs?runs={ids}&experiments={exp}",
                              "compare")
    assert "Comparing 4 Runs" in text
    shown = re.search(r"Run Name: (.*?) Start Time:", text).group(1)
    assert all(shown.count(name) == 1 for name in names), shown


def test_the_parent_overview_answers_and_one_chart_overlays_the_groups(ui):
    """The parent's Overview (its description) holds the group table, the paired line and which
    group is better, in words; its 'group curves' link opens the chart view on the sweep's
    group runs, where one chart of eval/accuracy draws both groups' mean curves. Screenshots:
    overview.png and group_chart.png in $RLEXP_BROWSER_SHOTS."""
    parent = json.loads((ui["sweep"] / "parent_run.json").read_text())
    url = (f"{ui['base']}/#/experiments/{parent['experiment_id']}/runs/{parent['run_id']}"
           "?workflowType=machine_learning")
    chrome = Chrome(ui["root"] / "profile-overview")
    try:
        chrome.goto(url)
        chrome.wait_for("Child runs")
        chrome.click("document.querySelector('[data-testid=show-comment-toggle]')")  # Show more
        overview = chrome.wait_for("Show less").split("Artifacts", 1)[-1]  # past the tabs
        assert re.search(r"final acc: β=0\.04 is (better than|worse than|not distinguishable "
                         r"from) β=0\n", overview), overview[:3000]
        assert re.search(r"group\s+n\s+final acc\s+95% CI\s+final reward\s+95% CI", overview)
        assert re.search(r"β=0\.04\s+2\s+\d\.\d{3} ±\d\.\d{3}\s+\[\d\.\d{3}, \d\.\d{3}\]",
                         overview), overview[:3000]
        assert "final acc, β=0.04 - β=0: " in overview
        chrome.screenshot("overview")

        # the link opens a new tab (MLflow's Markdown links do): follow its address here
        chrome.goto(chrome.js("Array.from(document.querySelectorAll('a'))"
                              ".find(a => a.innerText.trim() == 'group curves').href"))
        deadline = time.monotonic() + 90
        while (drawn := chrome.js(CHART_RUNS.replace("METRIC", "eval/accuracy"))) is None:
            assert time.monotonic() < deadline, chrome.text()[:3000]
            time.sleep(0.5)
        # (MLflow 3.17 draws a run as two traces: its line and its points)
        assert sorted(set(drawn)) == ["β=0.04: mean of 2", "β=0: mean of 2"], drawn
        assert "2 matching runs" in chrome.text()  # the group runs alone, not nested
        chrome.screenshot("group_chart")
    finally:
        chrome.close()
