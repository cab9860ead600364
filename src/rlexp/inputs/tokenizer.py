"""A character-level tokenizer for the tiny model: offline, deterministic, no files. Ids: 0 pad,
1 bos, 2 eos, 3 unknown, then printable ASCII and newline. Tunix's sampler prepends `bos_id()`
when it is non-zero, so prompts start with BOS like a real tokenizer's."""

from __future__ import annotations

PAD, BOS, EOS, UNK = 0, 1, 2, 3
_SPECIALS = 4
# printable ASCII (space to ~) plus newline; tabs etc. map to UNK.
ALPHABET = "\n" + "".join(chr(c) for c in range(32, 127))
MIN_VOCAB = _SPECIALS + len(ALPHABET)


class CharTokenizer:
    """encode/decode/bos_id/eos_id/pad_id: the interface Tunix's TokenizerAdapter accepts."""

    def __init__(self, vocab_size: int):
        if vocab_size < MIN_VOCAB:
            raise ValueError(f"char tokenizer needs vocab_size >= {MIN_VOCAB}")
        self.vocab_size = vocab_size
        self._ids = {ch: i + _SPECIALS for i, ch in enumerate(ALPHABET)}

    def encode(self, text: str, **_: object) -> list[int]:
        return [self._ids.get(ch, UNK) for ch in text]

    def decode(self, ids: list[int], **_: object) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if _SPECIALS <= i < MIN_VOCAB:
                out.append(ALPHABET[i - _SPECIALS])
        return "".join(out)

    def bos_id(self) -> int:
        return BOS

    def eos_id(self) -> int:
        return EOS

    def pad_id(self) -> int:
        return PAD
