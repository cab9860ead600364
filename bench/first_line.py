"""How long `python -m rlexp` stays silent: seconds from the command to its first line of
output, piped (stdout and stderr to a pipe, as under `| tee`, CI or a scheduler's log).

    python bench/first_line.py                       # a single run and a sweep, 3 times each
    python bench/first_line.py --repeat 5 -- algo=gspo train.steps=2

Each try starts the command in a fresh process and a temporary dir (so no run dir is
resumed), reads both pipes until the first complete line, then stops the process (its process
group: a sweep's jobs too). Prints the first line and the median and worst time; the goal
is under 2 s.
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import time

RUN = ["train.steps=2", "eval.num_samples=4", "dataset.num_eval=4", "eval.pass_k=1",
       "tracker=none"]
SWEEP = ["-m", "algo=grpo,gspo", "train.seed=0,1", *RUN]
GOAL_S = 2.0


def first_line(args: list[str], timeout: float = 120.0) -> tuple[float, str]:
    """(seconds to the first line on stdout or stderr, that line)."""
    with tempfile.TemporaryDirectory() as cwd:
        started = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "rlexp", *args], cwd=cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True, env={**os.environ, "PYTHONUNBUFFERED":
                                                             os.environ.get("PYTHONUNBUFFERED",
                                                                            "")})
        sel = selectors.DefaultSelector()
        buffers = {}
        for stream in (proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
            sel.register(stream, selectors.EVENT_READ)
            buffers[stream] = b""
        try:
            while time.perf_counter() - started < timeout:
                for key, _ in sel.select(timeout=0.05):
                    chunk = key.fileobj.read() or b""
                    buffers[key.fileobj] += chunk
                    if b"\n" in buffers[key.fileobj]:
                        elapsed = time.perf_counter() - started
                        line = buffers[key.fileobj].split(b"\n", 1)[0]
                        return elapsed, line.decode("utf-8", "replace")
                if proc.poll() is not None and not sel.select(timeout=0):
                    return time.perf_counter() - started, "(ended without a line)"
            return timeout, "(no line before the timeout)"
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("overrides", nargs="*", help="after --: one command's arguments")
    args = parser.parse_args()
    cases = {"custom": args.overrides} if args.overrides else {"run": RUN, "sweep": SWEEP}
    for name, argv in cases.items():
        times, line = [], ""
        for _ in range(args.repeat):
            elapsed, line = first_line(argv)
            times.append(elapsed)
        verdict = "ok" if max(times) < GOAL_S else f"over the {GOAL_S:g} s goal"
        if line.startswith("Traceback") or line.startswith("("):
            verdict = "no start line (it crashed or stayed silent)"
        print(f"{name:6} first line after {statistics.median(times):.2f} s median, "
              f"{max(times):.2f} s worst ({args.repeat} tries, piped): {verdict}")
        print(f"       {line[:110]}")


if __name__ == "__main__":
    main()
