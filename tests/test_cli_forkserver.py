"""The tests' fork server (tests/cli_forkserver.py, helpers.cli) against a fresh interpreter:
the same `python -m rlexp` command, forked and fresh (RLEXP_TESTS_FORK=0), gives the same exit
code and the same stdout and stderr, so what the suite checks through it holds for a user's
command too."""

from __future__ import annotations

import pytest

from helpers import cli

COMMANDS = [
    ("algo=nope",),                     # Hydra's choice refusal, rewritten by rlexp: exit 2
    ("algo.beta=-1",),                  # rlexp's own range refusal: exit 2
    ("algo.beta=0.1", "algo.beta=0.2"),  # pre-flight's key-given-twice refusal: exit 2
    ("train.steps=2", "--cfg", "job"),  # Hydra prints the composed config: exit 0
    ("--help",),                        # the usage, which names the program from argv[0]
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_a_forked_command_says_what_a_fresh_one_says(args, tmp_path):
    (tmp_path / "forked").mkdir()
    (tmp_path / "fresh").mkdir()
    forked = cli(*args, cwd=tmp_path / "forked", env={"RLEXP_TESTS_FORK": "1"})
    fresh = cli(*args, cwd=tmp_path / "fresh", env={"RLEXP_TESTS_FORK": "0"})
    assert (forked.returncode, forked.stdout, forked.stderr) == \
        (fresh.returncode, fresh.stdout, fresh.stderr)
    assert forked.returncode == (0 if {"--cfg", "--help"} & set(args) else 2), forked.stderr
    assert forked.stdout or forked.stderr  # it said something
