"""`python -m rlexp ARGS` as a forked child of a process that imported the entry point's
modules once, for the tests' many short commands (refusals, dry runs).

A fresh `python -m rlexp` spends ~1 s of CPU importing Hydra, OmegaConf and rlexp before it
reads its arguments; the suite runs ~180 such commands that then refuse in a fraction of that.
This server (one per pytest worker, started on the first command) imports `rlexp.__main__`
as a module (no JAX, MLflow or Tunix: the entry point imports those lazily; one thread), then
forks a child per command. The child sets the working directory, the environment, argv,
sys.path[0] and fds 0-2 as `python -m` would, and runs the `rlexp` package as `__main__` with
runpy: the entry point's own code in a process of its own, its exit status and output the
command's. What differs from a fresh interpreter is only that the modules are imported
already (and the hash seed, locale and time zone are the server's), so a command whose
environment differs in what Python reads as it starts (PYTHON*, LANG, LC_*, TZ) or that names
another interpreter runs fresh (helpers.cli decides). stdin is /dev/null.

Protocol on the server's stdin/stdout: one JSON request per line {argv, cwd, env, out, err,
timeout}; one JSON answer per line {rc} or {timeout: true}.
"""

from __future__ import annotations

import json
import os
import runpy
import select
import signal
import sys


def _wait(pid: int, timeout: float) -> dict:
    """The child's exit status, or {timeout} after killing it once `timeout` s have passed."""
    with open(os.pidfd_open(pid), "rb", buffering=0) as ended:  # readable once the child has exited
        if not select.select([ended], [], [], timeout)[0]:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"timeout": True}
    return {"rc": os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])}


def serve() -> dict:
    """Answer requests until stdin closes (then exit); in a forked child, return its request."""
    requests, answers = sys.stdin, sys.stdout
    for line in requests:
        request = json.loads(line)
        answers.flush()
        pid = os.fork()
        if pid == 0:
            return request
        answers.write(json.dumps(_wait(pid, request["timeout"])) + "\n")
        answers.flush()
    sys.exit(0)


def become_the_command(request: dict) -> None:
    """In the child: `python -m rlexp ARGV` in request's cwd and environment."""
    for fd, path, mode in ((0, os.devnull, os.O_RDONLY),
                           (1, request["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                           (2, request["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
        target = os.open(path, mode, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.path[0] = os.getcwd()  # `python -m` puts the working directory first
    sys.argv = ["-m", *request["argv"]]  # runpy sets argv[0] to rlexp/__main__.py
    sys.modules.pop("rlexp.__main__")  # imported as a module for its imports; runs as __main__
    runpy.run_module("rlexp", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    import rlexp.__main__  # noqa: F401  (the imports every command shares)

    become_the_command(serve())
