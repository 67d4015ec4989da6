"""The extraction model (`cdv.prompts.extract_model`, FIDELITY S13): with answers read by a second call, the
calls go to the named registry model at `extract_temperature`, through the cached LLM layer, in the search
and the evaluation, and the search summary and the cost bound price them at that model's price."""

from __future__ import annotations

import json

import pytest

from stressprobe.cdv.cost_bounds import cdv_eval_bounds, cdv_search_bounds
from stressprobe.cdv.jobs import (
    EvalCell,
    EvalSettings,
    SearchFiles,
    evaluate_group,
    evaluate_originals,
    search_cell,
    search_settings,
)
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.llm.usage import cost_usd
from tests.support.cdv_scripted import make_item
from tests.support.openai_server import OpenAIServer
from tests.test_cdv_prompt_file import NAMES, STAND_IN
from tests.test_cost import BOUNDED_SEARCH, PLANTS

READER_PRICE = {"prompt_per_1m": 1e6, "completion_per_1m": 2e6}  # a dollar per prompt token: easy sums


def reply(body, index):
    """Replies in the authors' formats by the stand-in template each request was filled from."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    if user.startswith("DISTRACT"):
        return "Generated Distraction: A distracting sentence."
    if user.startswith("SEMANTIC"):
        return '{"response": "No"}'
    if user.startswith("EXTRACT"):
        return json.dumps({"final_answer": "choice 1"})
    return "Some reasoning."


@pytest.fixture
def server():
    with OpenAIServer(responder=reply) as running:
        yield running


def registry(server):
    entry = {"backend": "openai", "base_url": server.base_url, "api_key_env": "STRESSPROBE_TEST_API_KEY"}
    return {
        "answerer": {**entry, "model": "answer-model"},
        "reader": {**entry, "model": "extract-model", "price": READER_PRICE},
    }


def prompts_spec(tmp_path, extract_model="reader"):
    path = tmp_path / "prompt.py"
    path.write_text(STAND_IN)
    return {"file": str(path), "templates": NAMES, "extract_answers": True, "distraction": "background",
            "distraction_position": "before", "extract_model": extract_model,
            "extract_temperature": 0.0001}  # fmt: skip


def read_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def bodies(server):
    return [json.loads(body) for body in server.requests]


def is_extraction(body):
    return body["messages"][0]["content"].startswith("EXTRACT")


def test_the_evaluation_asks_the_extraction_model_through_the_cache(tmp_path, server, monkeypatch):
    monkeypatch.setenv("STRESSPROBE_TEST_API_KEY", "sk-test")
    questions = tmp_path / "q.jsonl"
    write_jsonl(questions, [make_item("q1"), make_item("q2")])
    settings = EvalSettings.of(16, 0.001, None, 1, prompts_spec(tmp_path))
    outputs = (str(tmp_path / "o.jsonl"), str(tmp_path / "o.usage.json"))
    cache = str(tmp_path / "cache")
    evaluate_originals(registry(server), "answerer", cache, [str(questions)], settings, False, outputs)
    extractions = [b for b in bodies(server) if is_extraction(b)]
    assert len(extractions) == 2 and {b["model"] for b in extractions} == {"extract-model"}
    assert {b["temperature"] for b in extractions} == {0.0001}
    assert {b["model"] for b in bodies(server) if not is_extraction(b)} == {"answer-model"}
    records = read_jsonl(outputs[0])
    assert [(r["answer"], r["correct"]) for r in records] == [("B", False)] * 2
    assert read_json(outputs[1])["model"] == "answerer+reader"  # both clients counted in the sidecar
    # Through the cached layer: a rerun asks nothing again.
    sent = server.total_requests
    evaluate_originals(registry(server), "answerer", cache, [str(questions)], settings, False, outputs)
    assert server.total_requests == sent and read_jsonl(outputs[0]) == records


def test_a_grouped_evaluation_counts_each_outputs_own_asks_and_extractions(tmp_path, server, monkeypatch):
    # Every output's requests go out together (cdv_eval_vllm); each sidecar still counts its own, both models'.
    monkeypatch.setenv("STRESSPROBE_TEST_API_KEY", "sk-test")
    cells = []
    for name, qids in (("a", ["q1", "q2"]), ("b", ["q1", "q2", "q3"])):  # q1, q2: the shared originals
        write_jsonl(tmp_path / f"{name}.q.jsonl", [make_item(qid) for qid in qids])
        write_jsonl(tmp_path / f"{name}.p.jsonl", [])
        files = [str(tmp_path / f"{name}.{ext}") for ext in ("q.jsonl", "p.jsonl")]
        outputs = [str(tmp_path / f"{name}.{ext}") for ext in ("eval.jsonl", "eval.usage.json")]
        cells.append(EvalCell(name, *files, "", *outputs))
    settings = EvalSettings.of(16, 0.001, None, 1, prompts_spec(tmp_path))
    evaluate_group(registry(server), "answerer", str(tmp_path / "cache"), cells, settings)
    usage = [read_json(cell.usage) for cell in cells]
    assert [len(read_jsonl(cell.records)) for cell in cells] == [2, 3]
    # The second cell asks the shared originals again: hits of the job's one call, for both models.
    assert [(u["calls_made"], u["cache_hits"]) for u in usage] == [(4, 0), (2, 4)]
    assert [u["cost_usd"] > 0 for u in usage] == [True, True]  # the reader's price, on each one's share
    assert server.total_requests == sum(u["calls_made"] for u in usage)


def test_the_search_reads_the_victims_samples_with_the_extraction_model_at_its_price(
    tmp_path, server, monkeypatch
):
    monkeypatch.setenv("STRESSPROBE_TEST_API_KEY", "sk-test")
    questions = tmp_path / "q.jsonl"
    write_jsonl(questions, [make_item("q1")])
    roles = {"proxy": "answerer", "semantic": "answerer", "victim": "answerer", "extract": "reader"}
    search = {"limits": "authors_code", "max_expansions": 1, "samples": 3}
    settings = search_settings(search, 0.5, 1, None, 0.001, "paper", prompts_spec(tmp_path))
    files = SearchFiles(*(str(tmp_path / name) for name in ("s.jsonl", "p.jsonl", "sum.json", "u.json")))
    search_cell(str(questions), registry(server), roles, str(tmp_path / "cache"), settings, "d", files)
    extractions = [b for b in bodies(server) if is_extraction(b)]
    assert extractions and {(b["model"], b["temperature"]) for b in extractions} == {
        ("extract-model", 0.0001)
    }
    summary = read_json(files.summary)
    used = summary["requests"]["extract"]
    assert summary["extract"] == "reader" and used["requests"] == 3  # the root's three samples
    # The answering model is free here: the whole cost is the extraction model's.
    assert summary["cost_usd"] == pytest.approx(cost_usd(used["prompt"], used["completion"], READER_PRICE))
    assert summary["cost_usd"] > 0


def test_the_cost_bound_counts_the_extraction_calls_at_the_extraction_models_price():
    free = {"backend": "llamacpp", "gguf": "x.gguf"}
    models = {"m": free, "reader": {"backend": "openai", "model": "x", "price": READER_PRICE}}
    cdv = {"search": BOUNDED_SEARCH, "answer_prefix": "Answer:", "eval": {"max_tokens": 16},
           "mitigation": {"enabled": False},
           "prompts": {"extract_answers": True, "extract_model": "reader"}}  # fmt: skip
    roles = {"proxy": "m", "semantic": "m", "victim": "m"}
    *_, victim, extract = cdv_search_bounds("d", [PLANTS], roles, cdv, models)
    assert (victim.model, extract.model) == ("m", "reader") and victim.cost_usd == 0
    assert extract.cost_usd == pytest.approx(
        cost_usd(extract.prompt_tokens, extract.completion_tokens, READER_PRICE), abs=1e-3
    )
    answered, read = cdv_eval_bounds("d", [PLANTS], "p/v", ["m"], cdv, models)
    assert (answered.model, read.model, read.calls) == ("m", "reader", answered.calls)
    assert read.cost_usd > 0 == answered.cost_usd
