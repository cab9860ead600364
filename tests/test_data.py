"""Dataset loaders on files the tests write, procedural splits, and the stateless order."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlexp.config.schema import DatasetConfig
from rlexp.data import batch_indices, build_splits, load_problems
from rlexp.data.templates import PromptTemplate
from rlexp.base.errors import UserError
from rlexp.inputs.tokenizer import CharTokenizer

GOOD = [{"question": f"What is {i} + {i}?", "answer": f"{i} + {i} = <<{i}+{i}={2 * i}>>{2 * i}\n#### {2 * i:,}"}
        for i in range(10)]


def write_jsonl(path, rows, extra_lines=()):
    lines = [json.dumps(r) for r in rows] + list(extra_lines)
    path.write_text("\n".join(lines) + "\n")
    return path


def shipped(name, **over) -> DatasetConfig:
    """conf/dataset/<name>.yaml over the schema, as a run composes it."""
    from omegaconf import OmegaConf

    from rlexp.config.paths import conf_dir

    node = OmegaConf.merge(OmegaConf.structured(DatasetConfig),
                           OmegaConf.load(conf_dir() / "dataset" / f"{name}.yaml"), over)
    return OmegaConf.to_object(node)


def gsm8k(path, **kw):
    return shipped("gsm8k", path=str(path), num_eval=kw.pop("num_eval", 3),
                   num_train=kw.pop("num_train", 100), **kw)


def test_gsm8k_jsonl_skips_malformed_rows(tmp_path):
    bad_rows = [{"question": "no answer field"}, {"question": "x", "answer": "no marker"},
                {"answer": "#### 3"}, {"question": "", "answer": "#### 1"}]
    path = write_jsonl(tmp_path / "g.jsonl", GOOD + bad_rows, extra_lines=["{not json"])
    raw = load_problems(gsm8k(path))
    assert raw.skipped == 5
    assert len(raw.train) + len(raw.eval) == 10 and len(raw.eval) == 3
    assert not {p.question for p in raw.train} & {p.question for p in raw.eval}
    p = next(p for p in raw.train + raw.eval if p.question == "What is 7 + 7?")
    assert p.answer == "14" and p.reasoning == "7 + 7 = 14"


def test_gsm8k_thousands_separator_and_json_and_parquet(tmp_path):
    (tmp_path / "g.json").write_text(json.dumps({"data": GOOD}))
    raw_json = load_problems(gsm8k(tmp_path / "g.json"))
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(GOOD), tmp_path / "g.parquet")
    raw_pq = load_problems(gsm8k(tmp_path / "g.parquet"))
    for raw in (raw_json, raw_pq):
        assert raw.skipped == 0 and len(raw.train) == 7
    # same seed, same rows -> same split whatever the file format
    assert [p.question for p in raw_json.eval] == [p.question for p in raw_pq.eval]


def test_gsm8k_split_is_seeded(tmp_path):
    path = write_jsonl(tmp_path / "g.jsonl", GOOD)
    a, b = load_problems(gsm8k(path, seed=1)), load_problems(gsm8k(path, seed=1))
    c = load_problems(gsm8k(path, seed=2))
    assert [p.question for p in a.eval] == [p.question for p in b.eval]
    assert [p.question for p in a.eval] != [p.question for p in c.eval]


@pytest.mark.parametrize("content, match", [
    (None, "file not found"),
    ("{broken\n[]\n", "no usable rows"),
    ('{"question": "q", "answer": "no marker"}\n', "no usable rows"),
])
def test_gsm8k_user_errors(tmp_path, content, match):
    path = tmp_path / "g.jsonl"
    if content is not None:
        path.write_text(content)
    with pytest.raises(UserError, match=match) as err:
        load_problems(gsm8k(path))
    assert "dataset.path=" in str(err.value) and "\n" not in str(err.value)


def test_unsupported_suffix_is_user_error(tmp_path):
    path = tmp_path / "g.xlsx"
    path.write_text("question,answer\n")
    with pytest.raises(UserError, match="unsupported file type"):
        load_problems(gsm8k(path))


def test_arithmetic_is_seeded_disjoint_and_respects_difficulty():
    d = DatasetConfig(name="arithmetic", num_train=300, num_eval=20, seed=5, operators="+")
    a, b = load_problems(d), load_problems(d)
    assert [p.question for p in a.train] == [p.question for p in b.train]
    assert len(a.train) == 300 and len(a.eval) == 20
    assert not {p.question for p in a.train} & {p.question for p in a.eval}
    for p in a.train[:50]:
        assert "-" not in p.question.replace("Calculate ", "")[:-1] and "+" in p.question
        x, y = p.reasoning.split(" = ")[0].split(" + ")
        assert int(x) + int(y) == int(p.answer)


def test_arithmetic_too_many_eval_questions_is_user_error():
    d = DatasetConfig(name="arithmetic", num_train=10, num_eval=500, operators="+")
    with pytest.raises(UserError, match="dataset.num_eval"):
        load_problems(d)


def test_batch_indices_is_a_pure_function_covering_each_epoch():
    n, bs = 10, 4
    first_epoch = np.concatenate([batch_indices(n, bs, seed=3, step=s) for s in range(3)])[:10]
    assert sorted(first_epoch) == list(range(10))  # every example once per epoch
    np.testing.assert_array_equal(batch_indices(n, bs, 3, 7), batch_indices(n, bs, 3, 7))
    assert not np.array_equal(batch_indices(n, bs, 3, 0), batch_indices(n, bs, 4, 0))


def test_build_splits_renders_and_truncates():
    tok = CharTokenizer(128)
    d = DatasetConfig(name="arithmetic", num_train=8, num_eval=4, operators="+")
    raw = load_problems(d)
    s = build_splits(raw, "answer", tok.encode, tok.decode, max_prompt_tokens=20)
    assert s.truncated == 12  # every rendered prompt is longer than 20 characters
    assert all(len(e.prompt) == 20 for e in s.train)
    assert s.train[0].reference == f"<answer>{s.train[0].answer}</answer>"
    batch = s.train_batch(step=0, batch_size=4, seed=0)
    assert batch["prompts"].shape == (4,) and batch["answer"].shape == (4,)


def test_templates():
    assert PromptTemplate("answer").render("2+2?").startswith("2+2?\n")
    assert "<reasoning>" in PromptTemplate("reasoning").render("2+2?")
    assert PromptTemplate("reasoning").reference("4", "2+2=4") == "<reasoning>2+2=4</reasoning>\n<answer>4</answer>"

    class Chat:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            assert not tokenize and add_generation_prompt
            return "|".join(f"{m['role']}:{m['content']}" for m in messages)

    assert PromptTemplate("answer").render("2+2?", Chat()).endswith("user:2+2?")


# ------------------------------------------------------------------ generic dataset, plug-ins

def generic(path, **kw):
    return DatasetConfig(name="mine", _target_="rlexp.data.loaders.generic", path=str(path),
                         num_train=kw.pop("num_train", 100), num_eval=kw.pop("num_eval", 2), **kw)


def test_field_mapping_and_boxed_extractor_on_csv(tmp_path):
    import csv

    path = tmp_path / "m.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, ["problem", "solution"])
        w.writeheader()
        for i in range(6):
            w.writerow({"problem": f"Halve {2 * i + 1}.", "solution": f"So \\boxed{{\\frac{{{2 * i + 1}}}{{2}}}}."})
        w.writerow({"problem": "no box", "solution": "42"})
    raw = load_problems(generic(path, question_field="problem", answer_field="solution",
                                extractor="boxed"))
    assert raw.skipped == 1 and len(raw.train) + len(raw.eval) == 6 and len(raw.eval) == 2
    p = next(p for p in raw.train + raw.eval if p.question == "Halve 3.")
    assert p.answer == "\\frac{3}{2}"


def test_regex_extractor_and_eval_fraction_on_json(tmp_path):
    rows = [{"q": f"What is {i} squared?", "a": f"The answer: {i * i}!"} for i in range(20)]
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"data": rows}))
    raw = load_problems(generic(path, question_field="q", answer_field="a", extractor="regex",
                                answer_regex=r"answer: (-?\d+)", eval_fraction=0.25, num_eval=100))
    assert len(raw.eval) == 5 and len(raw.train) == 15
    assert {p.answer for p in raw.train + raw.eval} == {str(i * i) for i in range(20)}


def test_numeric_answers_and_none_extractor_are_canonical(tmp_path):
    path = write_jsonl(tmp_path / "n.jsonl", [{"question": f"q{i}", "answer": v}
                                              for i, v in enumerate([3, 2.0, "1,200", " x+1 "])])
    raw = load_problems(generic(path, num_eval=1))
    assert sorted(p.answer for p in raw.train + raw.eval) == ["1200", "2", "3", "x+1"]


def test_extractors_by_hand():
    from rlexp.data.extract import boxed_answer, canonical_answer, regex_answer

    assert boxed_answer("a \\boxed{1} then \\boxed{\\frac{1}{2}} end") == "\\frac{1}{2}"
    assert boxed_answer("\\boxed{unclosed") is None and boxed_answer("none") is None
    assert regex_answer("x=1; x=2", r"x=(\d)") == "2"
    assert canonical_answer(" 1,234.0 ") == "1234" and canonical_answer("1/2") == "1/2"


BUILDERS = '''
from rlexp.data.loaders import Problem, RawSplits

def rows(d):
    return [{"question": f"twice {i}", "answer": str(2 * i)} for i in range(10)]

def splits(d):
    return RawSplits(train=[Problem("a", "1")], eval=[Problem("b", "2")])

def extract_last_word(text):
    return text.split()[-1] if text.split() else None

def not_rows(d):
    return 5
'''


@pytest.fixture
def builders(tmp_path, monkeypatch):
    (tmp_path / "mydata_e12.py").write_text(BUILDERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "mydata_e12"


def test_target_builders_rows_splits_and_extractor(builders):
    d = DatasetConfig(name="mine", _target_=f"{builders}.rows", num_eval=3)
    raw = load_problems(d)
    assert len(raw.eval) == 3 and len(raw.train) == 7
    assert {p.answer for p in raw.train} | {p.answer for p in raw.eval} == {str(2 * i) for i in range(10)}
    assert load_problems(DatasetConfig(_target_=f"{builders}.splits")).eval[0].question == "b"
    d = DatasetConfig(_target_=f"{builders}.rows", extractor=f"{builders}.extract_last_word")
    assert load_problems(d).train  # answers are single words already
    with pytest.raises(UserError, match="must return RawSplits or an iterable"):
        load_problems(DatasetConfig(_target_=f"{builders}.not_rows"))
    with pytest.raises(UserError, match="dataset._target_='nope_e12.x'"):
        load_problems(DatasetConfig(_target_="nope_e12.x"))


def test_builtins_are_instances_of_the_same_mechanism():
    for name, target in (("arithmetic", "rlexp.data.loaders.arithmetic"),
                         ("gsm_symbolic", "rlexp.data.loaders.gsm_symbolic"),
                         ("gsm8k", "rlexp.data.loaders.generic")):
        assert shipped(name)._target_ == target


def test_prompt_template_inline_file_system_prompt_and_think_tag(tmp_path):
    from rlexp.data.templates import PromptTemplate

    d = DatasetConfig(template="reasoning", reasoning_tag="think",
                      prompt="Problem: {question}\nThink in <think>, answer in <answer>.\n")
    t = PromptTemplate.from_config(d)
    assert t.render("1+1?") == "Problem: 1+1?\nThink in <think>, answer in <answer>.\n"
    assert t.reference("2", "1+1=2") == "<think>1+1=2</think>\n<answer>2</answer>"
    f = tmp_path / "p.txt"
    f.write_text("Q: {question} {not_a_field}\n")
    t = PromptTemplate.from_config(DatasetConfig(prompt_file=str(f), prompt="ignored {question}"))
    assert t.render("hi") == "Q: hi {not_a_field}\n"  # other braces stay as written
    default = PromptTemplate.from_config(DatasetConfig(template="reasoning", reasoning_tag="think"))
    assert "<think>" in default.render("q") and "<reasoning>" not in default.render("q")
    sys_t = PromptTemplate.from_config(DatasetConfig(system_prompt="Be brief."))
    assert sys_t.render("q") == "q\nBe brief.\n"

    class Chat:
        def apply_chat_template(self, messages, tokenize, add_generation_prompt):
            return "|".join(f"{m['role']}:{m['content']}" for m in messages)

    assert sys_t.render("q", Chat()) == "system:Be brief.|user:q"
    with pytest.raises(UserError, match="no {question} placeholder"):
        PromptTemplate.from_config(DatasetConfig(prompt="no placeholder"))
    with pytest.raises(UserError, match="dataset.prompt_file"):
        PromptTemplate.from_config(DatasetConfig(prompt_file=str(tmp_path / "missing.txt")))


def test_datasets_loadable_name_with_train_and_eval_splits(tmp_path, monkeypatch):
    """dataset.hub takes any datasets.load_dataset name; a local dir of split files is one
    that works offline (hub ids need the network)."""
    pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    ds = tmp_path / "myds"
    ds.mkdir()
    write_jsonl(ds / "train.jsonl", GOOD)
    write_jsonl(ds / "test.jsonl", [{"question": "What is 50 + 50?", "answer": "#### 100"}])
    d = shipped("gsm8k", hub=str(ds), hub_config=None, num_eval=5)
    raw = load_problems(d)
    assert [p.answer for p in raw.eval] == ["100"] and len(raw.train) == 10
    with pytest.raises(UserError, match="dataset.hub=.*loading split 'nope' failed"):
        load_problems(shipped("gsm8k", hub=str(ds), hub_config=None, eval_split="nope"))


def test_numina_math_option_reads_a_local_copy_with_think_tags(tmp_path):
    rows = [{"problem": f"Compute {i}/2.", "solution": f"Halve it: $\\boxed{{\\frac{{{i}}}{{2}}}}$"}
            for i in range(1, 9)]
    d = shipped("numina_math", path=str(write_jsonl(tmp_path / "n.jsonl", rows)), num_eval=2)
    raw = load_problems(d)
    assert sorted(p.answer for p in raw.train + raw.eval)[0] == "\\frac{1}{2}"
    from rlexp.data.templates import PromptTemplate

    assert "<think>" in PromptTemplate.from_config(d).render("q")


def test_procedural_problems_are_generated_once_into_the_run_cache(tmp_path):
    """The first load writes <cache>/data/arithmetic-<hash>.json; the next reads it back
    equal to a fresh generation, in a process that never imports reasoning-gym (1.9 s); a
    changed difficulty is another file; a torn file is generated again."""
    import subprocess
    import sys

    d = shipped("arithmetic", num_train=50, num_eval=8)
    fresh = load_problems(d)
    assert load_problems(d, str(tmp_path)) == fresh
    files = list((tmp_path / "data").glob("arithmetic-*.json"))
    assert len(files) == 1
    (tmp_path / "d.json").write_text(json.dumps(d.__dict__))
    code = ("import sys, json, pathlib; from rlexp.config.schema import DatasetConfig; "
            "from rlexp.data import load_problems; "
            f"d = DatasetConfig(**json.loads(pathlib.Path({str(tmp_path / 'd.json')!r}).read_text())); "
            f"r = load_problems(d, {str(tmp_path)!r}); "
            "print(len(r.train), len(r.eval), r.train[0].question, 'reasoning_gym' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[:2] == ["50", "8"] and out.stdout.split()[-1] == "False", out
    assert fresh.train[0].question in out.stdout
    harder = shipped("arithmetic", num_train=50, num_eval=8, max_digits=2)
    assert load_problems(harder, str(tmp_path)) == load_problems(harder)
    assert len(list((tmp_path / "data").glob("arithmetic-*.json"))) == 2
    files[0].write_text(files[0].read_text()[:100])  # torn
    assert load_problems(d, str(tmp_path)) == fresh
    assert json.loads(files[0].read_text())["train"][0][0] == fresh.train[0].question
