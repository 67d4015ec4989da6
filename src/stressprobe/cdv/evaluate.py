"""Evaluating models on original, perturbed, baseline and mitigated questions (zero-shot CoT, near-greedy:
the paper's temperature 0.001, or a model's own where its API refuses that)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from stressprobe.cdv.answers import read_answers
from stressprobe.cdv.prompt_file import OWN
from stressprobe.cdv.prompts import letter
from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, Response
from stressprobe.scoring import UNANSWERED, answered, is_unanswered


def eval_items(
    questions: list[dict[str, Any]],
    perturbed: list[dict[str, Any]],
    baselines: list[dict[str, Any]],
    originals: bool = True,
) -> list[dict[str, Any]]:
    """What to ask: every original question (unless `originals` is False: a cell whose originals are read
    from its dataset's shared file), every perturbed question, every usable baseline rewrite."""
    items = [
        {**_mc(q), "qid": q["qid"], "node_id": None, "condition": "original"} for q in questions if originals
    ]
    items += [
        {**_mc(p), "qid": p["qid"], "node_id": p["node_id"], "condition": "perturbed"} for p in perturbed
    ]
    by_qid = {q["qid"]: q for q in questions}
    for b in baselines:
        if b["status"] == "ok":
            q = by_qid[b["qid"]]
            items.append(
                {
                    **_mc(q),
                    "question": b["question"],
                    "qid": b["qid"],
                    "node_id": None,
                    "condition": b["kind"],
                }
            )
    return items


def union_questions(samples: list[list[dict[str, Any]]], names: list[str]) -> list[dict[str, Any]]:
    """Every question of `samples` once (by qid, in order of first appearance): the originals that the
    cells of a dataset ask (nested samples: the largest one). A qid with two different texts is an error."""
    union: dict[str, dict[str, Any]] = {}
    for sample, name in zip(samples, names, strict=True):
        for q in sample:
            seen = union.setdefault(q["qid"], q)
            if _mc(seen) != _mc(q):
                raise StressprobeError(
                    f"{name}: question {q['qid']} differs from the same qid in another sample of its "
                    "dataset; prepare the dataset's samples again"
                )
    return list(union.values())


def cell_originals(
    shared: list[dict[str, Any]], questions: list[dict[str, Any]], path: str
) -> list[dict[str, Any]]:
    """A cell's original-question records, picked from its dataset's shared originals file (`path`) in the
    cell's question order: the records the cell would have made by asking them itself."""
    by_qid = {r["qid"]: r for r in shared}
    picked = []
    for q in questions:
        record = by_qid.get(q["qid"])
        if record is None or record["question"] != q["question"]:
            raise StressprobeError(
                f"{path}: no record of the original question {q['qid']} as the cell asks it; "
                "remove the file so that rule cdv_eval_originals writes it again"
            )
        picked.append(record)
    return picked


def _mc(record: dict[str, Any]) -> dict[str, Any]:
    return {
        "question": record["question"],
        "choices": record["choices"],
        "answer_index": record["answer_index"],
    }


def evaluate(
    client: Any,
    items: list[dict[str, Any]],
    max_tokens: int,
    seed: int,
    mitigation: bool = False,
    prefill: str | None = None,
    temperature: float = 0.0,
    prompts: Any = OWN,
    extractor: Any = None,
    extract_temperature: float = 0.0,
) -> list[dict[str, Any]]:
    """Ask one model every item once (one batch); unparseable or truncated answers are not correct, and a
    failed call is an `error` record, which no table scores (stressprobe.scoring).

    `prefill` starts each answer (models with `answer_prefill`); `raw` then includes it. An answer without
    a parseable answer line is `truncated` when it used all `max_tokens`, else `unparsed`. With a template
    file that extracts answers, a second call per answer reads it (`extract_raw` records that reply),
    answered by `extractor` (the extraction model's client; None: this model's) at `extract_temperature`."""
    args = (max_tokens, seed, prefill, temperature, prompts, extractor, extract_temperature)
    return evaluate_parts(client, [(items, mitigation)], *args)[0].records


@dataclass(frozen=True)
class Part:
    """One output's share of a joint evaluation: its records, and the responses that answered (`asked`,
    by the evaluated model) and read (`extracted`, by the extractor) them, for its own usage sidecar."""

    records: list[dict[str, Any]]
    asked: list[Response]
    extracted: list[Response]


def evaluate_parts(
    client: Any,
    parts: list[tuple[list[dict[str, Any]], bool]],
    max_tokens: int,
    seed: int,
    prefill: str | None = None,
    temperature: float = 0.0,
    prompts: Any = OWN,
    extractor: Any = None,
    extract_temperature: float = 0.0,
) -> list[Part]:
    """`evaluate` of several (items, mitigation) parts with every part's requests in ONE `generate` call
    (and their extractions in one more), so that an engine that batches (vLLM) sees a whole job at once;
    each part's records are those `evaluate` gives it alone."""
    asked = [(item, mitigation) for items, mitigation in parts for item in items]
    requests = [
        Request(
            messages=prompts.victim(item["question"], item["choices"], mitigation, prefill),
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
        )
        for item, mitigation in asked
    ]
    responses = client.generate(requests) if requests else []
    answered = [i for i, r in enumerate(responses) if not r.error]
    texts = [(asked[i][0]["question"], asked[i][0]["choices"], [responses[i].text]) for i in answered]
    answers, extractions = read_answers(
        extractor or client, prompts, texts, prefill, seed, extract_temperature
    )
    read = {i: (a, x) for i, [a], x in zip(answered, answers, extractions, strict=True)}
    records, extracted = [], []
    for i, ((item, mitigation), response) in enumerate(zip(asked, responses, strict=True)):
        answer, extraction = read.get(i, (None, []))
        extracted.append(extraction)
        records.append(
            {
                "qid": item["qid"],
                "node_id": item["node_id"],
                "condition": item["condition"],
                "mitigation": mitigation,
                "question": item["question"],
                "answer": None if answer is None else letter(answer),
                "correct_option": letter(item["answer_index"]),
                "correct": answer == item["answer_index"],
                "status": _status(response, answer, max_tokens),
                "raw": (prefill or "") + response.text,
                **({"extract_raw": extraction[0].text} if extraction else {}),
            }
        )
    split, start = [], 0
    for items, _ in parts:
        end = start + len(items)
        mine = [r for x in extracted[start:end] for r in x]
        split.append(Part(records[start:end], responses[start:end], mine))
        start = end
    return split


def _status(response: Any, answer: int | None, max_tokens: int) -> str:
    if response.error:
        return "error"
    if answer is not None:
        return "ok"
    return "truncated" if response.completion_tokens >= max_tokens else "unparsed"


def accuracy_by_condition(records: list[dict[str, Any]]) -> dict[str, dict[str, float | int]]:
    """condition -> {n, correct, accuracy, unparsed, truncated, unanswered}.

    A record without an answer (its call failed) is not scored: it is left out of `n` and the accuracy's
    denominator and counted in `unanswered` (stressprobe.scoring). Every answered record counts, an
    unparsed one as wrong: `unparsed` counts the answers without a usable letter (truncated ones
    included), `truncated` the ones cut off at the token limit among them."""
    totals: dict[str, dict[str, int]] = defaultdict(
        lambda: {"n": 0, "correct": 0, "unparsed": 0, "truncated": 0, UNANSWERED: 0}
    )
    for record in records:
        total = totals[record["condition"]]
        if is_unanswered(record):
            total[UNANSWERED] += 1
            continue
        total["n"] += 1
        total["correct"] += int(record["correct"])
        total["unparsed"] += int(record["status"] != "ok")
        total["truncated"] += int(record["status"] == "truncated")
    return {
        c: {**t, "accuracy": t["correct"] / t["n"] if t["n"] else None} for c, t in sorted(totals.items())
    }


def paired_original_accuracy(records: list[dict[str, Any]]) -> float | None:
    """Accuracy on the originals of the questions that have perturbed versions (the Delta's baseline); an
    unanswered original is not scored."""
    perturbed_qids = {r["qid"] for r in records if r["condition"] == "perturbed"}
    originals, _ = answered(r for r in records if r["condition"] == "original" and r["qid"] in perturbed_qids)
    return sum(r["correct"] for r in originals) / len(originals) if originals else None
