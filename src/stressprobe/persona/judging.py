"""Judge cells of the persona study: summaries, judge requests, judgment records, per-cell counts, qrels."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, Response, label_distribution
from stressprobe.llm.usage import Usage
from stressprobe.persona.data import Qrels
from stressprobe.persona.prompts import (
    DELIVERIES,
    LABELS,
    RULES,
    JudgeTemplate,
    judge_messages,
    read_label,
    render,
)
from stressprobe.scoring import is_unanswered

# The nine judging conditions, `source/role`: the plain prompt, two fixed assessor roles, and three roles
# retrieved per query from each persona pool.
CONDITIONS = (
    "baseline/umbrela",
    "fixed/evidence",
    "fixed/gap",
    "personahub/query",
    "personahub/domain",
    "personahub/orthogonal",
    "uspersona/query",
    "uspersona/domain",
    "uspersona/orthogonal",
)
RETRIEVED_SOURCES = ("personahub", "uspersona")
HUMAN = "human"  # human qrels are evaluated as model `human`, condition `human/human`
HUMAN_CONDITION = f"{HUMAN}/{HUMAN}"
STATUSES = ("ok", "unparsed", "error")
# What the qrels (and the label analysis) make of an answer without a readable grade: leave the pair out
# (the project's default), or grade it 0 as UMBRELA's own code does.
UNPARSED_POLICIES = ("exclude", "zero")


class Client(Protocol):
    """What the judging code needs of `stressprobe.llm`'s client."""

    def generate(self, requests: list[Request]) -> list[Response]: ...


def split_condition(condition: str) -> tuple[str, str]:
    """`"personahub/query"` -> `("personahub", "query")`; an unknown condition is a config error."""
    if condition not in CONDITIONS:
        raise StressprobeError(
            f"unknown judging condition '{condition}'; use one of: {', '.join(CONDITIONS)}"
        )
    source, role = condition.split("/")
    return source, role


def is_retrieved(source: str) -> bool:
    """Whether a condition's persona differs per query (read from the dataset's persona table)."""
    return source in RETRIEVED_SOURCES


def retrieved_personas(records: Iterable[Mapping[str, Any]], role: str, path: str) -> dict[str, str]:
    """qid -> persona text for one role of a dataset's persona table (`personas/{source}.jsonl`)."""
    personas = {}
    for record in records:
        if record.get("role") == role:
            if not isinstance(record.get("persona"), str) or not record["persona"].strip():
                raise StressprobeError(
                    f"{path}: qid {record.get('qid')} role {role} has no persona text; rebuild the table"
                )
            personas[str(record["qid"])] = record["persona"]
    return personas


def cell_personas(
    qids: Iterable[str],
    source: str,
    role: str,
    fixed: Mapping[str, str],
    table: Mapping[str, str] | None,
    path: str,
) -> dict[str, str | None]:
    """The persona of a condition for each query: none (baseline), the fixed text, or the retrieved one."""
    if source == "baseline":
        return dict.fromkeys(qids)
    if source == "fixed":
        if role not in fixed:
            raise StressprobeError(
                f"config key 'personas.fixed.{role}' is missing; add the text of that persona"
            )
        return dict.fromkeys(qids, fixed[role])
    assert table is not None, "retrieved conditions need their persona table"
    missing = sorted(set(qids) - set(table))
    if missing:
        raise StressprobeError(
            f"{path}: no {role} persona for qid(s) {', '.join(missing[:5])}; rebuild the persona table"
        )
    return {qid: table[qid] for qid in qids}


def condition_personas(
    qids: Iterable[str],
    source: str,
    role: str,
    fixed: Mapping[str, str],
    records: Iterable[Mapping[str, Any]] | None,
    path: str,
) -> dict[str, str | None]:
    """qid -> persona of one condition, from the source's persona table `records` (read from `path`).

    The judge job and the cost estimate both build a cell's personas here, so they cannot drift apart.
    `records` is only needed (and only read) for retrieved sources.
    """
    table = None
    if is_retrieved(source):
        assert records is not None, "retrieved conditions need their persona table"
        table = retrieved_personas(records, role, path)
    return cell_personas(qids, source, role, fixed, table, path)


def check_qids(pairs: Iterable[Mapping[str, Any]], topics: Mapping[str, str], what: str) -> None:
    """Every pair's query must have a text in the topics."""
    missing = sorted({str(pair["qid"]) for pair in pairs} - set(topics))
    if missing:
        raise StressprobeError(
            f"qid(s) {', '.join(missing[:5])} of the {what} are not in the topics; rebuild the dataset's data"
        )


# ---- summaries ----


def summary_requests(
    pairs: Sequence[Mapping[str, Any]], topics: Mapping[str, str], template: str, max_tokens: int
) -> list[Request]:
    """One greedy request per pair.

    With the default template (no `{query}`) a passage judged for several queries gives identical
    requests, so it is summarized by one cached call; a template with `{query}` makes query-focused summaries.
    """
    return [
        Request.chat(
            user=render(template, query=topics[pair["qid"]], passage=pair["passage"]), max_tokens=max_tokens
        )
        for pair in pairs
    ]


def summary_record(pair: Mapping[str, Any], response: Response) -> dict[str, Any]:
    """`{"qid","docid","summary","status"}`; a failed or empty summary is `error` with summary null."""
    text = response.text.strip()
    if response.error is not None or not text:
        return {"qid": pair["qid"], "docid": pair["docid"], "summary": None, "status": "error",
                "error": response.error or "empty summary"}  # fmt: skip
    return {"qid": pair["qid"], "docid": pair["docid"], "summary": text, "status": "ok", "error": None}


def passage_record(pair: Mapping[str, Any]) -> dict[str, Any]:
    """The record when summarization is off for a dataset: the judge reads the passage itself."""
    return {
        "qid": pair["qid"],
        "docid": pair["docid"],
        "summary": pair["passage"],
        "status": "passage",
        "error": None,
    }


def summarize_pairs(
    client: Client | None,
    pairs: Sequence[Mapping[str, Any]],
    topics: Mapping[str, str],
    template: str,
    max_tokens: int,
) -> list[dict[str, Any]]:
    """Summaries of every pair, or the passages themselves when `client` is None (summarization off)."""
    if client is None:
        return [passage_record(pair) for pair in pairs]
    check_qids(pairs, topics, "pairs")
    responses = client.generate(summary_requests(pairs, topics, template, max_tokens))
    return [summary_record(pair, response) for pair, response in zip(pairs, responses, strict=True)]


# ---- judge cells ----


def judgeable(summaries: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The summaries a judge is asked about: all but failed ones (those get an `error` record, no call)."""
    return [s for s in summaries if s["status"] != "error"]


def persona_delivery(source: str, role: str, deliveries: Mapping[str, str]) -> str:
    """How a condition's persona reaches the judge: `personas.delivery.{role}` for a fixed persona, the
    "You are acting as" prefix for the retrieved ones (and irrelevant for the baseline)."""
    delivery = deliveries.get(role, "prefix") if source == "fixed" else "prefix"
    if delivery not in DELIVERIES:
        raise StressprobeError(
            f"config key 'personas.delivery.{role}': {delivery!r}; use one of {', '.join(DELIVERIES)}"
        )
    return delivery


@dataclass(frozen=True)
class JudgeSettings:
    """How every pair of a judge cell is asked: the template (user message text), the answer's token
    limit, top-k log-probabilities, the start of the answer for models with `answer_prefill` (else None),
    the template's system message (None: none is sent), how the persona is delivered, and how the answers
    are read (`judging.answer_reader`; it changes no request)."""

    template: str
    max_tokens: int
    logprobs: int = 0
    prefill: str | None = None
    system: str | None = None
    delivery: str = "prefix"
    reader: str = "strict"

    def request(self, query: str, text: str, persona: str | None) -> Request:
        """The request of one pair under one condition: greedy (temperature 0)."""
        system, user = judge_messages(
            JudgeTemplate(self.template, self.system), query, text, persona, self.delivery
        )
        return Request.chat(
            system=system,
            user=user,
            prefill=self.prefill,
            max_tokens=self.max_tokens,
            temperature=0.0,
            logprobs=self.logprobs,
        )

    def cell_requests(
        self,
        texts: Sequence[Mapping[str, Any]],
        topics: Mapping[str, str],
        personas: Mapping[str, str | None],
    ) -> list[Request]:
        """The requests of one judge cell, one per judged text (a summary or a passage)."""
        return [self.request(topics[t["qid"]], t["summary"], personas[t["qid"]]) for t in texts]


def condition_settings(
    template: JudgeTemplate,
    condition: str,
    max_tokens: int,
    logprobs: int,
    prefill: str | None,
    deliveries: Mapping[str, str],
    reader: str = "strict",
) -> JudgeSettings:
    """How every pair of one condition's cell is asked and read (the same for a cell job and a vLLM job)."""
    source, role = split_condition(condition)
    return JudgeSettings(
        template.user,
        max_tokens,
        logprobs,
        prefill,
        system=template.system,
        delivery=persona_delivery(source, role, deliveries),
        reader=reader,
    )


def expected_grade(probs: Mapping[str, float] | None) -> float | None:
    """The mean grade under the label distribution."""
    return None if probs is None else sum(int(label) * p for label, p in probs.items())


def judgment_record(
    summary: Mapping[str, Any],
    persona: str | None,
    response: Response | None,
    prefill: str | None = None,
    reader: str = "strict",
) -> dict[str, Any]:
    """One line of a judgments file; `response` is None when the pair's summary failed (nothing to judge).

    `raw` is the whole answer: the prefill (when the model was given one) and what the model wrote after it;
    `label_rule` says which rule of the `reader` found the grade (None: none did, status `unparsed`).
    """
    record: dict[str, Any] = {"qid": summary["qid"], "docid": summary["docid"], "persona": persona}
    if response is None or response.error is not None:
        error = f"summary failed: {summary.get('error')}" if response is None else response.error
        return {
            **record,
            "label": None,
            "raw": "",
            "status": "error",
            "probs": None,
            "expected": None,
            "error": error,
            "label_source": None,
            "label_rule": None,
        }
    answer = (prefill or "") + response.text
    label, rule = read_label(answer, reader)
    probs = label_distribution(response.top_logprobs, LABELS)
    return {
        **record,
        "label": label,
        "raw": answer,
        "status": "ok" if label is not None else "unparsed",
        "probs": probs,
        "expected": expected_grade(probs),
        "error": None,
        # How `label` was read: parsed from the answer; stressprobe.persona.calibration may read it from `probs`.
        "label_source": "parsed",
        "label_rule": rule,
    }


def judge_cell(
    client: Client,
    summaries: Sequence[Mapping[str, Any]],
    topics: Mapping[str, str],
    personas: Mapping[str, str | None],
    settings: JudgeSettings,
) -> list[dict[str, Any]]:
    """Judge every summarized pair of a dataset under one condition; records keep the summaries' order."""
    return judge_cells(client, summaries, topics, [(personas, settings)])[0][0]


def judge_cells(
    client: Client,
    summaries: Sequence[Mapping[str, Any]],
    topics: Mapping[str, str],
    cells: Sequence[tuple[Mapping[str, str | None], JudgeSettings]],
) -> list[tuple[list[dict[str, Any]], Usage]]:
    """Judge every summarized pair under each cell's (personas, settings), with all cells' requests in ONE
    `generate` call, so that an engine that batches (vLLM) sees the whole job at once rather than a cell at
    a time. Returns each cell's records (in the summaries' order) and what its requests cost."""
    check_qids(summaries, topics, "summaries")
    texts = judgeable(summaries)
    asked = [settings.cell_requests(texts, topics, personas) for personas, settings in cells]
    answers = client.generate([request for requests in asked for request in requests])
    judged, start = [], 0
    for (personas, settings), requests in zip(cells, asked, strict=True):
        responses = answers[start : start + len(requests)]
        start += len(requests)
        mine = iter(responses)
        # A pair whose summary failed gets an `error` record without a call, in its place.
        records = [
            judgment_record(
                s,
                personas[s["qid"]],
                None if s["status"] == "error" else next(mine),
                settings.prefill,
                settings.reader,
            )
            for s in summaries
        ]
        judged.append((records, Usage.of(responses)))
    return judged


def cell_summary(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of a cell: pairs, per status, with a label distribution, per label, and per reading rule."""
    statuses = Counter(record["status"] for record in records)
    labels = Counter(str(record["label"]) for record in records if record["label"] is not None)
    rules = Counter(record.get("label_rule") for record in records)
    return {
        "pairs": len(records),
        **{status: statuses.get(status, 0) for status in STATUSES},
        "with_probs": sum(record["probs"] is not None for record in records),
        "labels": {label: labels.get(label, 0) for label in LABELS},
        "read_by": {rule: rules.get(rule, 0) for rule in RULES},
    }


def judgment_qrels(records: Iterable[Mapping[str, Any]], unparsed: str = "exclude") -> Qrels:
    """The parsed judgments as qrels; failed pairs are left out (counted in the cell summary), and so are
    unparsed ones unless `unparsed` is "zero" (then they are graded 0, as UMBRELA's code does)."""
    if unparsed not in UNPARSED_POLICIES:
        raise StressprobeError(
            f"config key 'judging.unparsed': {unparsed!r}; use one of {', '.join(UNPARSED_POLICIES)}"
        )
    qrels: Qrels = {}
    for record in records:
        if record["status"] == "ok":
            qrels.setdefault(record["qid"], {})[record["docid"]] = record["label"]
        elif record["status"] == "unparsed" and unparsed == "zero":
            qrels.setdefault(record["qid"], {})[record["docid"]] = 0
    return qrels


def unanswered_pairs(records: Iterable[Mapping[str, Any]]) -> dict[str, set[str]]:
    """qid -> the docids whose judging call failed (no answer: left out of every score, not graded 0)."""
    pairs: dict[str, set[str]] = {}
    for record in records:
        if is_unanswered(record):
            pairs.setdefault(record["qid"], set()).add(record["docid"])
    return pairs


def restrict_external_qrels(qrels: Qrels, qids: Iterable[str], path: str | Path) -> Qrels:
    """An external judge's qrels limited to the dataset's selected queries (every table averages one set).

    External judgments registered in config are evaluated as a further judge "model".
    """
    wanted = set(qids)  # once: a generator would be used up by the first entry
    kept = {qid: judged for qid, judged in qrels.items() if qid in wanted}
    if not kept:
        raise StressprobeError(
            f"{path}: judges none of the dataset's selected queries; check the file and the dataset's queries"
        )
    return kept
