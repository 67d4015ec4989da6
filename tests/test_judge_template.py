"""Judge templates: YAML templates with a system message, fetched from a URL with a pinned sha256 (a local
HTTP server serves a stand-in of the official file's structure), every backend's messages, the delivery of
fixed personas, and what unparsed answers become (`judging.unparsed`)."""

from __future__ import annotations

import hashlib
import json
import sys
from functools import partial

import pytest
import yaml

from stressprobe.errors import StressprobeError
from stressprobe.fetch import fetch_verified
from stressprobe.io import read_jsonl, write_jsonl
from stressprobe.llm.backends.openai import chat_arguments
from stressprobe.persona.analysis import read_judgments
from stressprobe.persona.data import read_topics
from stressprobe.persona.judging import JudgeSettings, judgment_qrels, persona_delivery
from stressprobe.persona.prompts import JudgeTemplate, judge_messages, load_judge_template, persona_sentence
from tests.support.api_workdir import (
    DATASET,
    error_lines,
    judge_cell,
    run_workflow,
    write_api_config,
    write_judging_data,
)
from tests.support.file_server import FileServer
from tests.support.helpers import make_workdir
from tests.support.openai_server import OpenAIServer

# A stand-in of the official template's structure (method, system_message, prefix_user with {query} and
# {passage} as Python format fields); the text is the test's own.
STAND_IN_USER = (
    "Grade the passage for the query from 0 to 3 (use {{braces}} literally).\n"
    "Query: {query}\n"
    "Passage: {passage}\n"
    "Answer as ##final score: <grade>\n"
)
STAND_IN_SYSTEM = "You grade search results for a test."
GAP = "A careful rater of search results."


def stand_in_yaml(system: str = STAND_IN_SYSTEM) -> str:
    return yaml.safe_dump(
        {"method": "stand_in", "system_message": system, "prefix_user": STAND_IN_USER}, sort_keys=False
    )


def filled(query: str, passage: str) -> str:
    """The stand-in filled in as UMBRELA's code does it (str.format), independently of the project's code."""
    return STAND_IN_USER.format(query=query, passage=passage)


# ---- templates ----


def test_a_yaml_template_maps_its_fields_and_keeps_its_system_message(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(stand_in_yaml())
    template = load_judge_template(path)
    assert template.system == STAND_IN_SYSTEM
    assert template.user == STAND_IN_USER.replace("{{braces}}", "{braces}")
    system, user = judge_messages(template, "what is rain", "Rain is water. {query}")
    assert (system, user) == (STAND_IN_SYSTEM, filled("what is rain", "Rain is water. {query}"))


def test_an_empty_system_message_sends_none_and_examples_are_empty(tmp_path):
    path = tmp_path / "t.yml"
    path.write_text(
        yaml.safe_dump({"system_message": "", "prefix_user": "{examples}Q: {query}\nP: {passage}"})
    )
    template = load_judge_template(path)
    assert template == JudgeTemplate(user="Q: {query}\nP: {passage}", system=None)
    request = JudgeSettings(template.user, 8, system=template.system).request("q", "p", None)
    assert request.messages == (("user", "Q: q\nP: p"),)


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ({"system_message": "", "prefix_user": "Q: {query} {colour}"}, "{colour}"),
        ({"system_message": "", "prefix_user": "Q: {query}"}, "{passage}"),
        ({"system_message": ""}, "prefix_user"),
        ({"system_message": ["x"], "prefix_user": "{query} {passage}"}, "system_message"),
    ],
)
def test_bad_yaml_templates_are_errors(tmp_path, content, says):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(StressprobeError, match=f"{path}.*{says}".replace("{", r"\{").replace("}", r"\}")):
        load_judge_template(path)


def test_a_text_template_is_the_user_message_without_system(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("Q: {query}\nP: {passage}\n")
    assert load_judge_template(path) == JudgeTemplate("Q: {query}\nP: {passage}\n", None)


# ---- fixed persona delivery ----


@pytest.mark.parametrize("template_system", [None, STAND_IN_SYSTEM])
def test_each_delivery_of_a_fixed_persona_gives_its_messages(template_system):
    template = JudgeTemplate("Q: {query}\nP: {passage}", template_system)
    sentence = "You are acting as a careful rater of search results."
    assert persona_sentence(GAP) == sentence

    prefix = JudgeSettings(template.user, 8, system=template_system, delivery="prefix")
    expected = (("system", template_system),) if template_system else ()
    assert prefix.request("q", "p", GAP).messages == (*expected, ("user", f"{sentence}\nQ: q\nP: p"))

    system = JudgeSettings(template.user, 8, system=template_system, delivery="system")
    joined = sentence + (f"\n{template_system}" if template_system else "")
    assert system.request("q", "p", GAP).messages == (("system", joined), ("user", "Q: q\nP: p"))
    # without a persona (the baseline) the delivery changes nothing
    assert system.request("q", "p", None) == prefix.request("q", "p", None)


def test_delivery_is_read_per_fixed_role_and_retrieved_personas_keep_the_prefix():
    deliveries = {"evidence": "prefix", "gap": "system"}
    assert persona_delivery("fixed", "gap", deliveries) == "system"
    assert persona_delivery("fixed", "evidence", deliveries) == "prefix"
    assert persona_delivery("personahub", "query", deliveries) == "prefix"
    with pytest.raises(StressprobeError, match="personas.delivery.gap"):
        persona_delivery("fixed", "gap", {"gap": "whisper"})


def test_the_openai_backend_sends_the_system_message():
    request = JudgeSettings("Q: {query}", 8, system="S", delivery="system").request("q", "p", GAP)
    sent = chat_arguments("m", request)["messages"]
    assert sent == [
        {"role": "system", "content": "You are acting as a careful rater of search results.\nS"},
        {"role": "user", "content": "Q: q"},
    ]


def test_the_vllm_and_llamacpp_backends_send_the_system_message(tmp_path, monkeypatch):
    from stressprobe.llm import open_client
    from tests.test_llm_llamacpp import MODELS
    from tests.test_llm_vllm import ENTRY, fake_vllm

    request = JudgeSettings("Q: {query}", 4, system="S", delivery="system").request("q", "p", GAP)
    system = "You are acting as a careful rater of search results.\nS"
    calls: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(calls))
    with open_client({"big": ENTRY}, "big", tmp_path / "v.sqlite") as client:
        client.generate([request])
    assert calls["chat"][0][0][0] == [
        {"role": "system", "content": system},
        {"role": "user", "content": "Q: q"},
    ]
    with open_client(MODELS, "smollm2-135m", tmp_path / "l.sqlite") as client:
        rendered = client.backend.render(request)
        plain = client.backend.render(JudgeSettings("Q: {query}", 4).request("q", "p", None))
    # the chat template's system turn holds the message (instead of the model's default system text)
    assert system in rendered and rendered.index(system) < rendered.index("Q: q")
    assert system not in plain


# ---- fetching with a checksum ----


def test_fetch_verified_writes_only_a_file_with_the_pinned_checksum(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    data = stand_in_yaml().encode()
    (served / "t.yaml").write_bytes(data)
    good = hashlib.sha256(data).hexdigest()
    with FileServer(served) as files:
        dest = tmp_path / "out" / "t.yaml"
        keys = ("sources.t.url", "sources.t.sha256")
        fetch_verified(files.url("t.yaml"), good, dest, *keys)
        assert dest.read_bytes() == data

        other = tmp_path / "out" / "other.yaml"
        with pytest.raises(StressprobeError, match=r"'sources\.t\.sha256'.*has sha256 " + good):
            fetch_verified(files.url("t.yaml"), "0" * 64, other, *keys)
        assert not other.exists()
        with pytest.raises(StressprobeError, match=r"'sources\.t\.url': cannot download"):
            fetch_verified(files.url("missing.yaml"), good, other, *keys)
        assert not other.exists()


# ---- the workflow: a judge cell with a fetched template ----


def template_source(url: str, sha256: str) -> dict:
    """Config edits: the judge template as the pinned source `judge_template`."""
    return {
        "sources.judge_template": {"url": url, "sha256": sha256},
        "judging.prompt": "source:judge_template",
    }


@pytest.fixture
def served_template(tmp_path):
    served = tmp_path / "served"
    served.mkdir()
    data = stand_in_yaml().encode()
    (served / "qrel_stand_in.yaml").write_bytes(data)
    with FileServer(served) as files:
        yield files.url("qrel_stand_in.yaml"), hashlib.sha256(data).hexdigest(), data


def test_every_judge_prompt_is_the_fetched_template_filled_in_with_its_system_message(
    tmp_path, served_template
):
    url, sha256, data = served_template
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    with OpenAIServer() as server:
        config = write_api_config(
            workdir,
            server.base_url,
            {
                **template_source(url, sha256),
                "judging.conditions": ["baseline/umbrela", "fixed/gap"],
                "personas.fixed.gap": GAP,
                "personas.delivery.gap": "system",
                "cdv.enabled": False,
            },
        )
        cells = {c: judge_cell(workdir, c)["judgments"] for c in ("baseline/umbrela", "fixed/gap")}
        run_workflow(workdir, config, *(str(p.relative_to(workdir)) for p in cells.values()))
        bodies = [json.loads(key) for key in server.requests]

    assert (workdir / "results" / "sources" / "judge_template" / "qrel_stand_in.yaml").read_bytes() == data
    topics = read_topics(workdir / "data" / "topics.tsv")
    passages = dict(
        line.split("\t", 1) for line in (workdir / "data" / "passages.tsv").read_text().splitlines()
    )
    sentence = "You are acting as a careful rater of search results."
    expected = []
    for condition, path in cells.items():
        system = STAND_IN_SYSTEM if condition == "baseline/umbrela" else f"{sentence}\n{STAND_IN_SYSTEM}"
        for record in read_jsonl(path):
            user = filled(topics[record["qid"]], passages[record["docid"]])
            expected.append([{"role": "system", "content": system}, {"role": "user", "content": user}])
    assert len(expected) == 12
    canonical = partial(json.dumps, sort_keys=True)
    assert sorted(map(canonical, (b["messages"] for b in bodies))) == sorted(map(canonical, expected))


def test_a_checksum_mismatch_stops_with_one_line(tmp_path, served_template):
    url, sha256, _ = served_template
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    wrong = "f" * 64
    with OpenAIServer() as server:
        config = write_api_config(
            workdir,
            server.base_url,
            {
                **template_source(url, wrong),
                "cdv.enabled": False,
            },
        )
        target = judge_cell(workdir)["judgments"]
        run = run_workflow(workdir, config, str(target.relative_to(workdir)), check=False)
        calls = server.total_requests
    assert run.returncode != 0
    assert "Traceback" not in run.stderr
    errors = error_lines(run.stderr)
    assert len(errors) == 1, run.stderr[-3000:]
    assert errors[0].startswith("error: config key 'sources.judge_template.sha256'")
    assert sha256 in errors[0] and wrong in errors[0]
    assert calls == 0 and not target.exists()
    assert not (workdir / "results" / "sources" / "judge_template" / "qrel_stand_in.yaml").exists()


def test_a_url_template_is_refused_in_favour_of_a_pinned_source(tmp_path):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    config = write_api_config(workdir, None, {"judging.prompt": "https://example.org/t.yaml"})
    run = run_workflow(workdir, config, "-n", check=False)
    assert run.returncode != 0
    assert error_lines(run.stderr) == [
        "error: config key 'judging.prompt': https://example.org/t.yaml is a URL; add it under 'sources' "
        "(url, commit, sha256) and set 'judging.prompt: source:<name>'"
    ]


# ---- judging.unparsed ----

RECORDS = [
    {"qid": "q1", "docid": "d1", "label": 2, "status": "ok"},
    {"qid": "q1", "docid": "d2", "label": None, "status": "unparsed"},
    {"qid": "q1", "docid": "d3", "label": None, "status": "error"},
]


def test_unparsed_answers_are_excluded_or_graded_zero(tmp_path):
    assert judgment_qrels(RECORDS) == {"q1": {"d1": 2}}
    assert judgment_qrels(RECORDS, "exclude") == {"q1": {"d1": 2}}
    assert judgment_qrels(RECORDS, "zero") == {"q1": {"d1": 2, "d2": 0}}  # a failed call stays out
    with pytest.raises(StressprobeError, match="judging.unparsed"):
        judgment_qrels(RECORDS, "guess")

    path = tmp_path / "j.jsonl"
    write_jsonl(path, RECORDS)
    assert read_judgments(path)["label"].isna().tolist() == [False, True, True]
    assert read_judgments(path, "zero")["label"].tolist()[:2] == [2.0, 0.0]
    assert read_judgments(path, "zero")["label"].isna().tolist() == [False, False, True]


def test_the_unparsed_switch_reaches_the_qrels_job(tmp_path):
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    off_format = "I would rather not say."  # no grade: every answer is unparsed
    with OpenAIServer(responder=lambda body, index: off_format) as server:
        qrels = f"results/judging/{DATASET}/qrels/api/baseline/umbrela.qrels"
        for policy, lines in (("exclude", 0), ("zero", 6)):
            config = write_api_config(
                workdir, server.base_url, {"judging.unparsed": policy, "cdv.enabled": False}
            )
            run_workflow(workdir, config, qrels)
            text = (workdir / qrels).read_text()
            assert len(text.splitlines()) == lines, policy
            assert all(line.endswith(" 0") for line in text.splitlines())
