"""Each test file's measured seconds, so the conftest can hand pytest-xdist's `--dist loadfile`
the slowest files first (longest-first scheduling: the last files to start are short, so the
two workers end together instead of one idling while the other runs a 2-minute file).

Regenerate after a full run:
    python -m pytest -n 2 --dist loadfile -m "not accelerator" --durations=0 > /tmp/d.log
    python tests/file_durations.py /tmp/d.log
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path

TABLE = Path(__file__).with_name("file_durations.json")
LINE = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(tests/[^:]+\.py)::")


def load() -> dict[str, float]:
    return json.loads(TABLE.read_text()) if TABLE.exists() else {}


def main(log: str) -> None:
    seconds: dict[str, float] = defaultdict(float)
    for line in Path(log).read_text().splitlines():
        if m := LINE.match(line):
            seconds[m.group(2)] += float(m.group(1))
    table = {f: round(s, 1) for f, s in sorted(seconds.items(), key=lambda kv: -kv[1])}
    TABLE.write_text(json.dumps(table, indent=0) + "\n")
    print(f"{len(table)} files, {sum(table.values()):.0f} s in all -> {TABLE}")


if __name__ == "__main__":
    main(sys.argv[1])
