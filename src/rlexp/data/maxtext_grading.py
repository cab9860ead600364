"""MaxText's math grading at its newest stored commit (github.com/AI-Hypercomputer/maxtext
e591f30cbbf2, 2026-08-22; utils_rl.py last changed at dc8b0abe68af): answer extraction,
normalisation and math_verify equivalence, as src/maxtext/trainers/post_train/rl/utils_rl.py and
math_verify_pool.py write them. Tables and regexes are copied with their quirks ("a " and "an "
are deleted anywhere, so "banana " loses letters): this is what MaxText scores. One difference:
MaxText grades in spawned processes under a 120 s timeout per batch; here math_verify runs
in-process with its per-call timeout, and a timed-out call is not equal."""

from __future__ import annotations

import re
from typing import Sequence

from rlexp.data.rewards import math_verify_timeout

# math_verify (and sympy, ~1 s) is optional (rlexp[math]): imported inside the graders only.

EPSILON = 1e-6
FALLBACK_ANSWER = "-1000000"  # extract_answer's value without \boxed{} or an answer block

SUBSTITUTIONS = [("\\\\", "\\"), ("\\tfrac", "\\frac"), ("\\dfrac", "\\frac"), ("an ", ""),
                 ("a ", ""), (".$", "$"), ("\\$", ""), (r"\ ", ""), (" or ", ","), (" and ", ","),
                 ("million", "*10^6"), ("billion", "*10^9"), ("trillion", "*10^12"), (" ", ""),
                 ("mbox", "text"), (",\\text{and}", ","), ("\\text{and}", ","),
                 ("\\text{m}", "\\text{}")]
UNITS = ["yard", "foot", "feet", "mile", "day", "week", "month", "year", "hour", "minute", "second",
         "centimeter", "meter", "cm", "mm", "km", "inch", "degree", "pound", "cent", "mph"]
REMOVED_EXPRESSIONS = ["\\left", "\\right", "\\!", "square", "ways", "integers", "dollars", "units",
                       "\\ldots", "sue", "points", "digits", "gm", "meals", "edges", "students",
                       "childrentickets", "multiples", "\\text{s}", "\\text{.}", "\\text{\ns}",
                       "\\text{}^2", "\\text{}^3", "\\text{\n}", "\\text{}", r"\mathrm{th}",
                       r"^\circ", r"^{\circ}", r"\;", r",\!", "{,}", '"', "\\dots"]
# fix_latex_escaping: a command whose backslash Python read as an escape character.
_ESCAPE_FIXES = [("\f", "rac", r"\frac"), ("\n", "ewline", r"\newline"), ("\n", "e", r"\ne"),
                 ("\t", "heta", r"\theta"), ("\t", "an", r"\tan"), ("\t", "o", r"\to"),
                 ("\t", "imes", r"\times"), ("\t", "ext", r"\text"), ("\t", "extbf", r"\textbf"),
                 ("\t", "extit", r"\textit"), ("\r", "ightarrow", r"\rightarrow"),
                 ("\r", "ightarrow", r"\Rightarrow"), ("\b", "eta", r"\beta"),
                 ("\b", "ar", r"\bar"), ("\b", "inom", r"\binom"), ("\b", "oxed", r"\boxed"),
                 ("\a", "lpha", r"\alpha"), ("\a", "pprox", r"\approx"), ("\v", "ec", r"\vec")]
# ... and a command written without its backslash.
_LATEX_COMMANDS = ["frac", "sqrt", "pi", "theta", "alpha", "beta", "gamma", "delta", "sum", "int",
                   "infty", "cdot", "times", "div", "pm", "mp", "leq", "geq", "neq", "approx",
                   "equiv", "sin", "cos", "tan", "log", "ln", "exp", "lim", "to", "rightarrow",
                   "leftarrow", "Rightarrow", "Leftarrow", "overline", "underline", "hat", "bar",
                   "vec", "dot", "ddot", "mathbb", "mathbf", "mathrm", "text", "textbf", "textit",
                   "boxed", "left", "right", "choose", "binom"]


def boxed(x: str) -> str:
    """x wrapped in \\boxed{} unless it already starts with it."""
    return "\\boxed{" + x + "}" if not x.startswith("\\boxed{") else x


def normalize_final_answer(final_answer: str) -> str:
    """utils_rl.normalize_final_answer: the text after the last '=', mixed numbers joined ('7 3/4'
    -> '7+3/4'), words, units and LaTeX wrappers removed, '2.0' -> '2', '1,234' -> '1234'."""
    final_answer = final_answer.split("=")[-1]
    final_answer = re.sub(r"([0-9]) +([0-9])", r"\1+\2", final_answer)
    for before, after in SUBSTITUTIONS:
        final_answer = final_answer.replace(before, after)
    for unit in UNITS:
        final_answer = re.sub(rf"{unit}(es)?(s)? *(\^[0-9]+)?", "", final_answer)
    for expr in REMOVED_EXPRESSIONS:
        final_answer = final_answer.replace(expr, "")
    final_answer = re.sub(
        r".*?(\d+)?\s*\$\s*(\d+)?\s*(\\frac\{.*?\}\{.*?\}|\d+/\d+)\s*\$.*",
        lambda m: f"${w}{m.group(3)}$" if (w := (m.group(1) or m.group(2))) else f"${m.group(3)}$",
        final_answer,
    )
    final_answer = re.sub(r"(\\text\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\textbf\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\overline\{)(.*?)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(\\boxed\{)(.*)(\})", "\\2", final_answer)
    final_answer = re.sub(r"(frac)([^{])(.)", "frac{\\2}{\\3}", final_answer)
    final_answer = re.sub(r"(sqrt)([^{])", "sqrt{\\2}", final_answer)
    final_answer = final_answer.replace("$", "")
    if final_answer.startswith("."):
        final_answer = "0" + final_answer
    final_answer = final_answer.replace("{.", "{0.")
    if len(final_answer) >= 2 and final_answer[0] == "{" and final_answer[-1] == "}":
        final_answer = final_answer[1:-1]
    try:
        f = float(final_answer)
        if abs(f - round(f)) < 1e-7:
            final_answer = str(int(round(f)))
    except (ValueError, OverflowError):
        pass
    if final_answer.replace(",", "").isdigit():
        final_answer = final_answer.replace(",", "")
    return final_answer


def fix_latex_escaping(text: str) -> str:
    """utils_rl.fix_latex_escaping: LaTeX commands that lost their backslash get it back."""
    for escape_char, suffix, latex_cmd in _ESCAPE_FIXES:
        if escape_char in text:
            text = text.replace(escape_char + suffix, latex_cmd)
    for cmd in _LATEX_COMMANDS:
        text = re.sub(rf"(?<!\\)\b{cmd}\b", rf"\\{cmd}", text)
    return text


def preprocess_math_string(text: str) -> str:
    """utils_rl.preprocess_math_string: normalised, stripped, backslashes mended."""
    return fix_latex_escaping(normalize_final_answer(text).strip())


# utils_rl.get_answer_fallback_regex with rl.yml's solution tags: an answer block.
_ANSWER_BLOCK = re.compile(r"<answer>(.+?)</answer>", flags=re.MULTILINE | re.DOTALL)


def extract_answer(response: str) -> str:
    """utils_rl.extract_answer: in the last answer block (else the response), the last balanced
    \\boxed{...}; else a looser \\boxed; else the block stripped; else FALLBACK_ANSWER."""
    blocks = _ANSWER_BLOCK.findall(response)
    content = blocks[-1] if blocks else response
    found: list[str] = []
    stack: list[int] = []
    for i, ch in enumerate(content):
        if ch == "{":
            stack.append(i)
        elif ch == "}":
            if not stack:
                continue
            op = stack.pop()
            if content[:op].endswith(r"\boxed"):
                found.append(content[op + 1: i].strip())
    if found:
        return found[-1]
    m = re.search(r"\\boxed\s*\{?\s*([a-zA-Z0-9\.,\-]+)\s*\}?", content)
    if m:
        return m.group(1).strip()
    return blocks[-1].strip() if blocks else FALLBACK_ANSWER


def _parse_all(texts: Sequence[str], timeout: int | None) -> list:
    """Every expression math_verify parses out of `texts` (expressions and LaTeX)."""
    from math_verify import parse
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig
    targets = (ExprExtractionConfig(), LatexExtractionConfig())
    return [x for text in texts for x in parse(text, targets, parsing_timeout=timeout)]


def _equal_under_sympy(gold: object, prediction: object) -> bool:
    """math_verify_pool.are_equal_under_sympy: equal as unevaluated sympy expressions."""
    from sympy.parsing import sympy_parser
    try:
        return bool(sympy_parser.parse_expr(str(gold), evaluate=False)
                    == sympy_parser.parse_expr(str(prediction), evaluate=False))
    except Exception:  # as the source: an unparsable value is not equal
        return False


def verify(golds: Sequence[str], predictions: Sequence[str]) -> float:
    """math_verify_pool.verify_math_worker: 1.0 when any parsed prediction equals any parsed gold
    (sympy-equal or math_verify.verify, skipped for two sympy values with '**'), else 0.0."""
    try:
        from math_verify import verify as mv_verify
        from sympy import Basic, MatrixBase
        t = math_verify_timeout()
        preds = _parse_all(predictions, t)
        for gold in _parse_all(golds, t) if preds else ():
            for pred in preds:
                sympy_pair = (isinstance(gold, (Basic, MatrixBase))
                              and isinstance(pred, (Basic, MatrixBase)))
                if sympy_pair and _equal_under_sympy(gold, pred):
                    return 1.0
                skip = sympy_pair and ("**" in str(gold) or "**" in str(pred))
                if not skip and mv_verify(gold, pred, timeout_seconds=t):
                    return 1.0
        return 0.0
    except Exception:  # as the source
        return 0.0


def check_correctness(extracted: str, answers: Sequence[str]) -> tuple[bool, bool]:
    """utils_rl.check_correctness: (correct, partial) of an extracted answer: `verify` of the boxed
    normalised forms; partial also when a prediction is within 10% of a gold (+1e-6 each)."""
    norm = preprocess_math_string(extracted)
    norm_answers = [preprocess_math_string(a) for a in answers]
    if verify([boxed(a) for a in norm_answers], [boxed(norm)]) > 0.0:
        return True, True
    try:
        t = math_verify_timeout()
        predictions = _parse_all([boxed(norm)], t)
        golds = _parse_all([boxed(a) for a in norm_answers], t)
        partial = any(0.9 <= (float(p) + EPSILON) / (float(g) + EPSILON) <= 1.1
                      for p in predictions for g in golds)
    except Exception:  # as the source (a bare except): a value float() refuses is not close
        partial = False
    return False, partial
