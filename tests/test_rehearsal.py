"""The rehearsal of config/paper.yaml (config/rehearsal.yaml over it): the overlay changes only where models
are reached, input sizes and file locations; its dry run plans every rule of the paper's; the role server
answers and refuses as the providers do; and (slow) the whole DAG runs to completion on 2 cores."""

from __future__ import annotations

import copy
import fnmatch
import json
import re
import subprocess
import urllib.error
import urllib.request

import pytest
import yaml
from huggingface_hub import try_to_load_from_cache

from tests.support.file_server import FileServer
from tests.support.helpers import shared_data
from tests.support.rehearsal import (
    FILES_PORT,
    OVERLAY,
    PAPER,
    PAPER_MODEL_RULES,
    error_records,
    executed_jobs,
    prepare_workdir,
    rehearsal_command,
    rehearsal_env,
    role_responder,
    role_server,
    scorecard_coverage,
)

# Every key path the overlay may change (fnmatch patterns over dotted paths): where models are reached,
# input sizes, file locations. Anything else differing from paper.yaml fails the test.
ALLOWED = (
    "models.*.base_url",
    "sources.*.url",
    "sources.*.sha256",
    "personas.sources.*.path",
    "personas.sources.*.limit",
    "judging.datasets.*.source",
    "judging.datasets.*.topics",
    "judging.datasets.*.qrels",
    "judging.datasets.*.passages",
    "judging.datasets.*.runs",
    "judging.datasets.*.queries",
    "judging.datasets.*.max_passages_per_query",
    "judging.datasets.*.expect.queries",
    "judging.datasets.*.expect.qids",
    "judging.datasets.*.expect.runs",
    "cdv.experiments.*.n",
    "cdv.classifier.cost_study.n",
    "cdv.human_eval.n",
)


def merged(base: dict, over: dict) -> dict:
    """Snakemake's merge of --configfile files: mappings recursively, anything else replaced."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def differences(a, b, path: tuple = ()) -> list[tuple]:
    """Key paths where a and b differ (a key only one side has counts as a difference)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b), key=str)
        return [d for k in keys for d in differences(a.get(k), b.get(k), (*path, k))]
    return [] if a == b else [path]


def allowed(path: tuple) -> bool:
    """Whether a key path matches one of ALLOWED (segment by segment: model names hold dots)."""
    for pattern in ALLOWED:
        parts = pattern.split(".")
        if len(parts) == len(path) and all(
            fnmatch.fnmatchcase(str(k), p) for k, p in zip(path, parts, strict=True)
        ):
            return True
    return False


PAPER_VLLM_MODELS = sorted(
    m["model"]
    for m in yaml.safe_load(PAPER.read_text(encoding="utf-8"))["models"].values()
    if m["backend"] == "vllm"
)


def vllm_events(workdir) -> list[dict]:
    """The vLLM stand-in's log of the rehearsal (every load and chat, with the job's HF_HUB_OFFLINE)."""
    lines = (workdir / "vllm_standin.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def load(path):
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def test_the_overlay_changes_only_model_addresses_input_sizes_and_file_locations():
    paper = load(PAPER)
    changed = differences(paper, merged(paper, load(OVERLAY)))
    assert changed, "the overlay changes nothing"
    outside = [".".join(map(str, path)) for path in changed if not allowed(path)]
    assert outside == [], f"the overlay changes keys that are not addresses, sizes or locations: {outside}"
    # Only the API models get an address; a model name, a prompt or a switch is never touched.
    models = {path[1] for path in changed if path[0] == "models"}
    assert models == {m for m, e in paper["models"].items() if e["backend"] == "openai"}


def test_the_overlay_keeps_the_papers_nesting_and_all_of_the_sample_choices():
    paper, rehearsal = load(PAPER), merged(load(PAPER), load(OVERLAY))
    sizes = {n: e["n"] for n, e in rehearsal["cdv"]["experiments"].items()}
    paper_sizes = {n: e["n"] for n, e in paper["cdv"]["experiments"].items()}
    # 100 of 300 in the paper: 4 of 12 here, and the 12 are the whole (shrunk) sample file.
    assert sizes["self_search"] * paper_sizes["scale_up"] == sizes["scale_up"] * paper_sizes["self_search"]
    assert all(e["n"] is None for e in rehearsal["cdv"]["datasets"].values())
    assert rehearsal["cdv"]["human_eval"]["n"] < sizes["scale_up"]
    # The judged queries are named, and the pins say the same.
    for entry in rehearsal["judging"]["datasets"].values():
        assert entry["expect"]["queries"] == len(entry["queries"])
        if (
            "qids" in entry["expect"]
        ):  # a dataset the paper pins by id (RAG24's 86) is pinned to its shrunk ids
            assert entry["expect"]["qids"] == entry["queries"]


def test_the_role_server_answers_each_role_in_its_format():
    def ask(text, **body):
        return role_responder({"messages": [{"role": "user", "content": text}], **body}, 0)

    options = "Options: ['Mars', 'Venus', 'Jupiter']"
    assert re.fullmatch(r"##final score: [0-3]", ask("Reply with one line: ##final score: <0-3>"))
    assert ask(f"Question: Q?\n{options}\nReply as Generated Distraction: <s>").startswith(
        "Generated Distraction: "
    )
    verdict = ask(f'Original: Q?\n{options}\nthen reply {{"response": "Yes"}} or {{"response": "No"}}.')
    assert json.loads(verdict.splitlines()[-1])["response"] in ("Yes", "No")
    answer = ask(f"Question: Q?\n{options}\nthink step by step")
    chosen = answer.removeprefix("Thinking it through, the answer is ").removesuffix(".")
    assert chosen in ("Mars", "Venus", "Jupiter")
    extract = ask(
        f'Which option? {options}\nQuestion: Q?\nAnswer: {answer}\nReply as JSON: {{"final_answer": "<o>"}}'
    )
    assert json.loads(extract) == {"final_answer": chosen}
    assert ask("Question: Q?\nReply as New question: <question>") == "New question: Some background first. Q?"
    assert ask("Could it? Answer yes or no.") in ("yes", "no")
    # Deterministic: the same request, the same answer.
    assert ask(f"Question: Q?\n{options}\nthink") == ask(f"Question: Q?\n{options}\nthink")


def post(server, body):
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer sk"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_the_role_server_refuses_what_the_providers_refuse():
    user = [{"role": "user", "content": "Answer yes or no."}]
    with role_server() as server:
        status, reply = post(server, {"model": "gpt-4o-2024-05-13-retired", "messages": user})
        assert (status, reply["error"]["code"]) == (404, "model_not_found")
        o1 = "o1-mini-2024-09-12"
        for param, value in (("temperature", 0.001), ("top_p", 1.0), ("max_tokens", 16)):
            status, reply = post(server, {"model": o1, "messages": user, param: value})
            assert (status, reply["error"]["param"]) == (400, param)
        system = [{"role": "system", "content": "Be brief."}, *user]
        status, reply = post(server, {"model": o1, "messages": system, "max_completion_tokens": 8})
        assert (status, reply["error"]["code"]) == (400, "unsupported_value")
        status, reply = post(server, {"model": o1, "messages": user, "max_completion_tokens": 8})
        assert status == 200 and reply["choices"][0]["message"]["content"] in ("yes", "no")
        for model in PAPER_MODEL_RULES:
            if not model.startswith("o1"):
                body = {"model": model, "messages": system, "temperature": 0.0, "max_tokens": 8}
                assert post(server, body)[0] == 200, model


def planned_rules(text: str) -> dict[str, int]:
    table = text[text.index("Job stats:") :]
    return {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", table, re.M) if rule != "total"}


@pytest.fixture(scope="module")
def rehearsal_dir(tmp_path_factory):
    shared_data("dl20")
    return prepare_workdir(tmp_path_factory.mktemp("rehearsal") / "run")


def paper_dry_run_rules(tmp_path) -> dict[str, int]:
    from tests.support.paper_dag import dry_run, make_paper_workdir

    proc = dry_run(make_paper_workdir(tmp_path / "paper"))[0]
    assert proc.returncode == 0, proc.stderr[-4000:]
    return planned_rules(proc.stdout + proc.stderr)


def test_the_rehearsals_plan_has_every_rule_and_job_of_the_papers(rehearsal_dir, tmp_path):
    proc = subprocess.run(
        rehearsal_command(rehearsal_dir, "-n"),
        capture_output=True,
        text=True,
        env=rehearsal_env(rehearsal_dir),
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert planned_rules(proc.stdout + proc.stderr) == paper_dry_run_rules(tmp_path)


def test_the_overlays_sources_keep_the_papers_commit_and_file_name():
    paper, overlay = load(PAPER)["sources"], load(OVERLAY)["sources"]
    assert set(overlay) == set(paper)
    for name, entry in overlay.items():
        commit, filename = paper[name]["commit"], paper[name]["url"].rsplit("/", 1)[1]
        assert entry["url"].endswith(f"/{commit}/{filename}"), name


@pytest.mark.slow
@pytest.mark.timeout(2400)  # ~500 jobs on 2 cores: past pytest's 900 s default
def test_the_whole_paper_dag_runs_to_completion_under_the_rehearsal(rehearsal_dir, tmp_path):
    """Every job of the paper's plan executes; every table and figure is written; no error record."""
    with role_server(), FileServer(rehearsal_dir / "served", FILES_PORT):
        proc = subprocess.run(
            rehearsal_command(rehearsal_dir, "--keep-going"),
            capture_output=True,
            text=True,
            env=rehearsal_env(rehearsal_dir),
            timeout=1800,
        )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-8000:]
    planned = paper_dry_run_rules(tmp_path)
    executed = executed_jobs(rehearsal_dir)
    assert {r: n for r, n in planned.items() if executed[r] < n} == {}, (
        "rules of the paper's plan not executed"
    )
    assert error_records(rehearsal_dir) == []
    # The vLLM jobs loaded each paper vLLM model offline, from the rehearsal's prepared cache only.
    loads = [e for e in vllm_events(rehearsal_dir) if e["event"] == "load"]
    assert {e["model"] for e in loads} >= set(PAPER_VLLM_MODELS)
    assert {(e["hf_hub_offline"], e["hf_home"]) for e in loads} == {("1", str(rehearsal_dir / "hf"))}
    for model in PAPER_VLLM_MODELS:
        assert isinstance(
            try_to_load_from_cache(model, "config.json", cache_dir=rehearsal_dir / "hf" / "hub"), str
        )
    results = rehearsal_dir / "results"
    for table in sorted((results / "tables").glob("*.csv")):
        assert len(table.read_text(encoding="utf-8").splitlines()) > 1, f"{table.name}: no rows"
    assert all(f.stat().st_size > 0 for f in (results / "figures").rglob("*") if f.is_file())
    for card in ("vs_paper", "cdv_vs_paper"):
        covered, printed, blank = scorecard_coverage(results / "tables" / f"{card}.csv")
        assert printed > 0 and covered > 0, card
        # a printed value without a run value says why in its row
        assert [r for r in blank if not r.get("why")] == [], card
