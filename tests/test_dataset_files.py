"""Dataset files that the readers themselves choke on end as one line before anything is made:
a text file named .parquet, a file that is not UTF-8; a byte-order mark and a CSV field over
the csv module's 128 KiB default are read, not refused or dropped."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import cli, one_line_exit_2
from rlexp.base.errors import UserError
from rlexp.data.loaders import read_rows

ROWS = [{"question": f"what is {i} + 1?", "answer": str(i + 1)} for i in range(3)]


def test_a_byte_order_mark_keeps_the_first_row(tmp_path):
    path = tmp_path / "bom.jsonl"
    body = "\n".join('{"question": "%s", "answer": "%s"}' % (r["question"], r["answer"])
                     for r in ROWS)
    path.write_bytes("\ufeff".encode() + body.encode())
    assert read_rows(path) == (ROWS, ())
    csv_path = tmp_path / "bom.csv"
    csv_path.write_bytes("\ufeffquestion,answer\n".encode() + b"q,1\n")
    assert read_rows(csv_path) == ([{"question": "q", "answer": "1"}], ())


def test_a_csv_field_over_the_default_limit_is_read(tmp_path):
    path = tmp_path / "long.csv"
    path.write_text("question,answer\n" + "x" * 200_000 + ",1\nq,2\n")
    rows, bad = read_rows(path)
    assert bad == () and [len(r["question"]) for r in rows] == [200_000, 1]


@pytest.mark.parametrize("name,data,needle", [
    ("text.parquet", b"question,answer\nq,1\n", "not a readable parquet file"),
    ("latin1.jsonl", '{"question": "caf\u00e9", "answer": "1"}\n'.encode("latin-1"),
     "not UTF-8 text"),
])
def test_files_a_reader_refuses_are_one_user_error(tmp_path, name, data, needle):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UserError, match=needle):
        read_rows(path)


def test_a_text_file_named_parquet_ends_the_command_in_one_line_and_leaves_no_run(tmp_path):
    data = tmp_path / "data.parquet"
    data.write_text("question,answer\nq,1\n")
    proc = cli("dataset=gsm8k", f"dataset.path={data}", "train.steps=1", cwd=tmp_path)
    one_line_exit_2(proc, f"dataset.path={data}: not a readable parquet file")
    assert not (tmp_path / "outputs" / "runs").exists()


def test_a_malformed_jsonl_line_is_named_before_any_other_check(tmp_path):
    """A torn line is skipped, and pre-flight names it (line and JSON error) before the prompt
    lengths are judged, which would otherwise be the only line the user sees."""
    path = tmp_path / "torn.jsonl"
    lines = ['{"question": "what is %d + 1? %s", "answer": "%d"}' % (i, "x" * 200, i + 1)
             for i in range(40)]
    lines.insert(2, '{"question": "broken", "answer": ')
    path.write_text("\n".join(lines) + "\n")
    rows, bad = read_rows(path)
    assert len(rows) == 40 and bad == ("line 3: Expecting value at column 34",)
    proc = cli("dataset=gsm8k", f"dataset.path={path}", "rollout.max_prompt_length=64",
               "run.dry_run=false", "train.steps=1", cwd=tmp_path)
    out = proc.stdout + proc.stderr
    assert f"dataset.path={path}: 1 line(s) are not valid JSON and are skipped (first: line 3: " \
        "Expecting value at column 34)" in out, out
    assert proc.returncode == 2 and "Traceback" not in out
    assert out.index("not valid JSON") < out.index("rlexp: error:"), out
