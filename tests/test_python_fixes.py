"""rlexp.base.python_fixes against the interpreter bug it works around (gh-106905): four
threads parse while finalisers force thread switches inside the C conversion. Without the fix
an affected interpreter raises SystemError (the positive control: the race is real here);
with `import rlexp` it does not."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from rlexp.base.python_fixes import ast_parse_is_thread_unsafe

RACE = textwrap.dedent("""
    import ast, gc, sys, threading
    if sys.argv[1] == "fixed":
        import rlexp  # noqa: F401 - installs the fix as any rlexp process does
    sys.setswitchinterval(1e-6)
    gc.set_threshold(50, 1, 1)
    SRC = "def f(a, b=1, *c, **d):\\n    return [x for x in (a, b) if x]\\n" * 20
    errors = []

    class Cycle:
        def __del__(self):
            sum(range(50))  # Python code inside a collection: a thread switch point

    def work():
        for _ in range(1500):
            for _ in range(20):
                c = Cycle(); c.me = c
            try:
                ast.parse(SRC)
            except SystemError as e:
                errors.append(str(e)); return

    threads = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in threads]; [t.join() for t in threads]
    print(len(errors), errors[:1])
""")


def _errors(mode: str) -> tuple[int, str]:
    out = subprocess.run([sys.executable, "-c", RACE, mode], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return int(out.stdout.split()[0]), out.stdout


def test_the_versions_with_the_bug():
    assert ast_parse_is_thread_unsafe((3, 11, 7)) and ast_parse_is_thread_unsafe((3, 12, 0))
    assert not ast_parse_is_thread_unsafe((3, 11, 8))
    assert not ast_parse_is_thread_unsafe((3, 12, 1))
    assert not ast_parse_is_thread_unsafe((3, 10, 14))


@pytest.mark.slow
def test_parallel_parses_raise_no_system_error_once_rlexp_is_imported():
    if ast_parse_is_thread_unsafe():
        for _ in range(3):  # a race: a very loaded machine may need another try to show it
            n, out = _errors("plain")
            if n:
                break
        assert n > 0, f"the race did not show without the fix, so this test proves nothing: {out}"
    n, out = _errors("fixed")
    assert n == 0, out
