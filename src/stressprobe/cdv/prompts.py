"""The project's own prompts of the CDV study and the parsing of their answers (the offline default; a
published template file can replace them, see stressprobe.cdv.prompt_file)."""

from __future__ import annotations

import hashlib
import re
import string

LETTERS = string.ascii_uppercase

VICTIM_SYSTEM = (
    "You answer multiple-choice questions. Think step by step in a few short sentences, "
    "then give your final answer on a last line of the form 'Answer: <letter>'."
)
MITIGATION_INSTRUCTION = (
    "The question may contain background text that is irrelevant to it. Focus on the core question, "
    "ignore distracting details, and answer it on its own merits."
)
PROXY_SYSTEM = (
    "You write short, plausible background text for exam questions. Reply with the background text only."
)
SEMANTIC_SYSTEM = "You check exam questions. Reply with one word: yes or no."
CLASSIFIER_SYSTEM = "You assess exam questions. Reply with one word: yes or no."

# The letter must be a capital: "answer a question" is not an answer.
_ANSWER_LINE = re.compile(r"(?i:answer)\s*(?i:is)?\s*[:\-]?\s*\(?\s*([A-Z])\s*\)?(?![A-Za-z])")
_MARKUP = re.compile(r"[*_`#]")
_LONE_LETTER = re.compile(r"(?<![A-Za-z])([A-Z])(?![A-Za-z])")
_YES_NO = re.compile(r"\b(yes|no)\b", re.IGNORECASE)
# A proxy reply that lists options or states an answer has left its task (it would change the question).
_OFF_FORMAT = re.compile(r"(^|\n)\s*\(?[A-E][.)]\s|answer\s*:", re.IGNORECASE)
_LEAD_LABEL = re.compile(r"^\s*(?:background(?: text)?|context)\s*:\s*", re.IGNORECASE)


def letter(index: int) -> str:
    """The option letter of a choice index (0 -> 'A')."""
    return LETTERS[index]


def format_question(question: str, choices: list[str]) -> str:
    """The question followed by its lettered options, one per line."""
    options = "\n".join(f"{letter(i)}. {choice}" for i, choice in enumerate(choices))
    return f"{question}\n\n{options}"


def victim_messages(
    question: str, choices: list[str], mitigation: bool = False, prefill: str | None = None
) -> tuple[tuple[str, str], ...]:
    """Zero-shot chain-of-thought prompt; `mitigation` adds the focus instruction; `prefill` starts the
    answer (for models that do not keep to the answer line otherwise: they then skip the reasoning)."""
    system = f"{VICTIM_SYSTEM} {MITIGATION_INSTRUCTION}" if mitigation else VICTIM_SYSTEM
    messages = (("system", system), ("user", format_question(question, choices)))
    return messages + ((("assistant", prefill),) if prefill is not None else ())


def parse_answer(text: str, n_choices: int, prefill: str | None = None) -> int | None:
    """The choice index of the reply's last 'Answer: X' (X a valid letter); None when there is none.

    The last occurrence wins because the reasoning may mention options before the final line. A prefilled
    answer is read with its prefill in front, as the model continued it.
    """
    text = (prefill or "") + (text or "")
    matches = [m.group(1).upper() for m in _ANSWER_LINE.finditer(_MARKUP.sub("", text))]
    valid = [LETTERS.index(m) for m in matches if LETTERS.index(m) < n_choices]
    return valid[-1] if valid else None


def parse_option(text: str, n_choices: int) -> int | None:
    """The option an extraction reply names: its 'Answer: X' line, else its only standalone valid letter."""
    answer = parse_answer(text, n_choices)
    if answer is not None:
        return answer
    tokens = {LETTERS.index(t) for t in _LONE_LETTER.findall(_MARKUP.sub("", text or ""))}
    valid = {t for t in tokens if t < n_choices}
    return valid.pop() if len(valid) == 1 else None


# How much the proxy writes: background (two or three sentences, the project's first reading) or one
# distraction sentence (the authors' release).
DISTRACTION_LENGTHS = {"background": "two or three sentences of background text", "sentence": "one sentence"}


def proxy_messages(
    question: str, choices: list[str], answer_index: int, target_index: int, length: str = "background"
) -> tuple[tuple[str, str], ...]:
    """Error-guided proxy prompt: context nudging toward `target_index`, not contradicting the answer."""
    user = (
        f"{format_question(question, choices)}\n\n"
        f"The correct answer is {letter(answer_index)}. Write {DISTRACTION_LENGTHS[length]} "
        "to put before this question. The text must be related to the topic and "
        f"make option {letter(target_index)} ({choices[target_index]}) seem attractive, "
        f"but it must not state or imply that {letter(target_index)} is correct, "
        f"must not contradict that {letter(answer_index)} ({choices[answer_index]}) is correct, "
        "and must not change the question. "
        "Do not repeat the question or the options and do not give an answer."
    )
    return (("system", PROXY_SYSTEM), ("user", user))


def clean_context(text: str) -> str | None:
    """The usable added context from a proxy reply, or None when it is empty or off-format.

    Off-format: the reply lists options or states an answer, either of which would alter the question.
    """
    cleaned = _LEAD_LABEL.sub("", (text or "").strip()).strip().strip('"').strip()
    if not cleaned or _OFF_FORMAT.search(cleaned):
        return None
    return cleaned


def semantic_messages(
    original: str, perturbed: str, choices: list[str], answer_index: int
) -> tuple[tuple[str, str], ...]:
    """S(Q, Q'): does the added context change the correct answer? 'no' keeps the child.

    The options are left out on purpose: small models given lettered options start answering the
    question instead of the check.
    """
    user = (
        f"Original question: {original}\n"
        f"Correct answer: {choices[answer_index]}\n\n"
        f"Rewritten question: {perturbed}\n\n"
        "Does the added text in the rewritten question change its correct answer? Reply yes or no."
    )
    return (("system", SEMANTIC_SYSTEM), ("user", user))


def parse_yes_no(text: str) -> str | None:
    """'yes' or 'no': the reply's first word when it is one of them, else the only one of them it contains.

    None when the reply says neither or both (the caller counts that as a failed check).
    """
    clean = _MARKUP.sub("", text or "").strip().lower()
    first = re.match(r"[a-z]+", clean)
    if first and first.group(0) in ("yes", "no"):
        return first.group(0)
    distinct = {word.lower() for word in _YES_NO.findall(clean)}
    return distinct.pop() if len(distinct) == 1 else None


def classifier_messages(question: str, choices: list[str]) -> tuple[tuple[str, str], ...]:
    """Prompt-based perturbability classifier C(Q): could irrelevant context make a model get this wrong?"""
    user = (
        f"{format_question(question, choices)}\n\n"
        "Could adding plausible but irrelevant background text easily make a language model answer this "
        "question wrongly? Answer yes or no."
    )
    return (("system", CLASSIFIER_SYSTEM), ("user", user))


def elaborated_messages(question: str, choices: list[str]) -> tuple[tuple[str, str], ...]:
    """Elaborated baseline: a longer, semantics-preserving restatement of the question."""
    user = (
        f"{format_question(question, choices)}\n\n"
        "Rewrite only the question (not the options) in a longer, more detailed way that keeps exactly the "
        "same meaning and the same correct answer. Reply with the rewritten question only."
    )
    return (("system", PROXY_SYSTEM), ("user", user))


def prompt_only_messages(question: str, choices: list[str]) -> tuple[tuple[str, str], ...]:
    """Prompt-only baseline: one prompt adds distracting context, without search or feedback."""
    user = (
        f"{format_question(question, choices)}\n\n"
        "Write two or three sentences of related but irrelevant background text to put before this question, "
        "meant to distract a reader, without changing the question or its correct answer. "
        "Do not repeat the question or the options and do not give an answer."
    )
    return (("system", PROXY_SYSTEM), ("user", user))


# Where a distraction goes (config cdv.prompts.distraction_position): before or after the question, or one of
# the two drawn per distraction (the authors' generate_question draws with random.sample).
POSITIONS = ("before", "after", "random")


def distraction_side(position: str, seed: int, original: str, context: str) -> str:
    """`before` or `after` for one distraction of `original`. `random` draws from the seed, the question and
    the distraction's text (a hash, not a random state: a rerun, a resumed job and the response cache see the
    same question for the same distraction, whatever else was drawn before)."""
    if position != "random":
        return position
    digest = hashlib.sha256(f"{seed}\0{original}\0{context}".encode()).digest()
    return "after" if digest[0] & 1 else "before"


def with_context(contexts: list[str], original: str, sides: list[str] | None = None) -> str:
    """A perturbed question: the contexts placed before it in the order they were added, the original question
    verbatim, then those placed after it in the order they were added (`sides`: one per context; default
    all before)."""
    sides = sides or ["before"] * len(contexts)
    before = [c for c, side in zip(contexts, sides, strict=True) if side == "before"]
    after = [c for c, side in zip(contexts, sides, strict=True) if side == "after"]
    return "\n\n".join([*before, original, *after])
