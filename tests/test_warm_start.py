"""Warm start: what its cache key covers and the supervised batch layout (no compile)."""

from __future__ import annotations

import numpy as np

from rlexp.config import Config
from rlexp.data import Example
from rlexp.tokenizer import BOS, EOS, PAD, CharTokenizer
from rlexp.warm_start import cache_key, make_batch


def test_cache_key_covers_what_determines_the_weights():
    base = Config()
    key = cache_key(base)
    for change in (lambda c: setattr(c.model, "warm_start_steps", 7),
                   lambda c: setattr(c.model, "embed_dim", 32),
                   lambda c: setattr(c.dataset, "max_terms", 3),
                   lambda c: setattr(c.train, "seed", 1)):
        c = Config()
        change(c)
        assert cache_key(c) != key
    c = Config()
    c.algo.name, c.algo.beta, c.train.learning_rate = "gspo", 0.0, 1.0  # RL settings: shared
    assert cache_key(c) == key


def test_batch_masks_only_the_completion_and_eos():
    tok = CharTokenizer(128)
    ex = Example(prompt="1+1=", answer="2", reference="<answer>2</answer>", question="1+1")
    b = make_batch(tok, [ex], length=30)
    ids, mask = b["ids"][0], b["loss_mask"][0]
    n_prompt, n_completion = 1 + 4, len("<answer>2</answer>") + 1  # BOS + prompt; + EOS
    assert ids[0] == BOS and ids[n_prompt + n_completion - 1] == EOS
    assert (ids[n_prompt + n_completion:] == PAD).all()
    assert mask[:n_prompt].sum() == 0 and mask[n_prompt:n_prompt + n_completion].all()
    assert mask.sum() == n_completion and b["valid"][0].sum() == n_prompt + n_completion
    assert tok.decode(list(ids[n_prompt:])) == "<answer>2</answer>"
    np.testing.assert_array_equal(make_batch(tok, [ex], 8)["ids"][0][:5], ids[:5])  # truncation
