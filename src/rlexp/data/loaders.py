"""Dataset builders: `dataset._target_` names one, called as fn(DatasetConfig). Built-ins:
`arithmetic` and `gsm_symbolic` (reasoning-gym, offline) and `generic` (a local file or a
`datasets` name). A builder returns RawSplits, or rows that `splits_from_rows` maps and splits.
Train and eval are disjoint by question and seeded by dataset.seed (one data for a sweep)."""

from __future__ import annotations

import csv
import dataclasses
import functools
import hashlib
import io
import itertools
import json
import os
import random
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from rlexp.base.errors import UserError
from rlexp.base.files import write_json_atomic
from rlexp.base.plugins import first_line, resolve
from rlexp.config.rules import GENERATED_DATASETS
from rlexp.config.schema import DatasetConfig
from rlexp.data.extract import (boxed_answer, canonical_answer, canonical_number,
                                gsm8k_final_answer, gsm8k_reasoning, parse_number, regex_answer)

# Imported inside functions, on purpose: reasoning_gym (2.6 s), datasets (1.7 s) and pyarrow.


@dataclass(frozen=True)
class Problem:
    question: str  # the task as the dataset states it (before any prompt template)
    answer: str  # reference final answer, a number written canonically ("12", "-3", "0.5")
    reasoning: str = ""  # reference working, may be empty (the reasoning template's warm start)


@dataclass
class RawSplits:
    train: list[Problem]
    eval: list[Problem]
    skipped: int = 0  # rows dropped: malformed, or no usable answer


def dataset_file(d: DatasetConfig) -> Path | None:
    """The local file dataset.path names (None for generated or hub data); UserError if missing."""
    if d.path is None:
        return None
    path = Path(d.path).expanduser()
    if path.is_dir():
        raise UserError(f"dataset.path={d.path} is a directory, not a file; point it at a "
                        "jsonl, json, csv or parquet file")
    if not path.is_file() or not os.access(path, os.R_OK):
        raise UserError(f"dataset.path={d.path}: file not found or not readable")
    if path.stat().st_size == 0:  # found at start, not after the run dir is made
        raise UserError(f"dataset.path={d.path}: the file is empty (no rows)")
    return path


def load_problems(d: DatasetConfig, cache_dir: str | None = None) -> RawSplits:
    """The dataset's train/eval problems; a built-in procedural one is generated once into
    <cache_dir>/data/ (`import reasoning_gym` 1.9 s on 2 cores, generating 0.2 s, reading 10 ms)."""
    if cache_dir is None or "://" in cache_dir or d._target_ not in GENERATED_DATASETS:
        return _build(d)
    path = _cache_path(d, cache_dir)
    try:
        saved = json.loads(path.read_text())
        return RawSplits(train=[Problem(*p) for p in saved["train"]],
                         eval=[Problem(*p) for p in saved["eval"]], skipped=saved["skipped"])
    except (OSError, ValueError, KeyError, TypeError):
        pass  # not generated yet, or a torn file: generate (and rewrite) it
    out = _build(d)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, {"train": [dataclasses.astuple(p) for p in out.train],
                                 "eval": [dataclasses.astuple(p) for p in out.eval],
                                 "skipped": out.skipped})
    except OSError:
        pass  # a read-only cache: generate every time, as without one
    return out


def _cache_path(d: DatasetConfig, cache_dir: str) -> Path:
    try:
        gym = version("reasoning-gym")
    except PackageNotFoundError:
        gym = "absent"
    # dataset.max_truncated_fraction checks prompts, it draws no problems: not in the key.
    drawn = {k: v for k, v in dataclasses.asdict(d).items() if k != "max_truncated_fraction"}
    fields = json.dumps({"reasoning_gym": gym, **drawn}, sort_keys=True, default=str)
    key = hashlib.sha256(fields.encode()).hexdigest()[:16]
    return Path(cache_dir).expanduser() / "data" / f"{d._target_.rsplit('.', 1)[-1]}-{key}.json"


def _build(d: DatasetConfig) -> RawSplits:
    out = resolve(d._target_, "dataset._target_")(d)
    if isinstance(out, RawSplits):
        return out
    try:
        rows = list(out)
    except TypeError:
        raise UserError(f"dataset._target_={d._target_!r}: must return RawSplits or an iterable "
                        f"of rows (dicts), got {type(out).__name__}") from None
    return splits_from_rows(rows, None, d)


def _procedural_splits(d: DatasetConfig,
                       make: Callable[[int, int], Iterable[Problem]]) -> RawSplits:
    """Eval = the first num_eval distinct questions of `make(seed, size)` with one seed derived
    from dataset.seed; train = those of another seed, minus eval."""
    eval_set: dict[str, Problem] = {}
    for p in make(d.seed * 2 + 1, d.num_eval * 20):
        eval_set.setdefault(p.question, p)
        if len(eval_set) == d.num_eval:
            break
    if len(eval_set) < d.num_eval:
        raise UserError(f"dataset.num_eval={d.num_eval}: only {len(eval_set)} distinct questions "
                        f"exist at this difficulty; lower dataset.num_eval or raise the difficulty")
    # islice stops the stream once num_train are drawn (a list would generate all 20x).
    train = list(itertools.islice((p for p in make(d.seed * 2, d.num_train * 20)
                                   if p.question not in eval_set), d.num_train))
    if len(train) < d.num_train:
        raise UserError(f"dataset.num_train={d.num_train}: only {len(train)} training questions "
                        "outside the eval split at this difficulty; lower it or raise the "
                        "difficulty")
    return RawSplits(train=train, eval=list(eval_set.values()))


def arithmetic(d: DatasetConfig) -> RawSplits:
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


def gsm_symbolic(d: DatasetConfig) -> RawSplits:
    import reasoning_gym
    def make(seed: int, size: int) -> Iterator[Problem]:
        for row in reasoning_gym.create_dataset("gsm_symbolic", size=size, seed=seed):
            value = parse_number(str(row["answer"]))
            if value is None:
                continue
            cot = row["metadata"].get("answer_cot", "")
            yield Problem(row["question"], canonical_number(value), gsm8k_reasoning(cot))
    return _procedural_splits(d, make)


def generic(d: DatasetConfig) -> RawSplits:
    """Rows of dataset.path (a file) or dataset.hub (a `datasets` name), mapped and split."""
    if d.path is not None:
        rows, bad_lines = read_rows(dataset_file(d))
        return splits_from_rows(rows, None, d, len(bad_lines))
    if d.hub is None:
        raise UserError("dataset.path=null and dataset.hub=null: the generic dataset needs a "
                        "local file (dataset.path=<jsonl/json/parquet/csv>) or a hub name")
    train_rows = _hub_rows(d, d.split)
    eval_rows = _hub_rows(d, d.eval_split) if d.eval_split is not None else None
    return splits_from_rows(train_rows, eval_rows, d)


def _hub_rows(d: DatasetConfig, split: str) -> list[dict]:
    try:
        import datasets
        return list(datasets.load_dataset(d.hub, d.hub_config, split=split))
    except Exception as exc:  # offline, hub down, auth, no such split...
        raise UserError(f"dataset.hub={d.hub}: loading split {split!r} failed "
                        f"({type(exc).__name__}); pass dataset.path=<local jsonl/json/parquet/csv>"
                        ) from None


def extract(d: DatasetConfig, text: str) -> tuple[str | None, str]:
    """(final answer or None, reasoning) of one answer-field value, by dataset.extractor."""
    if d.extractor == "gsm8k":
        return gsm8k_final_answer(text), gsm8k_reasoning(text)
    if d.extractor == "boxed":
        found = boxed_answer(text)
    elif d.extractor == "regex":
        found = regex_answer(text, d.answer_regex or "")
    elif d.extractor == "none":
        found = text
    else:
        found = resolve(d.extractor, "dataset.extractor")(text)
    return (canonical_answer(str(found)) if found is not None and str(found).strip() else None), ""


def problems_from_rows(rows: Iterable[Any], d: DatasetConfig) -> tuple[list[Problem], int]:
    """Field mapping + answer extraction; rows without a question or answer are skipped."""
    problems, skipped = [], 0
    for row in rows:
        row = row if isinstance(row, dict) else {}  # not a mapping: skipped below
        q, a = row.get(d.question_field), row.get(d.answer_field)
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            a = canonical_number(a)
        answer, reasoning = extract(d, a) if isinstance(a, str) else (None, "")
        if d.reasoning_field is not None:
            reasoning = str(row.get(d.reasoning_field) or "")
        if not isinstance(q, str) or not q.strip() or answer is None:
            skipped += 1
            continue
        problems.append(Problem(q.strip(), answer, reasoning))
    return problems, skipped


def splits_from_rows(rows: list[Any], eval_rows: list[Any] | None, d: DatasetConfig,
                     skipped: int = 0) -> RawSplits:
    """Disjoint train/eval problems: eval from `eval_rows`, else held out of `rows`."""
    problems, s1 = problems_from_rows(rows, d)
    skipped += s1
    where = f"dataset.path={d.path}" if d.path is not None else f"dataset {d.name}"
    if not problems:
        raise UserError(f"{where}: no usable rows (need a string '{d.question_field}' and an "
                        f"'{d.answer_field}' that dataset.extractor={d.extractor} can read; "
                        f"{skipped} skipped)")
    rng = random.Random(d.seed)
    if eval_rows is not None:
        held, s2 = problems_from_rows(eval_rows, d)
        rng.shuffle(held)
        rng.shuffle(problems)
        return _disjoint(problems, held, d, skipped + s2)
    rng.shuffle(problems)
    n_eval = round(d.eval_fraction * len(problems)) if d.eval_fraction is not None \
        else min(d.num_eval, len(problems) // 2)
    if n_eval < 1 or len(problems) - n_eval < 1:
        raise UserError(f"{where}: {len(problems)} usable rows; need at least 2 for disjoint "
                        f"train and eval splits")
    return _disjoint(problems[n_eval:], problems[:n_eval], d, skipped)


def _disjoint(train: list[Problem], held: list[Problem], d: DatasetConfig,
              skipped: int) -> RawSplits:
    eval_split = held[: d.num_eval]
    eval_q = {p.question for p in eval_split}
    train = [p for p in train if p.question not in eval_q][: d.num_train]
    if not train:
        raise UserError(f"dataset.path={d.path}: no training rows left outside the eval split")
    return RawSplits(train=train, eval=eval_split, skipped=skipped)


def read_rows(path: Path) -> tuple[list[Any], tuple[str, ...]]:
    """Rows of a jsonl/json/parquet/csv file and its unparsable jsonl lines ("line N: error");
    parsed once per file version and process."""
    stat = path.stat()
    rows, bad = _parse_rows(path.resolve(), stat.st_mtime_ns, stat.st_size)
    return list(rows), bad


@functools.lru_cache(maxsize=4)
def _parse_rows(path: Path, mtime_ns: int, size: int) -> tuple[list[Any], tuple[str, ...]]:
    """`path`'s rows; `mtime_ns` and `size` only key the cache (a changed file is read again)."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow
        import pyarrow.parquet as pq
        try:
            return pq.read_table(path).to_pylist(), ()
        except (pyarrow.ArrowException, OSError) as exc:  # e.g. a text file named .parquet
            raise UserError(f"dataset.path={path}: not a readable parquet file "
                            f"({first_line(exc) or type(exc).__name__})") from None
    try:  # utf-8-sig: a byte-order mark is read, not left on the first row's first key
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UserError(f"dataset.path={path}: not UTF-8 text (byte {exc.start} cannot be "
                        f"decoded); save it as UTF-8") from None
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UserError(f"dataset.path={path}: invalid JSON ({exc.msg} at line "
                            f"{exc.lineno})") from None
        if isinstance(data, dict):  # {"data": [...]} or {"train": [...]} layouts
            data = next((v for v in data.values() if isinstance(v, list)), [])
        return (data if isinstance(data, list) else []), ()
    if suffix in (".jsonl", ".ndjson"):
        rows, bad = [], []
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                bad.append(f"line {number}: {exc.msg} at column {exc.colno}")
        return rows, tuple(bad)
    if suffix in (".csv", ".tsv"):
        # The csv module refuses fields over 128 KiB by default; a long solution is a row like
        # any other (the prompt-length check then judges it). The limit is process-wide.
        csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))
        reader = csv.DictReader(io.StringIO(text, newline=""),
                                delimiter="\t" if suffix == ".tsv" else ",")
        try:
            return list(reader), ()
        except csv.Error as exc:
            raise UserError(f"dataset.path={path}: not a readable {suffix[1:]} file "
                            f"(line {reader.line_num}: {exc})") from None
    raise UserError(f"dataset.path={path}: unsupported file type {suffix!r}; "
                    f"use .jsonl, .json, .parquet or .csv")
