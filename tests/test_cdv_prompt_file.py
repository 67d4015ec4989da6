"""Prompt templates read from a published Python file without running it (stressprobe.cdv.prompt_file): a
stand-in the test writes, served on 127.0.0.1 and checked by its sha256, then every template filled; the
search and the evaluation asking with it, answers read by a second call."""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace

import pytest

from stressprobe.cdv.answers import EXTRACT_MAX_TOKENS
from stressprobe.cdv.cost_bounds import cdv_eval_bounds, cdv_search_bounds
from stressprobe.cdv.evaluate import evaluate
from stressprobe.cdv.prompt_file import (
    FilePrompts,
    prompt_set,
    read_templates,
    template_inventory,
    templates_in,
)
from stressprobe.cdv.search import SearchSettings, run_search, search_records, summarize_search
from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from stressprobe.fetch import fetch_verified
from stressprobe.llm import Request, Response
from tests.support.api_workdir import run_workflow, write_api_config
from tests.support.cdv_scripted import make_item
from tests.support.file_server import FileServer
from tests.support.helpers import ROOT, make_workdir
from tests.test_cost import BOUNDED_SEARCH, PLANTS

# A stand-in of the structure of the authors' utils/prompt.py (text of its own): functions with defaulted
# parameters, each returning one f-string with `{{ }}` literal braces, and a module-level constant. Running
# it would fail (the import), so it must be read, not run.
STAND_IN = '''
import module_that_does_not_exist

def make_distraction(question=None, wrong_answer=None):
    return f"""DISTRACT toward {wrong_answer} for: {question}
Reply as Generated Distraction: <one sentence>; keep {{braces}}."""

def check_semantic(question=None, ori_question=None, ground_truth=None):
    return f"""SEMANTIC: is the answer to {ori_question} still the answer to {question}?
Reply {{"response": "Yes or No"}}"""

COT = "COT: {question}\\n{choices}\\nThink step by step."

def focus(question, choices):
    return f"FOCUS on the core question: {question}\\n{choices}"

def extract(question=None, answer=None, choices=None):
    text = "unused"
    return f"""EXTRACT from {answer} one of {choices} for {question}: {{"final_answer": "<option>"}}"""

def elaborate(question, choices):
    return f"ELABORATE: {question} {choices}; reply New question: <question>"

def perturb(question, choices):
    return f"PERTURB: {question}; reply New question: <question>"
'''
NAMES = {
    "distraction": "make_distraction",
    "semantic": "check_semantic",
    "answer": "COT",
    "answer_focus": "focus",
    "extract": "extract",
    "elaborated": "elaborate",
}
KEY = "cdv.prompts.templates"


@pytest.fixture
def stand_in(tmp_path):
    path = tmp_path / "prompt.py"
    path.write_text(STAND_IN)
    return path


def test_a_fetched_stand_in_is_checked_read_without_running_and_every_template_filled(tmp_path, stand_in):
    data = stand_in.read_bytes()
    with FileServer(stand_in.parent) as files:
        fetched = tmp_path / "fetched" / "prompt.py"
        fetch_verified(
            files.url("prompt.py"),
            hashlib.sha256(data).hexdigest(),
            fetched,
            "sources.p.url",
            "sources.p.sha256",
        )
    prompts = FilePrompts(read_templates(fetched, NAMES, KEY), extracts=True)
    choices = ["red", "blue", "green"]
    # {choices} is the Python list of the options' texts, as the authors pass it.
    options = "['red', 'blue', 'green']"
    assert prompts.proxy("Ctx. Q?", choices, 0, 2, "Q?") == (
        ("user", "DISTRACT toward green for: Ctx. Q?\nReply as Generated Distraction: <one sentence>; keep {braces}."),
    )  # fmt: skip
    assert prompts.semantic("Q?", "Ctx. Q?", choices, 0) == (
        ("user", 'SEMANTIC: is the answer to Q? still the answer to Ctx. Q??\nReply {"response": "Yes or No"}'),
    )  # fmt: skip
    assert prompts.victim("Q?", choices) == (("user", f"COT: Q?\n{options}\nThink step by step."),)
    assert prompts.victim("Q?", choices, mitigation=True, prefill="Answer:") == (
        ("user", f"FOCUS on the core question: Q?\n{options}"),
        ("assistant", "Answer:"),
    )
    assert prompts.extract("Q?", choices, "I pick blue") == (
        ("user", f'EXTRACT from I pick blue one of {options} for Q?: {{"final_answer": "<option>"}}'),
    )
    assert prompts.elaborated("Q?", choices) == (
        ("user", f"ELABORATE: Q? {options}; reply New question: <question>"),
    )
    # Prompt-only defaults to the distraction template, applied to the original question.
    assert prompts.prompt_only("Q?", choices, 0, 1)[0][1].startswith("DISTRACT toward blue for: Q?")


def test_the_authors_reply_formats_are_read(stand_in):
    prompts = FilePrompts(read_templates(stand_in, {**NAMES, "prompt_only": "perturb"}, KEY))
    choices = ["red", "blue", "green"]
    # The distraction is the text after the prefix, only; without the prefix the reply is off-format.
    assert (
        prompts.context("Sure.\nGenerated Distraction: Blue skies calm people.") == "Blue skies calm people."
    )
    assert prompts.context("Blue skies calm people.") is None
    # {"final_answer": <an option's text>} maps back to that option; anything else is unread (wrong).
    assert prompts.option('```json\n{"final_answer": "Blue"}\n```', choices) == 1
    assert prompts.option('{"final_answer": "green"}', choices) == 2
    assert prompts.option('{"final_answer": "B"}', choices) is None
    assert prompts.option("blue", choices) is None
    assert prompts.option('{"final_answer": "purple"}', choices) is None
    # "New question: ..." replies are the baselines' questions; the distraction goes before the original.
    assert prompts.rewritten("elaborated", "New question: Which is red?", "Q?") == "Which is red?"
    assert prompts.rewritten("prompt_only", "New question: Ctx. Q?", "Q?") == "Ctx. Q?"
    assert prompts.rewritten("prompt_only", "Ctx. Q?", "Q?") is None
    assert prompts.rewritten("distraction", "Generated Distraction: Ctx.", "Q?") == "Ctx.\n\nQ?"
    # The Prompt-only baseline places its distraction as the search does.
    placed = FilePrompts(prompts.templates, position="after")
    assert placed.rewritten("distraction", "Generated Distraction: Ctx.", "Q?") == "Q?\n\nCtx."
    drawn = replace(placed, position="random")
    for seed in range(8):
        expected = drawn.perturbed(["Ctx."], "Q?", seed)[0]
        assert drawn.rewritten("distraction", "Generated Distraction: Ctx.", "Q?", seed) == expected
    # The authors' semantic check asks whether the answer is unchanged: "Yes" keeps the child. It reasons
    # step by step first, so the verdict is its last JSON `response`, not a yes/no word in the reasoning.
    assert prompts.keep_verdict == "yes" and prompt_set(None, {}, False, KEY).keep_verdict == "no"
    reasoned = 'No new fact is added; yes, the answer stays.\n{"response": "Yes"}'
    assert prompts.verdict(reasoned) == "yes"
    assert prompts.verdict('It changes the answer.\n```json\n{"response": "No"}\n```') == "no"
    assert prompts.verdict("Yes") is None and prompts.verdict('{"response": "maybe"}') is None
    assert (
        prompt_set(None, {}, False, KEY).verdict("It says yes and no.") is None
    )  # the project's reader: one word
    assert prompt_set(None, {}, False, KEY).verdict("No.") == "no"


@pytest.mark.parametrize(
    ("names", "says"),
    [
        (
            {**NAMES, "answer": "NOPE"},
            r"'cdv\.prompts\.templates\.answer': .* no string constant .*'NOPE' \(it has: COT,",
        ),
        (
            {**NAMES, "answer": "check_semantic"},
            r"'cdv\.prompts\.templates\.answer': template 'check_semantic' uses ori_question, which",
        ),
        (
            {k: v for k, v in NAMES.items() if k != "semantic"},
            r"'cdv\.prompts\.templates\.semantic': name the template",
        ),
    ],
)
def test_bad_template_names_and_fields_are_one_line_errors(stand_in, names, says):
    with pytest.raises(StressprobeError, match=r"^config key " + says):
        read_templates(stand_in, names, KEY)


def test_only_plain_name_fields_are_accepted(tmp_path):
    path = tmp_path / "p.py"
    path.write_text('X = f"{choices[0]}"\n')
    with pytest.raises(
        StressprobeError, match=r"p\.py:1: the f-string field 'choices\[0\]' is not a plain name"
    ):
        templates_in(path.read_text(), str(path))
    assert templates_in("Y = 3\ndef f():\n    return 1\n", "q.py") == {}


def test_a_bad_distraction_position_is_a_one_line_error():
    with pytest.raises(
        StressprobeError,
        match=r"^config key 'cdv\.prompts\.distraction_position': must be one of before, after",
    ):
        prompt_set(None, {}, False, KEY, position="front")
    schema = ROOT / "workflow" / "schemas" / "config.schema.yaml"
    with pytest.raises(
        StressprobeError, match=r"^config key 'cdv\.prompts\.distraction_position': 'front' is not one of"
    ):
        validate_config({"cdv": {"prompts": {"distraction_position": "front"}}}, schema)
    assert validate_config({}, schema)["cdv"]["prompts"]["distraction_position"] == "before"  # the demo's


def test_extraction_needs_its_template_and_a_file(stand_in):
    without = {k: v for k, v in NAMES.items() if k != "extract"}
    with pytest.raises(StressprobeError, match=r"^config key 'cdv\.prompts\.templates\.extract'"):
        prompt_set(str(stand_in), without, True, KEY)
    with pytest.raises(
        StressprobeError, match=r"^config key 'cdv\.prompts\.extract_answers': needs a template"
    ):
        prompt_set(None, {}, True, KEY)
    assert prompt_set(str(stand_in), without, False, KEY).extracts is False


class TemplateModel:
    """Answers by the template each request was filled from, in the authors' reply formats: the victim
    reasons without a letter, the extraction names option 1's text (wrong: the items' answer is 0), the
    semantic check says `semantic` ("Yes": the answer is unchanged)."""

    def __init__(self, semantic="Yes", extracted="choice 1"):
        self.semantic, self.extracted = semantic, extracted
        self.requests: list[Request] = []

    def generate(self, requests):
        self.requests += requests
        return [self.answer(r) for r in requests]

    def answer(self, request):
        user = request.messages[0][1]
        if user.startswith("DISTRACT"):
            text = "Generated Distraction: A distracting sentence."
            return Response(texts=[text], prompt_tokens=10, completion_tokens=4)
        if user.startswith("SEMANTIC"):
            return Response(
                texts=[f'{{"response": "{self.semantic}"}}'], prompt_tokens=10, completion_tokens=1
            )
        if user.startswith("EXTRACT"):
            reply = json.dumps({"final_answer": self.extracted})
            return Response(texts=[reply], prompt_tokens=7, completion_tokens=1)
        return Response(
            texts=["Some reasoning."] * request.n, prompt_tokens=10, completion_tokens=3 * request.n
        )


def kinds(model):
    return [r.messages[0][1].split(" ", 1)[0].rstrip(":") for r in model.requests]


def test_the_search_asks_with_the_templates_and_reads_each_sample_by_a_second_call(stand_in):
    prompts = prompt_set(str(stand_in), NAMES, True, KEY)
    settings = SearchSettings(limits="authors_code", max_expansions=1, prompts=prompts)
    model = TemplateModel()
    states = run_search([make_item("q1")], {"proxy": model, "semantic": model, "victim": model}, settings)
    records = search_records(states)
    asked = kinds(model)
    # The root's 5 samples each read by an extraction call: B, wrong, so r = 0 and the original fails.
    assert asked == ["COT"] + ["EXTRACT"] * 5
    root = records[0]
    assert root["answers"] == ["B"] * 5 and root["flag"] == "victim_fails_original"
    summary = summarize_search(records, {"victim": {"prompt_per_1m": 1e6, "completion_per_1m": 0.0}})
    assert summary["requests"]["extract"] == {"requests": 5, "prompt": 35, "completion": 5}
    # Extraction is billed at the victim's price: 10 prompt tokens of the answer + 35 of the extractions.
    assert summary["cost_usd"] == 45
    assert settings.expansion_calls(4) == 3 * (2 * 3 + 1 + 5)


@pytest.mark.parametrize(("semantic", "kept"), [("Yes", True), ("No", False)])
def test_the_authors_semantic_yes_keeps_a_child_and_its_distraction_is_the_text_after_the_prefix(
    stand_in, semantic, kept
):
    prompts = prompt_set(str(stand_in), NAMES, True, KEY)
    settings = SearchSettings(limits="authors_code", max_expansions=1, prompts=prompts)
    model = TemplateModel(semantic, extracted="choice 0")  # the victim answers right: the root expands
    states = run_search([make_item("q1")], {"proxy": model, "semantic": model, "victim": model}, settings)
    children = search_records(states)[1:]
    assert len(children) == 3
    for child in children:
        assert child["semantic_ok"] is kept
        assert (child["status"] == "discarded_semantic") is not kept
        assert child["question"] == "A distracting sentence.\n\nWhat is the right choice for q1?"


def test_the_evaluation_reads_answers_by_a_second_call_and_records_it(stand_in):
    prompts = prompt_set(str(stand_in), NAMES, True, KEY)
    model = TemplateModel()
    items = [{**make_item("q1"), "node_id": None, "condition": "original"}]
    [record] = evaluate(model, items, 64, 1, prompts=prompts)
    assert kinds(model) == ["COT", "EXTRACT"]
    assert (record["answer"], record["correct"], record["status"]) == ("B", False, "ok")
    assert record["extract_raw"] == '{"final_answer": "choice 1"}' and record["raw"] == "Some reasoning."


def test_the_cost_bound_counts_the_extraction_calls():
    question = PLANTS
    search = BOUNDED_SEARCH
    local = {"backend": "llamacpp", "gguf": "x.gguf"}
    cdv = {
        "search": search,
        "answer_prefix": "Answer:",
        "eval": {"max_tokens": 16},
        "mitigation": {"enabled": False},
    }
    roles = {"proxy": "m", "semantic": "m", "victim": "m"}
    extracting = {**cdv, "prompts": {"extract_answers": True}}
    plain = cdv_search_bounds("d", [question], roles, cdv, {"m": local})
    read = cdv_search_bounds("d", [question], roles, extracting, {"m": local})
    assert read[:-1] == plain and read[-1].cell.endswith("(extract)")
    nodes = 1 + 2 * (4 - 1)  # the root and every child of the two expansions
    assert read[-1].calls == nodes * (3 + 1)  # every sample and the greedy answer read once
    assert read[-1].completion_tokens == nodes * 4 * EXTRACT_MAX_TOKENS
    evaluated = cdv_eval_bounds("d", [question], "p/v", ["m"], extracting, {"m": local})
    assert [r.calls for r in evaluated] == [
        cdv_eval_bounds("d", [question], "p/v", ["m"], cdv, {"m": local})[0].calls
    ] * 2


def test_the_projects_proxy_writes_background_or_one_distraction_sentence():
    choices = ["red", "blue", "green"]
    background = prompt_set(None, {}, False, KEY).proxy("Q?", choices, 0, 2, "Q?")[1][1]
    sentence = prompt_set(None, {}, False, KEY, "sentence").proxy("Q?", choices, 0, 2, "Q?")[1][1]
    assert "Write two or three sentences of background text to put before" in background
    assert "Write one sentence to put before" in sentence
    assert background.replace("two or three sentences of background text", "one sentence") == sentence
    assert "make option C (green) seem attractive" in sentence


def test_the_inventory_lists_every_template_with_the_roles_it_fits(stand_in):
    rows = {row["name"]: row for row in template_inventory(stand_in)}
    assert set(rows) == {*NAMES.values(), "perturb"}
    assert rows["COT"]["fields"] == ["choices", "question"]
    assert "answer" in rows["COT"]["roles"] and "extract" in rows["COT"]["roles"]
    assert rows["extract"]["fields"] == ["answer", "choices", "question"]
    assert rows["extract"]["roles"] == ["extract"]
    assert rows["make_distraction"]["roles"] == ["distraction", "prompt_only"]


def test_the_workflow_fetches_the_pinned_prompt_file_and_lists_its_templates(tmp_path, stand_in):
    sha256 = hashlib.sha256(stand_in.read_bytes()).hexdigest()
    workdir = make_workdir(tmp_path / "work")
    with FileServer(stand_in.parent) as files:
        edits = {
            "sources": {"authors_prompts": {"url": files.url("prompt.py"), "sha256": sha256}},
            "cdv.prompts.inventory_of": "source:authors_prompts",
        }
        config = write_api_config(workdir, None, edits)
        run_workflow(workdir, config, "results/cdv/prompts/inventory.json")
    assert (workdir / "results/sources/authors_prompts/prompt.py").read_bytes() == stand_in.read_bytes()
    inventory = json.loads((workdir / "results/cdv/prompts/inventory.json").read_text())
    assert [row["name"] for row in inventory["templates"]] == sorted([*NAMES.values(), "perturb"], key=str)


def test_the_authors_system_turn_goes_before_every_templated_request(stand_in):
    system = "You are a helpful assistant."
    prompts = prompt_set(str(stand_in), NAMES, True, KEY, system=system)
    plain = prompt_set(str(stand_in), NAMES, True, KEY)
    requests = [
        lambda p: p.victim("Q?", ["a", "b"]),
        lambda p: p.victim("Q?", ["a", "b"], mitigation=True, prefill="Answer:"),
        lambda p: p.semantic("Q?", "Ctx. Q?", ["a", "b"], 0),
        lambda p: p.extract("Q?", ["a", "b"], "It is a."),
        lambda p: p.elaborated("Q?", ["a", "b"]),
    ]
    for make in requests:
        with_system, without = make(prompts), make(plain)
        assert with_system == (("system", system), *without)
    with pytest.raises(StressprobeError, match=r"config key 'cdv.prompts.system': needs a template file"):
        prompt_set(None, {}, False, KEY, system=system)
