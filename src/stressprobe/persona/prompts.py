"""Prompt templates of the judging study: loading, rendering, the persona prefix and label parsing."""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from pathlib import Path

import yaml

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


# The summary template released with the prior summary-based judging study (Mohtadi et al., 2026;
# d-lab/ecir26-summarisation-llm-relevance-judgement) marks the document as {DOC}, and its code puts the
# document's text there (every occurrence, nothing else replaced). A summary template may use it instead
# of {passage}.
RELEASED_DOC = "{DOC}"


def load_summary_template(path: str | Path) -> str:
    """A summary template: the project's format (`{passage}`, optionally `{query}`) or the released one
    (`{DOC}`), returned in the project's format so that `render` fills it as the released code does."""
    path = Path(path)
    text = _read_text(path)
    if RELEASED_DOC not in text:
        _check_placeholders(text, SUMMARY_PLACEHOLDERS, path)
        return text
    if PLACEHOLDER.search(text):
        raise StressprobeError(
            f"{path}: the template has both {RELEASED_DOC} and {{query}}/{{passage}}; keep one placeholder style"
        )
    return text.replace(RELEASED_DOC, "{passage}")


def load_template(path: str | Path, required: tuple[str, ...]) -> str:
    """Read a prompt template and check that it has every `{placeholder}` in `required`."""
    path = Path(path)
    text = _read_text(path)
    _check_placeholders(text, required, path)
    return text


# How a fixed persona reaches the judge: the "You are acting as ..." sentence before the user message
# (prefix), or the same sentence as the system message (system).
DELIVERIES = ("prefix", "system")
# A YAML template (UMBRELA's format) names its fields as Python format fields; they map to the project's
# placeholders. `examples` holds few-shot examples, which this study never uses (zero-shot): it is empty.
YAML_FIELDS = {"query": "{query}", "passage": "{passage}", "examples": ""}
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class JudgeTemplate:
    """A judge prompt: the user message template and an optional system message (None: none is sent)."""

    user: str
    system: str | None = None

    def with_system(self, override: str | None) -> JudgeTemplate:
        """The template with `judging.system_message` applied: None keeps its own, "" sends none."""
        if override is None:
            return self
        return JudgeTemplate(self.user, override or None)


def load_judge_template(path: str | Path, required: tuple[str, ...] = JUDGE_PLACEHOLDERS) -> JudgeTemplate:
    """A judge template from a text file (the user message) or a YAML file with `system_message` and
    `prefix_user` (UMBRELA's template format); an empty system message means none is sent."""
    path = Path(path)
    if path.suffix.lower() not in YAML_SUFFIXES:
        return JudgeTemplate(load_template(path, required))
    text = _read_text(path)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f"{path}:{line + 1}" if line is not None else str(path)
        raise StressprobeError(f"{where}: not valid YAML; fix the template file") from None
    if not isinstance(data, dict) or not isinstance(data.get("prefix_user"), str):
        raise StressprobeError(
            f"{path}: a YAML template needs a text `prefix_user` (and optionally `system_message`)"
        )
    system = data.get("system_message") or ""
    if not isinstance(system, str):
        raise StressprobeError(f"{path}: `system_message` must be text; fix the template file")
    user = _format_fields_to_placeholders(data["prefix_user"], path)
    _check_placeholders(user, required, path)
    return JudgeTemplate(user=user, system=system or None)


def _format_fields_to_placeholders(text: str, path: Path) -> str:
    """A Python format string (`{query}`, `{{` for a brace) as a template of the project's placeholders."""
    parts = []
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise StressprobeError(f"{path}: `prefix_user` is not a valid format string ({exc})") from None
    for literal, field, _spec, _conversion in parsed:
        parts.append(literal)
        if field is None:
            continue
        if field not in YAML_FIELDS:
            raise StressprobeError(
                f"{path}: unknown field {{{field}}} in `prefix_user`; use {{query}} and {{passage}}"
            )
        parts.append(YAML_FIELDS[field])
    return "".join(parts)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise StressprobeError(
            f"{path}: prompt template not found; fix the template path in the config"
        ) from None
    except UnicodeDecodeError:
        raise StressprobeError(f"{path}: not valid UTF-8; re-encode the template as UTF-8") from None


def _check_placeholders(text: str, required: tuple[str, ...], path: Path) -> None:
    present = set(PLACEHOLDER.findall(text))
    missing = [name for name in required if name not in present]
    if missing:
        names = ", ".join("{" + name + "}" for name in missing)
        raise StressprobeError(
            f"{path}: the template lacks the placeholder(s) {names}; add them where the text goes"
        )


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
    return persona_sentence(persona) + "\n" + prompt


def persona_sentence(persona: str) -> str:
    """ "You are acting as {persona}." for a persona text."""
    return PERSONA_PREFIX.format(persona=persona_phrase(persona))


def judge_messages(
    template: JudgeTemplate, query: str, passage: str, persona: str | None = None, delivery: str = "prefix"
) -> tuple[str | None, str]:
    """(system message or None, user message) of one judge prompt.

    `delivery` "prefix" puts the persona sentence before the user message; "system" makes it the system
    message, followed by the template's own system message when it has one.
    """
    if delivery not in DELIVERIES:
        raise StressprobeError(f"unknown persona delivery {delivery!r}; use one of {', '.join(DELIVERIES)}")
    if persona is None or delivery == "prefix":
        return template.system, judge_prompt(template.user, query, passage, persona)
    system = persona_sentence(persona)
    if template.system:
        system += "\n" + template.system
    return system, render(template.user, query=query, passage=passage)


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
    return _read_strict(text)[0]


def _read_strict(text: str) -> tuple[int | None, str | None]:
    plain = _MARKUP.sub("", text)
    grades, rule = {match.group(1) for match in _FINAL_SCORE.finditer(plain)}, "final_score"
    if not grades:
        lone = _LONE_GRADE.fullmatch(plain) or _FIRST_LINE_GRADE.match(plain)
        grades, rule = ({lone.group(1)} if lone else set()), "lone_grade"
    if len(grades) != 1:
        return None, None
    (grade,) = grades
    return (int(grade), rule) if grade in LABELS else (None, None)


# How the prior study's released judging code finds a grade (d-lab/ecir26-summarisation-llm-relevance-
# judgement at 8ac6cfa, code/gpt_summarized_relavance_judgement.py): the first "final score:" followed by
# a grade 0-3, in any case and spacing; failing that, the first 0-3 that stands alone as a word anywhere.
_AUTHORS_FINAL_SCORE = re.compile(r"final\s*score\s*:\s*([0-3])", re.IGNORECASE)
_AUTHORS_ANY_GRADE = re.compile(r"\b([0-3])\b")
#: `judging.answer_reader`: the project's strict reading, or the authors' released one.
READERS = ("strict", "authors")
#: What `read_label` reports as the rule that found a grade (None: no grade found).
RULES = ("final_score", "lone_grade", "first_grade")


def read_label(text: str, reader: str = "strict") -> tuple[int | None, str | None]:
    """(grade, rule that found it) of a judge's answer, or (None, None) when the reader finds no grade.

    `strict` is `parse_label` (rules `final_score`, `lone_grade`); `authors` reads as the prior study's
    released code does (rules `final_score`, then `first_grade`: the first standalone 0-3 anywhere, so a
    numbered list or an echoed scale can give a grade there).
    """
    if reader == "strict":
        return _read_strict(text)
    if reader != "authors":
        raise StressprobeError(
            f"config key 'judging.answer_reader': {reader!r}; use one of {', '.join(READERS)}"
        )
    for pattern, rule in ((_AUTHORS_FINAL_SCORE, "final_score"), (_AUTHORS_ANY_GRADE, "first_grade")):
        match = pattern.search(text)
        if match:
            return int(match.group(1)), rule
    return None, None
