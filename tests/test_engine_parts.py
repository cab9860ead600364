"""Engine pieces without compiling a model: step metrics, keys (the learning-rate schedule:
tests/test_lr_schedule.py)."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.config.schema import Config
from rlexp.engine.probes import StepProbe


def test_probe_metrics_by_hand():
    p = StepProbe()
    p.record_reward("answer_exact", [1.0, 0.0, 0.0, 1.0])
    p.record_reward("format_exact", [0.5, 0.5, 0.5, 0.0])
    for loss, ratio_max, ratio_min, kl in ((0.2, 1.5, 0.9, 0.01), (0.4, 1.2, 0.7, 0.03)):
        p.updates["loss"].append(loss)
        p.updates["ratio_max"].append(ratio_max)
        p.updates["ratio_min"].append(ratio_min)
        p.updates["kl"].append(kl)
    p.lengths = [5, 10, 8, 7]
    m = p.metrics()
    assert m["train/reward/answer_exact"] == 0.5 and m["train/reward/format_exact"] == 0.375
    assert m["train/reward_mean"] == pytest.approx(0.875)  # the weighted terms add up
    assert m["train/loss"] == pytest.approx(0.3) and m["train/kl"] == pytest.approx(0.02)
    assert m["train/ratio_max"] == 1.5 and m["train/ratio_min"] == 0.7  # extremes, not means
    assert m["train/updates"] == 2 and m["train/completion_length"] == 7.5
    p.reset()
    assert p.metrics() == {}


def test_probe_fetches_device_values_once_and_counts_tokens():
    import jax.numpy as jnp

    p = StepProbe(num_generations=2, max_tokens=4)
    p.updates["loss"] += [jnp.float32(1.0), jnp.float32(3.0)]  # device arrays, as in a step
    p.updates["clip_ratio/low_mean"].append(jnp.float32(0.25))  # any aux key the loss declares
    p.record_rollout([np.arange(4), np.arange(2), np.arange(6)], np.array([[0, 5, 6], [7, 8, 9]]),
                     pad_id=0)
    m = p.metrics()
    assert m["train/loss"] == 2.0 and m["train/clip_ratio/low_mean"] == 0.25
    # lengths capped at the budget: 4, 2, 4; prompt tokens (non-pad) 5
    assert m["train/tokens_seen"] == 15
    p.reset()
    p.record_rollout([np.arange(3)], None, pad_id=0)
    assert p.metrics()["train/tokens_seen"] == 18  # cumulative over steps


def test_completion_stats_by_hand():
    from rlexp.engine.probes import completion_stats

    m = completion_stats([4, 2, 4, 1], max_tokens=4)
    assert m["train/completion_length"] == 2.75
    assert m["train/completion_length_min"] == 1 and m["train/completion_length_max"] == 4
    assert m["train/clipped_ratio"] == 0.5  # two rows used the whole budget
    assert m["train/terminated_length"] == 1.5  # mean of the rows that ended: (2 + 1) / 2
    assert completion_stats([4, 4], 4)["train/terminated_length"] == 0.0
    assert completion_stats([], 4) == {}


def test_reward_stats_against_numpy():
    from rlexp.engine.probes import reward_stats

    a = [1.0, 1.0, 0.0, 1.0, 0.5, 0.5]
    b = [0.0, 0.0, 0.5, 0.5, 0.0, 0.0]
    m = reward_stats({"a": a, "b": b}, group=2)
    total = np.add(a, b)  # per completion: 1, 1, .5, 1.5, .5, .5
    np.testing.assert_allclose(m["train/reward_mean"], total.mean())
    np.testing.assert_allclose(m["train/reward_std"], total.std())
    np.testing.assert_allclose(m["train/reward_std/a"], np.std(a))
    assert m["train/reward/b"] == pytest.approx(1 / 6)
    # groups (1, 1), (.5, 1.5), (.5, .5): two of three have identical rewards
    assert m["train/zero_std_groups"] == pytest.approx(2 / 3)
    assert "train/zero_std_groups" not in reward_stats({"a": a[:5]}, group=2)  # ragged


def test_keys_are_pure_and_distinct():
    import jax

    from rlexp.engine import eval_key, rollout_key

    same = np.asarray(jax.random.key_data(rollout_key(3, 7))) == np.asarray(jax.random.key_data(rollout_key(3, 7)))
    assert same.all()
    data = {tuple(np.asarray(jax.random.key_data(k)).ravel())
            for k in (rollout_key(3, 7), rollout_key(3, 8), rollout_key(4, 7), eval_key(3))}
    assert len(data) == 4


def test_prompt_encoding_is_memoized_and_unchanged():
    """GRPO samples each prompt num_generations times: Tunix's Sampler.tokenize then encodes
    it once, with the same ids (and BOS) as without the memo."""
    from types import SimpleNamespace

    pytest.importorskip("tunix")
    from tunix.generate.sampler import Sampler
    from tunix.generate.tokenizer_adapter import TokenizerAdapter

    from rlexp.engine.rollout.vanilla import MemoizedEncoding
    from rlexp.inputs.tokenizer import CharTokenizer

    calls = []

    class Counting(CharTokenizer):
        def encode(self, text: str, **kw: object) -> list[int]:
            calls.append(text)
            return super().encode(text, **kw)

    plain = SimpleNamespace(tokenizer=TokenizerAdapter(CharTokenizer(128)))
    want = [Sampler.tokenize(plain, p).tolist() for p in ("1+2=", "3+4=")]
    sampler = SimpleNamespace(tokenizer=MemoizedEncoding(Counting(128), limit=8))
    got = [Sampler.tokenize(sampler, p).tolist() for p in ("1+2=", "3+4=") * 4]
    assert got == want * 4
    assert calls == ["1+2=", "3+4="]  # each distinct prompt encoded once


def test_masked_entropy_against_numpy():
    pytest.importorskip("tunix")
    import jax.numpy as jnp

    from rlexp.algo.losses import masked_mean
    from rlexp.engine.algo_registry import token_entropy

    def masked_entropy(logits, mask):
        return masked_mean(token_entropy(logits), mask)

    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)) * 3
    mask = np.array([[1, 1, 0], [1, 0, 0]], dtype=np.float32)
    p = np.exp(logits - logits.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    h = -(p * np.log(p)).sum(-1)
    want = (h * mask).sum() / mask.sum()
    np.testing.assert_allclose(float(masked_entropy(jnp.asarray(logits), jnp.asarray(mask))), want,
                               rtol=1e-5)
    # uniform logits: log(V) nats
    np.testing.assert_allclose(float(masked_entropy(jnp.zeros((1, 2, 5)), jnp.ones((1, 2)))),
                               np.log(5), rtol=1e-6)


def test_loading_pauses_the_collector_and_freezes_only_for_a_job():
    """runtime.loading: no automatic collection while a large import runs; what it loaded is
    frozen inside a job (handed back at the job's end), left alone elsewhere."""
    import gc

    from rlexp.base import runtime

    assert gc.isenabled() and gc.get_freeze_count() == 0
    with runtime.loading():
        assert not gc.isenabled()
    assert gc.isenabled() and gc.get_freeze_count() == 0  # not in a job: nothing frozen
    gc.disable()  # a caller that turned the collector off keeps it off
    try:
        with runtime.loading():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
    with runtime.frozen_heap():
        gc.unfreeze()  # count only what loading() freezes
        with runtime.loading():
            loaded = [object() for _ in range(10)]  # noqa: F841 - alive while frozen
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_skip_teardown_keeps_what_a_normal_exit_keeps(tmp_path):
    """runtime.skip_teardown skips the interpreter's teardown only: threads are waited for
    (concurrent.futures' idle workers stopped), exit handlers registered after it run,
    output is flushed, and the exit status is the command's. The teardown's own work (here
    a module global's __del__) runs without it and not with it."""
    import subprocess
    import sys

    code = f"""
import atexit, concurrent.futures, sys, threading, time
from pathlib import Path
from rlexp.base import runtime
if sys.argv[1] == "skip":
    runtime.skip_teardown()
out = Path({str(tmp_path)!r}) / sys.argv[1]
out.mkdir()
class Torn:
    def __del__(self):
        (out / "teardown").write_text("ran")
torn = Torn()
pool = concurrent.futures.ThreadPoolExecutor(1)
pool.submit(time.sleep, 0)  # an idle non-daemon worker, as MLflow and orbax leave
def slow():
    time.sleep(0.3)
    (out / "thread").write_text("done")
threading.Thread(target=slow).start()
atexit.register(lambda: (out / "atexit").write_text("ran"))
sys.stdout.write("unflushed")
with runtime.exit_status():
    sys.exit(3)
"""
    for mode in ("skip", "plain"):
        proc = subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                              text=True, timeout=60)
        assert proc.returncode == 3, proc.stderr[-2000:]
        assert proc.stdout == "unflushed"
        out = tmp_path / mode
        assert (out / "thread").read_text() == "done"
        assert (out / "atexit").read_text() == "ran"
        assert (out / "teardown").exists() == (mode == "plain")


def test_a_job_runs_with_the_heap_before_it_frozen():
    """runtime.frozen_heap: what existed before the job is out of the collector's walks
    (Tunix's gc.collect() calls), the job's garbage is collected as it ends, and a heap that
    was not frozen before the job is handed back."""
    import gc

    from rlexp.base import runtime

    assert gc.get_freeze_count() == 0
    with runtime.frozen_heap():
        assert gc.get_freeze_count() > 0
        garbage = _cycle()  # made by "the job": collectable while frozen
        gc.collect()
        assert garbage() is None
        gc.disable()  # no automatic collection: only the job's end collects what follows
        try:
            left = _cycle()  # garbage the job leaves behind
        finally:
            gc.enable()
        assert left() is not None
    assert left() is None
    assert gc.get_freeze_count() == 0


class _Node:
    pass


def _cycle() -> "weakref.ref":  # noqa: F821
    import weakref

    a, b = _Node(), _Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_a_cycle_through_the_frozen_heap_waits_for_a_full_pass(monkeypatch):
    """A heap frozen before the job stays frozen; garbage cycles
    in it are collected by a full pass at a job's start once the frozen heap grew by a
    quarter since the last one, and not before."""
    import gc
    import weakref

    from rlexp.base import runtime

    holder = [_Node()]
    holder[0].other = _Node()
    holder[0].other.other = holder[0]
    ref = weakref.ref(holder[0])
    gc.freeze()  # the cycle and its holder are in the frozen heap
    try:
        monkeypatch.setattr(runtime, "_jobs_in_process", 1)
        monkeypatch.setattr(runtime, "_frozen_after_full", gc.get_freeze_count())
        with runtime.frozen_heap():
            holder.clear()  # the job drops the last reference from outside the cycle
        assert ref() is not None  # the job's end does not walk the frozen heap
        assert gc.get_freeze_count() > 0  # and leaves it frozen
        with runtime.frozen_heap():  # grown by less than a quarter: no full pass
            pass
        assert ref() is not None
        grown = [[] for _ in range(gc.get_freeze_count() // 3)]  # noqa: F841 - kept alive
        with runtime.frozen_heap():
            assert ref() is None  # a full pass ran first
    finally:
        gc.unfreeze()
