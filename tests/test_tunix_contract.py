"""The private Tunix names rlexp relies on still exist with the signatures rlexp uses.

A Tunix upgrade that renames `_run_global_step` or reorders its parameters fails here, in
the fast tier, with the name in the message, instead of silently in a training step.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import rlexp
from conftest import require

SRC = Path(rlexp.__file__).resolve().parent
ENGINE = SRC / "engine"

require(importlib.util.find_spec("tunix") is not None, "tunix is not installed",
        "bash scripts/setup --test")

from rlexp.engine import tunix_names  # noqa: E402


@pytest.mark.parametrize("entry", tunix_names.NAMES, ids=lambda e: e.label())
def test_private_tunix_name_still_holds(entry):
    why = tunix_names.check(entry)
    assert why is None, (f"{entry.label()} {why} (rlexp uses it for: {entry.why or entry.kind}; "
                         f"tested with google-tunix {tunix_names.TESTED_VERSION}, installed "
                         f"{tunix_names.installed_version()})")


def test_the_check_notices_changes():
    """Each kind of check can fail: a missing name, reordered parameters, a lost keyword."""
    learner = "tunix.rl.rl_learner:RLLearner"
    gone = tunix_names.Name(learner, "_no_such_method", "method", ())
    assert tunix_names.check(gone) == "is gone"
    reordered = tunix_names.Name(learner, "_run_global_step", "method",
                                 ("mini_batch_size", "full_batch_size"), True)
    assert "positional parameters changed" in tunix_names.check(reordered)
    lost = tunix_names.Name("tunix.rl.common", "compute_per_token_logps", "function",
                            ("graphdef", "no_such_keyword"))
    assert tunix_names.check(lost) == "lost parameter(s) no_such_keyword"
    unset = tunix_names.Name(learner, "_no_such_attribute", "attribute")
    assert tunix_names.check(unset) == "is no longer set by the class"
    no_field = tunix_names.Name("tunix.sft.peft_trainer:MetricsBuffer", "nope", "field")
    assert tunix_names.check(no_field) == "is no longer a field"
    assert "is gone" in tunix_names.check(tunix_names.Name("tunix.no_such_module", "x", "function"))


def test_only_the_engine_imports_tunix():
    offenders = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
                 if ENGINE not in p.parents
                 and re.search(r"^\s*(import tunix|from tunix)", p.read_text(), flags=re.M)]
    assert not offenders, f"import Tunix only inside rlexp/engine/: {offenders}"


def test_tunix_sync_weights_copies_and_counts_a_step():
    """rlexp's Cluster.copy_weights undoes the step that Tunix's RLCluster.sync_weights counts
    (a resume and an evaluation copy weights outside the step schedule): Tunix's own method,
    run on a stand-in cluster, must still copy the trainer's params and count one step."""
    from types import SimpleNamespace

    from flax import nnx
    from tunix.rl.rl_cluster import RLCluster

    from rlexp.engine.learner import Cluster

    copied = []
    cluster = SimpleNamespace(
        global_steps=4, actor_trainer=SimpleNamespace(model=nnx.Linear(2, 2, rngs=nnx.Rngs(0))),
        rollout=SimpleNamespace(update_params=lambda params, types: copied.append(params)))
    RLCluster.sync_weights(cluster)
    assert len(copied) == 1 and cluster.global_steps == 5
    cluster.sync_weights = lambda: RLCluster.sync_weights(cluster)
    Cluster.copy_weights(cluster)
    assert len(copied) == 2 and cluster.global_steps == 5
