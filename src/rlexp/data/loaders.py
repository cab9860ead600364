"""Dataset loaders: arithmetic and gsm_symbolic (reasoning-gym, offline) and gsm8k (files/hub).

Every loader returns disjoint train and eval lists of `Problem`s (disjoint by question text),
seeded by dataset.seed so all jobs of a sweep see the same data.
"""

from __future__ import annotations

import json
import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from rlexp.config import DatasetConfig
from rlexp.data.extract import canonical_number, gsm8k_final_answer, gsm8k_reasoning, parse_number
from rlexp.errors import UserError


@dataclass(frozen=True)
class Problem:
    # The task as the dataset states it (before any prompt template).
    question: str
    # Reference final answer (a number written canonically, e.g. "12", "-3", "0.5").
    answer: str
    # Reference working (may be empty), used by the warm-start target of the reasoning template.
    reasoning: str = ""


@dataclass
class RawSplits:
    train: list[Problem]
    eval: list[Problem]
    # Rows dropped because they were malformed or had no usable answer.
    skipped: int = 0


def dataset_file(d: DatasetConfig) -> Path | None:
    """The local file dataset.path names (None for generated or hub data); UserError if missing."""
    if d.path is None:
        return None
    path = Path(d.path).expanduser()
    if not path.is_file() or not os.access(path, os.R_OK):
        raise UserError(f"dataset.path={d.path}: file not found or not readable")
    return path


def load_problems(d: DatasetConfig) -> RawSplits:
    loaders: dict[str, Callable[[DatasetConfig], RawSplits]] = {
        "arithmetic": _arithmetic, "gsm_symbolic": _gsm_symbolic, "gsm8k": _gsm8k}
    return loaders[d.name](d)


# ------------------------------------------------------------------------- procedural

def _procedural_splits(d: DatasetConfig, make: Callable[[int, int], Iterable[Problem]]) -> RawSplits:
    """Eval = the first num_eval distinct questions of stream A; train = stream B minus eval.

    `make(seed, size)` yields problems; streams use seeds derived from dataset.seed.
    """
    eval_set: dict[str, Problem] = {}
    for p in make(d.seed * 2 + 1, d.num_eval * 20):
        eval_set.setdefault(p.question, p)
        if len(eval_set) == d.num_eval:
            break
    if len(eval_set) < d.num_eval:
        raise UserError(f"dataset.num_eval={d.num_eval}: only {len(eval_set)} distinct questions "
                        f"exist at this difficulty; lower dataset.num_eval or raise the difficulty")
    train = [p for p in make(d.seed * 2, d.num_train * 20) if p.question not in eval_set][: d.num_train]
    if len(train) < d.num_train:
        raise UserError(f"dataset.num_train={d.num_train}: only {len(train)} training questions "
                        f"outside the eval split at this difficulty; lower it or raise the difficulty")
    return RawSplits(train=train, eval=list(eval_set.values()))


def _arithmetic(d: DatasetConfig) -> RawSplits:
    import reasoning_gym

    def make(seed: int, size: int) -> Iterator[Problem]:
        ds = reasoning_gym.create_dataset(
            "basic_arithmetic", min_terms=d.min_terms, max_terms=d.max_terms,
            min_digits=d.min_digits, max_digits=d.max_digits, operators=tuple(d.operators),
            allow_parentheses=d.allow_parentheses, allow_negation=d.allow_negation,
            size=size, seed=seed)
        for row in ds:
            expr = row["metadata"]["expression"]
            yield Problem(row["question"], row["answer"], f"{expr} = {row['answer']}")

    return _procedural_splits(d, make)


def _gsm_symbolic(d: DatasetConfig) -> RawSplits:
    import reasoning_gym

    def make(seed: int, size: int) -> Iterator[Problem]:
        for row in reasoning_gym.create_dataset("gsm_symbolic", size=size, seed=seed):
            value = parse_number(str(row["answer"]))
            if value is None:
                continue
            cot = row["metadata"].get("answer_cot", "")
            yield Problem(row["question"], canonical_number(value), gsm8k_reasoning(cot))

    return _procedural_splits(d, make)


# ------------------------------------------------------------------------------ gsm8k

def _gsm8k(d: DatasetConfig) -> RawSplits:
    if d.path is None:
        train_rows, eval_rows = _gsm8k_hub()
        train, s1 = _parse_gsm8k_rows(train_rows)
        held, s2 = _parse_gsm8k_rows(eval_rows)
        rng = random.Random(d.seed)
        rng.shuffle(held)
        rng.shuffle(train)
        return _disjoint(train, held, d, s1 + s2)
    path = dataset_file(d)
    rows, bad_rows = _read_rows(path)
    problems, skipped = _parse_gsm8k_rows(rows)
    skipped += bad_rows
    if not problems:
        raise UserError(f"dataset.path={d.path}: no usable rows (need 'question' and an 'answer' "
                        f"ending in '#### <number>'; {skipped} skipped)")
    random.Random(d.seed).shuffle(problems)
    n_eval = min(d.num_eval, len(problems) // 2) if len(problems) > 1 else 0
    if n_eval < 1 or len(problems) - n_eval < 1:
        raise UserError(f"dataset.path={d.path}: {len(problems)} usable rows; need at least 2 "
                        f"for disjoint train and eval splits")
    return _disjoint(problems[n_eval:], problems[:n_eval], d, skipped)


def _disjoint(train: list[Problem], held: list[Problem], d: DatasetConfig, skipped: int) -> RawSplits:
    eval_split = held[: d.num_eval]
    eval_q = {p.question for p in eval_split}
    train = [p for p in train if p.question not in eval_q][: d.num_train]
    if not train:
        raise UserError(f"dataset.path={d.path}: no training rows left outside the eval split")
    return RawSplits(train=train, eval=eval_split, skipped=skipped)


def _gsm8k_hub() -> tuple[list[dict], list[dict]]:
    try:
        import datasets

        ds = datasets.load_dataset("openai/gsm8k", "main")
    except Exception as exc:  # offline, hub down, auth...
        raise UserError(f"dataset.path=null: loading openai/gsm8k from the hub failed "
                        f"({type(exc).__name__}); pass dataset.path=<local jsonl/json/parquet>") from None
    return list(ds["train"]), list(ds["test"])


def _read_rows(path: Path) -> tuple[list[Any], int]:
    """Rows of a jsonl/json/parquet file, plus how many lines could not be parsed (jsonl)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist(), 0
    text = path.read_text(encoding="utf-8")
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"dataset.path={path}: invalid JSON ({exc.msg} at line {exc.lineno})") from None
        if isinstance(data, dict):  # {"data": [...]} or {"train": [...]} layouts
            data = next((v for v in data.values() if isinstance(v, list)), [])
        return (data if isinstance(data, list) else []), 0
    if suffix in (".jsonl", ".ndjson"):
        rows, bad = [], 0
        for line in text.splitlines():
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                bad += 1
        return rows, bad
    raise UserError(f"dataset.path={path}: unsupported file type {suffix!r}; "
                    f"use .jsonl, .json or .parquet")


def _parse_gsm8k_rows(rows: Iterable[Any]) -> tuple[list[Problem], int]:
    problems, skipped = [], 0
    for row in rows:
        q = row.get("question") if isinstance(row, dict) else None
        a = row.get("answer") if isinstance(row, dict) else None
        final = gsm8k_final_answer(a) if isinstance(a, str) else None
        if not isinstance(q, str) or not q.strip() or final is None:
            skipped += 1
            continue
        problems.append(Problem(q.strip(), final, gsm8k_reasoning(a)))
    return problems, skipped
