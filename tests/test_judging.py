import math

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, Response, answer_prefill
from stressprobe.persona.judging import (
    CONDITIONS,
    JudgeSettings,
    cell_personas,
    cell_summary,
    judge_cell,
    judgment_qrels,
    restrict_external_qrels,
    retrieved_personas,
    split_condition,
    summarize_pairs,
)

TEMPLATE = "Query: {query}\nPassage: {passage}\nAnswer ##final score: <0-3>"
TOPICS = {"q1": "what is a cat", "q2": "boiling point of water"}
PAIRS = [
    {"qid": "q1", "docid": "d#1", "passage": "Cats are small felines."},
    {"qid": "q1", "docid": "d_2", "passage": "Water boils at 100 C."},
    {"qid": "q2", "docid": "d_2", "passage": "Water boils at 100 C."},
]


class FakeClient:
    """Answers each request with `answer(request)`; records what it was asked."""

    def __init__(self, answer):
        self.answer = answer
        self.requests: list[Request] = []

    def generate(self, requests):
        self.requests += requests
        return [self.answer(request) for request in requests]


def user_text(request: Request) -> str:
    return dict(request.messages)["user"]


def test_the_nine_conditions():
    assert len(CONDITIONS) == 9
    assert split_condition("personahub/orthogonal") == ("personahub", "orthogonal")
    with pytest.raises(StressprobeError, match="unknown judging condition"):
        split_condition("fixed/query")


def test_summaries_are_one_request_per_pair_and_identical_for_a_shared_passage():
    client = FakeClient(lambda r: Response(texts=[" A short summary. "]))
    records = summarize_pairs(client, PAIRS, TOPICS, "Summarize: {passage}", 100)
    assert [(r["qid"], r["docid"], r["summary"], r["status"]) for r in records] == [
        (p["qid"], p["docid"], "A short summary.", "ok") for p in PAIRS
    ]
    # the same passage under two queries is the same request, so the cache answers the second
    assert client.requests[1] == client.requests[2]
    assert client.requests[0].max_tokens == 100 and client.requests[0].temperature == 0


def test_failed_or_empty_summaries_are_errors_and_summarization_off_passes_passages():
    answers = iter([Response.failure("timeout"), Response(texts=["  "]), Response(texts=["ok"])])
    records = summarize_pairs(FakeClient(lambda r: next(answers)), PAIRS, TOPICS, "{passage}", 50)
    assert [r["status"] for r in records] == ["error", "error", "ok"]
    assert records[0]["summary"] is None and records[0]["error"] == "timeout"
    off = summarize_pairs(None, PAIRS, TOPICS, "", 0)
    assert [(r["summary"], r["status"]) for r in off] == [(p["passage"], "passage") for p in PAIRS]


def test_a_pair_of_an_unknown_query_is_an_error():
    with pytest.raises(StressprobeError, match="q9"):
        summarize_pairs(
            FakeClient(lambda r: Response(texts=["x"])), [{**PAIRS[0], "qid": "q9"}], TOPICS, "{passage}", 5
        )


def summaries(statuses=("ok", "ok", "ok")):
    return [
        {"qid": p["qid"], "docid": p["docid"], "summary": f"sum {p['docid']}", "status": s, "error": None}
        for p, s in zip(PAIRS, statuses, strict=True)
    ]


def test_judge_cell_records_labels_statuses_and_label_distributions():
    logprobs = [{"##": -0.1}, {"2": math.log(0.6), "1": math.log(0.2), "x": math.log(0.2)}]
    answers = iter(
        [
            Response(texts=["##final score: 2"], top_logprobs=logprobs),
            Response(texts=["It is relevant."]),
            Response.failure("rate limited"),
        ]
    )
    client = FakeClient(lambda r: next(answers))
    personas = cell_personas(TOPICS, "fixed", "gap", {"gap": "A rater."}, None, "")
    records = judge_cell(client, summaries(), TOPICS, personas, JudgeSettings(TEMPLATE, 24, 5))

    ok, unparsed, error = records
    assert (ok["label"], ok["status"], ok["raw"]) == (2, "ok", "##final score: 2")
    assert ok["probs"] == pytest.approx({"0": 0.0, "1": 0.25, "2": 0.75, "3": 0.0})
    assert ok["expected"] == pytest.approx(1 * 0.25 + 2 * 0.75)
    assert (unparsed["label"], unparsed["status"], unparsed["probs"], unparsed["expected"]) == (
        None,
        "unparsed",
        None,
        None,
    )
    assert (error["label"], error["status"], error["error"]) == (None, "error", "rate limited")
    assert all(r["persona"] == "A rater." for r in records)

    request = client.requests[0]
    assert request.temperature == 0 and request.logprobs == 5 and request.max_tokens == 24
    assert user_text(request) == "You are acting as a rater.\n" + TEMPLATE.replace(
        "{query}", TOPICS["q1"]
    ).replace("{passage}", "sum d#1")

    counts = cell_summary(records)
    assert counts == {
        "pairs": 3,
        "ok": 1,
        "unparsed": 1,
        "error": 1,
        "with_probs": 1,
        "labels": {"0": 0, "1": 0, "2": 1, "3": 0},
        "read_by": {"final_score": 1, "lone_grade": 0, "first_grade": 0},
    }
    assert [r["label_rule"] for r in records] == ["final_score", None, None]
    # only the parsed judgment reaches the qrels
    assert judgment_qrels(records) == {"q1": {"d#1": 2}}


ANSWERS = ["Final Score:2 (highly relevant)", "1. The passage defines the term.", "Not relevant at all."]


@pytest.mark.parametrize(
    ("reader", "labels", "rules"),
    [
        ("strict", [2, None, None], ["final_score", None, None]),
        # The prior study's released code: "final score:" then the first standalone 0-3 anywhere.
        ("authors", [2, 1, None], ["final_score", "first_grade", None]),
    ],
)
def test_the_answer_reader_decides_which_answers_give_a_grade_and_records_its_rule(reader, labels, rules):
    answers = iter(ANSWERS)
    client = FakeClient(lambda r: Response(texts=[next(answers)]))
    settings = JudgeSettings(TEMPLATE, 64, reader=reader)
    records = judge_cell(client, summaries(), TOPICS, dict.fromkeys(TOPICS), settings)
    assert [r["label"] for r in records] == labels
    assert [r["label_rule"] for r in records] == rules
    assert [r["raw"] for r in records] == ANSWERS  # the answer itself is always kept
    assert [r["status"] for r in records] == ["ok" if label is not None else "unparsed" for label in labels]
    # The reader changes no request: the same prompts, whatever it is.
    assert {r.max_tokens for r in client.requests} == {64}
    # An unreadable answer is graded 0 with `judging.unparsed: zero` (config/paper.yaml), else left out.
    zero = judgment_qrels(records, "zero")
    assert [zero.get(r["qid"], {}).get(r["docid"]) for r in records] == [
        g if g is not None else 0 for g in labels
    ]


def test_a_pair_whose_summary_failed_is_an_error_without_a_call():
    client = FakeClient(lambda r: Response(texts=["##final score: 1"]))
    records = judge_cell(
        client, summaries(("ok", "error", "ok")), TOPICS, dict.fromkeys(TOPICS), JudgeSettings(TEMPLATE, 8)
    )
    assert len(client.requests) == 2
    assert [r["status"] for r in records] == ["ok", "error", "ok"]
    assert records[1]["error"].startswith("summary failed")
    assert [r["docid"] for r in records] == [p["docid"] for p in PAIRS]
    assert all(r["persona"] is None for r in records)
    assert "You are acting as" not in user_text(client.requests[0])


def test_a_prefilled_judge_continues_the_answer_prefix():
    client = FakeClient(lambda r: Response(texts=[" 3\n\nThe passage answers it."]))
    prefilled = JudgeSettings(TEMPLATE, 8, prefill="##final score:")
    records = judge_cell(client, summaries(), TOPICS, dict.fromkeys(TOPICS), prefilled)
    assert all(r.prefill == "##final score:" for r in client.requests)
    assert [(r["label"], r["raw"]) for r in records] == [
        (3, "##final score: 3\n\nThe passage answers it.")
    ] * 3
    # Without the prefill the same continuation is no answer in the required format.
    client = FakeClient(lambda r: Response(texts=[" 3 is what I think"]))
    records = judge_cell(client, summaries(), TOPICS, dict.fromkeys(TOPICS), JudgeSettings(TEMPLATE, 8))
    assert client.requests[0].prefill is None and {r["status"] for r in records} == {"unparsed"}


def test_answer_prefill_is_the_models_choice():
    assert (
        answer_prefill({"backend": "llamacpp", "answer_prefill": True}, "##final score:") == "##final score:"
    )
    assert answer_prefill({"backend": "vllm"}, "##final score:") is None


def test_retrieved_personas_come_from_the_table_per_query_and_role():
    table = [
        {"qid": "q1", "role": "query", "persona": "A vet."},
        {"qid": "q1", "role": "orthogonal", "persona": "A pilot."},
        {"qid": "q2", "role": "query", "persona": "A chemist."},
    ]
    by_qid = retrieved_personas(table, "query", "t.jsonl")
    assert cell_personas(TOPICS, "personahub", "query", {}, by_qid, "t.jsonl") == {
        "q1": "A vet.",
        "q2": "A chemist.",
    }
    orthogonal = retrieved_personas(table, "orthogonal", "t.jsonl")
    with pytest.raises(StressprobeError, match=r"t\.jsonl.*q2"):
        cell_personas(TOPICS, "personahub", "orthogonal", {}, orthogonal, "t.jsonl")
    with pytest.raises(StressprobeError, match="personas.fixed.evidence"):
        cell_personas(TOPICS, "fixed", "evidence", {}, None, "")


def test_external_qrels_are_restricted_to_the_selected_queries():
    qrels = {"q1": {"d1": 3}, "q7": {"d2": 1}}
    assert restrict_external_qrels(qrels, ["q1", "q2"], "ext.qrels") == {"q1": {"d1": 3}}
    with pytest.raises(StressprobeError, match=r"ext\.qrels"):
        restrict_external_qrels(qrels, ["q3"], "ext.qrels")
