"""Prompt templates read from a published Python file without executing it (the CDV authors' release keeps
its prompts in `utils/prompt.py`), and the prompt set the CDV jobs ask with: the project's own prompts
(stressprobe.cdv.prompts, the offline default) or those templates.

A template is a module-level string constant or f-string (`NAME = "..."`, `NAME = f"..."`), or a function
whose body returns one (`def name(...): return f"..."`), found by name with `ast`. An f-string's fields
must be plain names; they become `str.format` fields, and a constant's own `{field}`s are kept. Each role
allows the fields of ROLE_FIELDS (named as the authors' code names its arguments); any other field is a
one-line error naming the config key. A filled template is sent as the user message, without a system
message.
"""

from __future__ import annotations

import ast
import json
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from stressprobe.cdv import prompts
from stressprobe.cdv.prompts import POSITIONS, clean_context, distraction_side, parse_option, with_context
from stressprobe.errors import StressprobeError

Messages = tuple[tuple[str, str], ...]

# role -> the fields its template may use, named as the authors' utils/prompt.py names its parameters:
# question (the question asked, with any added context), ori_question (the original question), choices
# (the Python list of the options' texts, as the authors pass it), ground_truth (the correct option's
# text), wrong_answer (the option the distraction aims at), answer (a model's answer to read).
ROLE_FIELDS = {
    "distraction": {"question", "ori_question", "choices", "ground_truth", "wrong_answer"},
    "semantic": {"question", "ori_question", "choices", "ground_truth"},
    "answer": {"question", "choices"},
    "answer_focus": {"question", "choices"},
    "extract": {"question", "choices", "answer"},
    "elaborated": {"question", "choices"},
    "prompt_only": {"question", "ori_question", "choices", "ground_truth", "wrong_answer"},
}
# The authors' reply formats: "Generated Distraction: <sentence>", {"response": "Yes"|"No"} (Yes: the
# answer is unchanged, keep), {"final_answer": <an option's text>}, "New question: <question>".
_DISTRACTION = re.compile(r"generated distraction\s*:\s*", re.IGNORECASE)
_NEW_QUESTION = re.compile(r"new question\s*:\s*", re.IGNORECASE)


def last_json_value(text: str, key: str):
    """`key` of the last JSON object in `text` that has it (a reply may reason before its JSON); None."""
    decoder = json.JSONDecoder()
    starts = [i for i, ch in enumerate(text or "") if ch == "{"]
    for start in reversed(starts):
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict) and key in value:
            return value[key]
    return None


# Roles every template file must name; Prompt-only defaults to the distraction template (the paper's
# baseline applies the perturbation prompt once) and extraction is needed only when answers are extracted.
REQUIRED = ("distraction", "semantic", "answer", "answer_focus", "elaborated")


def _fstring_template(node: ast.JoinedStr, where: str) -> str:
    parts = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(str(value.value).replace("{", "{{").replace("}", "}}"))
        elif isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
            if value.conversion != -1 or value.format_spec is not None:
                raise StressprobeError(f"{where}: a field with a conversion or format spec is not supported")
            parts.append("{" + value.value.id + "}")
        else:
            raise StressprobeError(
                f"{where}: the f-string field {ast.unparse(getattr(value, 'value', value))!r} is not a plain "
                "name; it cannot be filled"
            )
    return "".join(parts)


def _string_of(node: ast.AST, where: str) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return _fstring_template(node, where)
    return None


def templates_in(source: str, filename: str) -> dict[str, str]:
    """name -> template of every module-level string constant or f-string and every function that returns
    one (its last `return` of a string), as `str.format` templates. The file is parsed, never run."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        raise StressprobeError(f"{filename}:{exc.lineno}: not valid Python ({exc.msg})") from None
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            text = _string_of(node.value, f"{filename}:{node.lineno}")
            if text is not None:
                found[node.targets[0].id] = text
        elif isinstance(node, ast.FunctionDef):
            returns = [n for n in ast.walk(node) if isinstance(n, ast.Return) and n.value is not None]
            texts = [_string_of(r.value, f"{filename}:{r.lineno}") for r in returns]
            texts = [t for t in texts if t is not None]
            if texts:
                found[node.name] = texts[-1]
    return found


def template_fields(template: str) -> set[str]:
    return {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}


def template_inventory(path: str | Path) -> list[dict[str, object]]:
    """Every template a file holds, for choosing `cdv.prompts.templates`: its name, fields, length and the
    roles whose fields allow it (the texts themselves stay in the fetched file)."""
    path = Path(path)
    found = templates_in(path.read_text(encoding="utf-8"), str(path))
    rows = []
    for name, template in sorted(found.items()):
        fields = template_fields(template)
        roles = sorted(role for role, allowed in ROLE_FIELDS.items() if fields <= allowed)
        rows.append({"name": name, "fields": sorted(fields), "chars": len(template), "roles": roles})
    return rows


def read_templates(path: str | Path, names: Mapping[str, str | None], config_key: str) -> dict[str, str]:
    """role -> template for each role `names` gives a name, checked against ROLE_FIELDS; a missing name or
    a field the role does not have is a one-line error naming `{config_key}.<role>`."""
    path = Path(path)
    found = templates_in(path.read_text(encoding="utf-8"), str(path))
    templates = {}
    for role, name in names.items():
        if not name:
            continue
        key = f"config key '{config_key}.{role}'"
        if name not in found:
            raise StressprobeError(
                f"{key}: {path} has no string constant or f-string named {name!r} "
                f"(it has: {', '.join(sorted(found)) or 'none'}); fix the name"
            )
        extra = template_fields(found[name]) - ROLE_FIELDS[role]
        if extra:
            raise StressprobeError(
                f"{key}: template {name!r} uses {', '.join(sorted(extra))}, which the {role} role does not "
                f"have ({', '.join(sorted(ROLE_FIELDS[role]))})"
            )
        templates[role] = found[name]
    missing = [role for role in REQUIRED if role not in templates]
    if missing:
        raise StressprobeError(f"config key '{config_key}.{missing[0]}': name the template of this role")
    templates.setdefault("prompt_only", templates["distraction"])
    return templates


class _Placement:
    """Where a prompt set's distractions go (`position`: config cdv.prompts.distraction_position)."""

    position: str

    def perturbed(self, contexts: list[str], original: str, seed: int) -> tuple[str, list[str]]:
        """The question `contexts` make of `original`, and the side of each (prompts.distraction_side)."""
        sides = [distraction_side(self.position, seed, original, context) for context in contexts]
        return with_context(contexts, original, sides), sides


@dataclass(frozen=True)
class OwnPrompts(_Placement):
    """The project's own prompts (stressprobe.cdv.prompts): system and user message, no extraction call;
    `distraction`: how much the proxy writes (prompts.DISTRACTION_LENGTHS)."""

    distraction: str = "background"
    position: str = "before"
    extracts = False

    def victim(
        self, question: str, choices: list[str], mitigation: bool = False, prefill: str | None = None
    ) -> Messages:
        return prompts.victim_messages(question, choices, mitigation, prefill)

    def proxy(
        self, question: str, choices: list[str], answer_index: int, target: int, original: str
    ) -> Messages:
        return prompts.proxy_messages(question, choices, answer_index, target, self.distraction)

    def semantic(self, original: str, perturbed: str, choices: list[str], answer_index: int) -> Messages:
        return prompts.semantic_messages(original, perturbed, choices, answer_index)

    def elaborated(self, question: str, choices: list[str]) -> Messages:
        return prompts.elaborated_messages(question, choices)

    def prompt_only(self, question: str, choices: list[str], answer_index: int, target: int) -> Messages:
        return prompts.prompt_only_messages(question, choices)

    # Reading the replies: the verdict of the semantic check that keeps a child ("does the context change
    # the answer?" -- no), an extraction's option, a baseline's question.
    keep_verdict = "no"

    def verdict(self, text: str) -> str | None:
        return prompts.parse_yes_no(text)

    def context(self, text: str) -> str | None:
        return clean_context(text)

    def option(self, text: str, choices: list[str]) -> int | None:
        return parse_option(text, len(choices))

    def rewritten(self, kind: str, text: str, original: str, seed: int = 0) -> str | None:
        """The question a baseline reply makes (kind: elaborated, prompt_only, or distraction when the
        search's prompt makes it): the elaborated question itself, else the context placed as the search
        places it."""
        context = clean_context(text)
        if context is None or kind == "elaborated":
            return context
        return self.perturbed([context], original, seed)[0]


@dataclass(frozen=True)
class FilePrompts(_Placement):
    """Templates read by read_templates; `extracts`: every answer is read by a second call (template
    `extract`) instead of from its 'Answer: X' line."""

    templates: Mapping[str, str]
    extracts: bool = False
    position: str = "before"
    system: str | None = None  # a system turn before every request (the authors' utils/tools.py:168)

    def _user(self, role: str, prefill: str | None = None, **values: str) -> Messages:
        fields = {k: v for k, v in values.items() if k in template_fields(self.templates[role])}
        messages: Messages = (("user", self.templates[role].format(**fields)),)
        if self.system is not None:
            messages = (("system", self.system), *messages)
        return messages + ((("assistant", prefill),) if prefill is not None else ())

    def victim(
        self, question: str, choices: list[str], mitigation: bool = False, prefill: str | None = None
    ) -> Messages:
        role = "answer_focus" if mitigation else "answer"
        return self._user(role, prefill, question=question, choices=_options(choices))

    def proxy(
        self, question: str, choices: list[str], answer_index: int, target: int, original: str
    ) -> Messages:
        return self._user("distraction", **_steer(question, choices, answer_index, target, original))

    def semantic(self, original: str, perturbed: str, choices: list[str], answer_index: int) -> Messages:
        return self._user(
            "semantic",
            question=perturbed,
            ori_question=original,
            choices=_options(choices),
            ground_truth=choices[answer_index],
        )

    def elaborated(self, question: str, choices: list[str]) -> Messages:
        return self._user("elaborated", question=question, choices=_options(choices))

    def prompt_only(self, question: str, choices: list[str], answer_index: int, target: int) -> Messages:
        return self._user("prompt_only", **_steer(question, choices, answer_index, target, question))

    def extract(self, question: str, choices: list[str], response: str) -> Messages:
        return self._user("extract", question=question, choices=_options(choices), answer=response)

    # The authors' check asks whether the distraction leaves the answer unchanged: "Yes" keeps the child.
    keep_verdict = "yes"

    def verdict(self, text: str) -> str | None:
        """'yes' or 'no' from the reply's JSON `response` (the authors' check reasons step by step first);
        None without one."""
        value = last_json_value(text, "response")
        word = str(value).strip().strip(".").casefold() if value is not None else None
        return word if word in ("yes", "no") else None

    def context(self, text: str) -> str | None:
        """The text after "Generated Distraction:" (the authors' reply); None without that prefix."""
        found = _DISTRACTION.search(text or "")
        return clean_context(text[found.end() :]) if found else None

    def option(self, text: str, choices: list[str]) -> int | None:
        """The option whose text is the reply's JSON `final_answer` (case and surrounding space aside);
        None otherwise (the authors count such a reply as wrong)."""
        value = last_json_value(text, "final_answer")
        texts = [choice.strip().casefold() for choice in choices]
        key = str(value).strip().casefold() if value is not None else None
        return texts.index(key) if key in texts and texts.count(key) == 1 else None

    def rewritten(self, kind: str, text: str, original: str, seed: int = 0) -> str | None:
        """A baseline's question: after "New question:" (the authors' Elaborated and Prompt-only replies);
        a reply of the distraction template (kind `distraction`) is placed as the search places it."""
        if kind == "distraction":
            context = self.context(text)
            return None if context is None else self.perturbed([context], original, seed)[0]
        found = _NEW_QUESTION.search(text or "")
        return (text[found.end() :].strip().strip('"').strip() or None) if found else None


def _options(choices: list[str]) -> str:
    # The authors fill {choices} with the Python list of the options' texts.
    return str(list(choices))


def _steer(
    question: str, choices: list[str], answer_index: int, target: int, original: str
) -> dict[str, str]:
    return {
        "question": question,
        "ori_question": original,
        "choices": _options(choices),
        "ground_truth": choices[answer_index],
        "wrong_answer": choices[target],
    }


OWN = OwnPrompts()


def prompt_set(
    path: str | None,
    names: Mapping[str, str | None],
    extracts: bool,
    config_key: str,
    distraction: str = "background",
    position: str = "before",
    system: str | None = None,
):
    """The prompts a job asks with: the project's own when `path` is None (the proxy writing `distraction`),
    else the file's templates (each request after the `system` turn, when given); either puts its
    distractions at `position`."""
    prompts_key = config_key.rsplit(".", 1)[0]
    if position not in POSITIONS:
        raise StressprobeError(
            f"config key '{prompts_key}.distraction_position': must be one of {', '.join(POSITIONS)} "
            f"(got {position!r})"
        )
    if path is None:
        for key, value in (("extract_answers", extracts), ("system", system)):
            if value:
                raise StressprobeError(f"config key '{prompts_key}.{key}': needs a template file (`file`)")
        return OwnPrompts(distraction, position)
    templates = read_templates(path, names, config_key)
    if extracts and "extract" not in templates:
        raise StressprobeError(f"config key '{config_key}.extract': name the template that reads an answer")
    return FilePrompts(templates, extracts, position, system)
