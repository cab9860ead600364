"""Answer extraction and number parsing: pure string functions shared by rewards and loaders."""

from __future__ import annotations

import re

_ANSWER_RE = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


def extract_answer(completion: str) -> str | None:
    """Content of the last <answer>...</answer> block, stripped; None when there is none."""
    found = _ANSWER_RE.findall(completion)
    return found[-1].strip() if found else None


def parse_number(text: str | None) -> float | None:
    """The last number in `text` ("1,234", "$5.", "-3.5" ...) as a float; None if none."""
    found = _NUMBER_RE.findall(text or "")
    return float(found[-1].replace(",", "")) if found else None


# A plain-number answer: one number, with the decoration word problems put around it (currency,
# percent, thousands commas, a trailing unit word such as "dollars" or "cm").
_PLAIN_NUMBER = re.compile(
    r"\s*(?:\\?\$)?\s*(-?(?:\d[\d,]*(?:\.\d+)?|\.\d+))\s*(?:\\?%)?\s*(?:[A-Za-z]+\.?\s*)*")


def plain_number(text: str | None) -> float | None:
    """The value of an answer that is one plain number ("1,234", "$18", "50%", "5 cm"); None for
    anything else, which is compared as mathematics (rlexp.data.rewards.same_answer)."""
    m = _PLAIN_NUMBER.fullmatch(text) if text is not None else None
    return float(m.group(1).replace(",", "")) if m is not None else None


def canonical_number(value: float) -> str:
    """12.0 -> '12', 0.5 -> '0.5': how reference answers are written."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def gsm8k_final_answer(solution: str) -> str | None:
    """GSM8K solutions end in '#### N'; returns N canonicalized, None when absent/unparsable."""
    if "####" not in solution:
        return None
    value = parse_number(solution.rsplit("####", 1)[1])
    return None if value is None else canonical_number(value)


def gsm8k_reasoning(solution: str) -> str:
    """The worked solution before '####', with GSM8K's <<calc>> annotations removed."""
    return re.sub(r"<<[^>]*>>", "", solution.rsplit("####", 1)[0]).strip()


_NUMBER_ONLY = re.compile(r"\s*-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)\s*")


def boxed_answer(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in LaTeX, braces balanced; None if none."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i:j - 1].strip() if depth == 0 else None


def regex_answer(text: str, pattern: str) -> str | None:
    """First group (or the whole match) of the LAST match of `pattern`; None if none."""
    matches = list(re.finditer(pattern, text, re.DOTALL))
    if not matches:
        return None
    m = matches[-1]
    return (m.group(1) if m.groups() else m.group(0)).strip()


def canonical_answer(text: str) -> str:
    """A plain number is written canonically ('1,234.0' -> '1234'); anything else is kept."""
    if _NUMBER_ONLY.fullmatch(text):  # then parse_number finds that number
        return canonical_number(parse_number(text))
    return text.strip()
