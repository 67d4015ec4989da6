"""Prompt templates of the judging study: loading, rendering, the persona prefix and label parsing."""

from __future__ import annotations

import re
from pathlib import Path

from stressprobe.errors import StressprobeError
from stressprobe.persona.data import GRADES

PLACEHOLDER = re.compile(r"\{(query|passage)\}")
PERSONA_PREFIX = "You are acting as {persona}."
# The placeholders each template must have: the judge reads query and text, the summarizer the passage.
JUDGE_PLACEHOLDERS = ("query", "passage")
SUMMARY_PLACEHOLDERS = ("passage",)
LABELS = tuple(str(grade) for grade in GRADES)  # the grades as the judge writes them

# Markdown emphasis and heading marks around the answer ("**Final score:** 2", "## Final Score: `2`").
_MARKUP = re.compile(r"[*_`#]")
# "final score" then an optional "is"/"of" and a separator (":", "=", "-"), then the grade. A number that
# goes on ("10", "2.5") or starts a range ("0-3", "0 to 3": the scale echoed back) is not a grade;
# "2/3" reads as 2 (out of 3).
_FINAL_SCORE = re.compile(
    r"final\s*score\s*(?:\(O\)\s*)?(?:is\s*|of\s*)?[:=\-]?\s*"
    r"(\d+(?:\.\d+)?)(?!\d|\.\d|\s*(?:-|–|to)\s*\d)",
    re.IGNORECASE,
)
# An answer that is only the grade ("2", "2."), or whose first line is only the grade (score, then reasons).
_LONE_GRADE = re.compile(r"\s*(\d)\s*\.?\s*")
_FIRST_LINE_GRADE = re.compile(r"\s*(\d)[ \t]*\n")


def load_template(path: str | Path, required: tuple[str, ...]) -> str:
    """Read a prompt template and check that it has every `{placeholder}` in `required`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StressprobeError(
            f"{path}: prompt template not found; fix the template path in the config"
        ) from None
    except UnicodeDecodeError:
        raise StressprobeError(f"{path}: not valid UTF-8; re-encode the template as UTF-8") from None
    present = set(PLACEHOLDER.findall(text))
    missing = [name for name in required if name not in present]
    if missing:
        names = ", ".join("{" + name + "}" for name in missing)
        raise StressprobeError(
            f"{path}: the template lacks the placeholder(s) {names}; add them where the text goes"
        )
    return text


def render(template: str, **values: str) -> str:
    """Fill `{query}` and `{passage}` in one pass.

    Only these two placeholders are replaced, so other braces in a user's template survive, and a passage
    that itself contains "{query}" is not filled a second time.
    """
    return PLACEHOLDER.sub(lambda match: values.get(match.group(1), match.group(0)), template)


def persona_phrase(persona: str) -> str:
    """The persona as it reads after "You are acting as": a leading article lowercased, no final period."""
    text = persona.strip().rstrip(".").strip()
    first, _, rest = text.partition(" ")
    if first in ("A", "An", "The") and rest:
        text = f"{first.lower()} {rest}"
    return text


def judge_prompt(template: str, query: str, passage: str, persona: str | None = None) -> str:
    """The judge's user message: the template filled in, prefixed by the persona sentence when there is one.

    Nothing else changes between conditions, so any difference in labels comes from the persona alone.
    """
    prompt = render(template, query=query, passage=passage)
    if persona is None:
        return prompt
    return PERSONA_PREFIX.format(persona=persona_phrase(persona)) + "\n" + prompt


def parse_label(text: str) -> int | None:
    """The 0-3 grade in a judge's answer, or None when there is none we can trust.

    Accepted: the required `##final score: 2` and its common variants: any case and spacing, markdown
    (`**Final Score:** 2`, `## final score: **2**`), `final score = 2`, `final score is 2`,
    `Final score (O): 2`, `Final score - 2`, an answer that is nothing but the grade (`2`, `**2**`, `2.`)
    and one whose first line is only the grade (`2` then reasons on the next lines). Several "final
    score" statements that disagree, a grade outside 0-3 (`4`, `10`, `2.5`), the scale echoed back
    (`final score of 0-3`, `0 = the passage has nothing...`), a numbered list (`1. The passage...`) or a
    digit inside other text (a bare `score: 2` may be an M/T aspect score) return None, never 0.
    """
    plain = _MARKUP.sub("", text)
    grades = {match.group(1) for match in _FINAL_SCORE.finditer(plain)}
    if not grades:
        lone = _LONE_GRADE.fullmatch(plain) or _FIRST_LINE_GRADE.match(plain)
        grades = {lone.group(1)} if lone else set()
    if len(grades) != 1:
        return None
    (grade,) = grades
    return int(grade) if grade in LABELS else None
