"""Pinned sources (config `sources`, stressprobe.fetch): the checks before any job, `source:<name>` file keys,
and the one download rule fetch_source against a local HTTP server serving stand-ins the tests write."""

from __future__ import annotations

import hashlib
import json

import pytest
import yaml

from stressprobe.cdv.questions import prepare_questions
from stressprobe.cdv.release import read_release_labels
from stressprobe.errors import StressprobeError
from stressprobe.fetch import check_sources, refuse_url, resolve, source_file
from stressprobe.io import read_jsonl
from tests.support.api_workdir import error_lines, run_workflow, write_api_config
from tests.support.file_server import FileServer
from tests.support.helpers import ROOT, make_workdir, shared_data
from tests.support.openai_server import OpenAIServer

COMMIT = "0a1acbd5790fd545a78788611d7819a69323d1a7"
URL = f"https://example.org/owner/repo/{COMMIT}/data/MMLU.json"
SHA = "a" * 64


def test_a_source_is_read_from_its_download_or_its_local_copy(tmp_path):
    pinned = {"mmlu": {"url": URL, "commit": COMMIT, "sha256": SHA, "path": None}}
    assert resolve("source:mmlu", pinned, "cdv.datasets.MMLU.path") == "results/sources/mmlu/MMLU.json"
    assert resolve("data/own.json", pinned, "cdv.datasets.MMLU.path") == "data/own.json"
    local = tmp_path / "MMLU.json"
    assert source_file("mmlu", {"url": None, "path": str(local), "sha256": SHA}) == str(local)
    with pytest.raises(
        StressprobeError, match=r"^config key 'cdv\.datasets\.X\.path': no source 'nope' .*mmlu"
    ):
        resolve("source:nope", pinned, "cdv.datasets.X.path")


def test_a_file_key_given_a_url_names_the_sources_registry_as_the_fix():
    refuse_url("resources/prompts/umbrela.txt", "judging.prompt")
    refuse_url("source:umbrela_zeroshot", "judging.prompt")
    with pytest.raises(
        StressprobeError,
        match=r"^config key 'judging\.prompt': https://example\.org/t/qrel\.yaml is a URL; add it under 'sources'",
    ):
        refuse_url("https://example.org/t/qrel.yaml", "judging.prompt")


def test_a_local_copy_given_with_a_checksum_is_checked(tmp_path):
    local = tmp_path / "official.yaml"
    local.write_text("system_message: s\n")
    good = hashlib.sha256(local.read_bytes()).hexdigest()
    check_sources({"umbrela": {"path": str(local), "sha256": good}})
    with pytest.raises(
        StressprobeError, match=r"^config key 'sources\.umbrela\.sha256': .*official\.yaml has sha256 " + good
    ):
        check_sources({"umbrela": {"path": str(local), "sha256": "a" * 64}})


@pytest.mark.parametrize(
    ("entry", "says"),
    [
        ({"url": URL, "commit": "b" * 40, "sha256": SHA}, r"'sources\.s\.commit': b+ is not in the URL"),
        ({"url": URL, "path": "x.json", "sha256": SHA}, r"'sources\.s': give exactly one of 'url'"),
        ({"url": None, "path": None, "sha256": SHA}, r"'sources\.s': give exactly one of 'url'"),
    ],
)
def test_bad_source_entries_are_one_line_errors(entry, says):
    with pytest.raises(StressprobeError, match=r"^config key " + says):
        check_sources({"s": entry})


def test_a_local_copy_must_have_the_pinned_checksum(tmp_path):
    local = tmp_path / "MMLU.json"
    local.write_text("[]")
    good = hashlib.sha256(b"[]").hexdigest()
    check_sources({"s": {"url": None, "path": str(local), "sha256": good}})
    with pytest.raises(
        StressprobeError, match=r"^config key 'sources\.s\.sha256': .*MMLU\.json has sha256 " + good
    ):
        check_sources({"s": {"url": None, "path": str(local), "sha256": SHA}})


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    data = b'[{"question": "Stand-in?", "choices": ["yes", "no"], "answer": "yes"}]'
    (root / "Sample.json").write_bytes(data)
    with FileServer(root) as files:
        yield files.url("Sample.json"), hashlib.sha256(data).hexdigest(), data


def test_fetch_source_downloads_the_pinned_file_and_refuses_another(tmp_path, served):
    url, sha256, data = served
    target = "results/sources/sample/Sample.json"
    for name, checksum in (("good", sha256), ("bad", "f" * 64)):
        workdir = make_workdir(tmp_path / name)
        edits = {"sources": {"sample": {"url": url, "sha256": checksum}}, "cdv.enabled": False}
        run = run_workflow(workdir, write_api_config(workdir, None, edits), target, check=False)
        if name == "good":
            assert run.returncode == 0, run.stderr[-3000:]
            assert (workdir / target).read_bytes() == data
        else:
            assert run.returncode != 0 and "Traceback" not in run.stderr
            [error] = error_lines(run.stderr)
            assert error.startswith("error: config key 'sources.sample.sha256':") and sha256 in error
            assert not (workdir / target).exists()


def test_the_papers_question_samples_are_the_authors_release():
    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text(encoding="utf-8"))
    sources = config["sources"]
    for name, dataset in config["cdv"]["datasets"].items():
        source = sources[dataset["path"].removeprefix("source:")]
        assert source["url"].endswith(f"/{source['commit']}/data/{name}.json")
        assert source["commit"] == COMMIT and dataset["n"] is None  # all 300 questions
        # The released file is byte-identical to the shared copy, whose checksum is computed here.
        local = shared_data("cdv", f"{name}.json")
        assert source["sha256"] == hashlib.sha256(local.read_bytes()).hexdigest()
        questions = prepare_questions(name, str(local), None, None, "test", None, 42)
        assert len(questions) == 300
    # Their classifier labels, the inputs of Table 7's study from the release (section 4.3: 1,080 and 120).
    release = config["cdv"]["classifier"]["release"]
    for key, filename, n in (("train", "train_data.json", 1080), ("test", "valid_data.json", 120)):
        source = sources[release[key].removeprefix("source:")]
        assert source["url"].endswith(f"/{COMMIT}/train/{filename}") and source["commit"] == COMMIT
        local = shared_data("cdv", "llm_cdv_release", filename)
        assert source["sha256"] == hashlib.sha256(local.read_bytes()).hexdigest()
        assert len(read_release_labels(local)) == n
    # Their DPO test set, benchmarked for Table 5's Orig. on their own questions (241 of 103 originals).
    dpo_test = sources[config["cdv"]["benchmark"]["files"]["authors_dpo_test"].removeprefix("source:")]
    assert dpo_test["url"].endswith(f"/{COMMIT}/train/dpo_test.json") and dpo_test["commit"] == COMMIT
    local = shared_data("cdv", "llm_cdv_release", "dpo_test.json")
    assert dpo_test["sha256"] == hashlib.sha256(local.read_bytes()).hexdigest()
    prompts = sources["cdv_prompts"]
    assert prompts["url"].endswith(f"/{COMMIT}/utils/prompt.py")
    assert prompts["sha256"] == "6dcb1485fd9037e770f57f043dde761b4359db6741c2ce0586604fc152c55ccd"


def _label_file(outputs: str) -> str:
    # The released files' structure: an instruction with the question and its options, a Yes/No output.
    records = [
        {
            "instruction": "Determine whether the following question is too simple to be enhanced:\n"
            f"Question: Stand-in question {i} about {'plants' if o == 'Y' else 'planets'}?\n"
            f"Choices: {['one', 'two', 'three']!r}",
            "input": "",
            "output": {"Y": "Yes", "N": "No"}[o],
        }
        for i, o in enumerate(outputs)
    ]
    return json.dumps(records, indent=4)


def test_the_release_study_reads_the_label_files_it_fetched_as_pinned_sources(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    files = {"train_data.json": _label_file("YN" * 12), "valid_data.json": _label_file("YYYNN")}
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    workdir = make_workdir(tmp_path / "work")
    with FileServer(root) as server:
        sources = {
            f"labels_{key}": {
                "url": server.url(name),
                "sha256": hashlib.sha256(files[name].encode()).hexdigest(),
            }
            for key, name in (("train", "train_data.json"), ("valid", "valid_data.json"))
        }
        edits = {
            "sources": sources,
            "cdv.classifier.release": {"train": "source:labels_train", "test": "source:labels_valid"},
        }
        run = run_workflow(
            workdir, write_api_config(workdir, None, edits), "results/cdv/classifier/release.json"
        )
    assert run.returncode == 0, run.stderr[-3000:]
    for key, name in (("train", "train_data.json"), ("valid", "valid_data.json")):
        assert (workdir / f"results/sources/labels_{key}/{name}").read_text(encoding="utf-8") == files[name]
    result = json.loads((workdir / "results/cdv/classifier/release.json").read_text())
    assert (result["n_train"], result["positives_train"]) == (24, 12)
    baseline = result["study"]["none"]["test"]
    # No classifier keeps every test question: precision is the share of released Yes (3 of 5).
    assert (baseline["n"], baseline["positives"], baseline["precision"], baseline["recall"]) == (
        5,
        3,
        0.6,
        1.0,
    )


def test_the_release_study_needs_both_label_files(tmp_path):
    workdir = make_workdir(tmp_path)
    edits = {"cdv.classifier.release": {"train": "labels/train_data.json", "test": None}}
    run = run_workflow(
        workdir, write_api_config(workdir, None, edits), "results/cdv/classifier/release.json", check=False
    )
    [error] = error_lines(run.stderr)
    assert error.startswith("error: config key 'cdv.classifier.release.test': the release study needs both")


def test_the_released_dpo_test_set_is_fetched_as_a_pinned_source_and_benchmarked(tmp_path):
    # A stand-in of train/dpo_test.json's structure (written here): a pair's prompt, chosen and rejected
    # answers, the question, its options and the right option's text, its dataset and original's id.
    choices = [["red", "green", "blue"], ["one", "two", "three", "four"], ["up", "down"]]
    records = [
        {
            "conversations": [{"from": "human", "value": "..."}],
            "chosen": {"from": "gpt", "value": "...", "model": "m1"},
            "rejected": {"from": "gpt", "value": "...", "model": "m2"},
            "question": f"Some context {i}. Which option is meant in stand-in question {i}?",
            "choices": options,
            "ground_truth": options[i % len(options)],
            "source": "MMLU" if i < 2 else "OpenbookQA",
            "unique_id": i,
        }
        for i, options in enumerate(choices)
    ]
    text = json.dumps(records, indent=4)
    root = tmp_path / "served"
    root.mkdir()
    (root / "dpo_test.json").write_text(text, encoding="utf-8")
    workdir = make_workdir(tmp_path / "work")
    with FileServer(root) as files, OpenAIServer() as server:
        edits = {
            "sources": {
                "dpo_test": {
                    "url": files.url("dpo_test.json"),
                    "sha256": hashlib.sha256(text.encode()).hexdigest(),
                }
            },
            "cdv.benchmark": {"files": {"authors": "source:dpo_test"}, "models": ["api"]},
        }
        config = write_api_config(workdir, server.base_url, edits)
        run = run_workflow(workdir, config, "results/cdv/benchmark/authors/api.jsonl")
    assert run.returncode == 0, run.stderr[-3000:]
    assert (workdir / "results/sources/dpo_test/dpo_test.json").read_text(encoding="utf-8") == text
    asked = read_jsonl(workdir / "results/cdv/benchmark/authors/api.jsonl")
    assert [r["question"] for r in asked] == [r["question"] for r in records]
    # The right option is the ground truth's position among the options: A, B, A.
    assert [r["correct_option"] for r in asked] == ["A", "B", "A"]
    assert [r["correct"] for r in asked] == [r["answer"] == r["correct_option"] for r in asked]


def test_the_release_study_asks_the_prompt_classifiers_the_released_test_questions(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    files = {"train_data.json": _label_file("YN" * 6), "valid_data.json": _label_file("YYYNN")}
    for name, text in files.items():
        (root / name).write_text(text, encoding="utf-8")
    workdir = make_workdir(tmp_path / "work")
    with FileServer(root) as served, OpenAIServer() as server:
        sources = {
            f"labels_{key}": {
                "url": served.url(name),
                "sha256": hashlib.sha256(files[name].encode()).hexdigest(),
            }
            for key, name in (("train", "train_data.json"), ("valid", "valid_data.json"))
        }
        edits = {
            "sources": sources,
            "cdv.classifier.release": {"train": "source:labels_train", "test": "source:labels_valid"},
            "cdv.classifier.prompt_models": ["api"],
        }
        config = write_api_config(workdir, server.base_url, edits)
        run = run_workflow(workdir, config, "results/cdv/classifier/release.json")
        asked = server.total_requests
    assert run.returncode == 0, run.stderr[-3000:]
    assert asked == 5  # each of the 5 released test questions once (the training labels are not asked)
    prompt = json.loads((workdir / "results/cdv/classifier/release.json").read_text())["study"]["prompt:api"]
    # The stand-in server answers "no" to every yes/no question: nothing kept, so recall 0 of the 3 Yes.
    assert prompt["test"] == {"n": 5, "positives": 3, "precision": None, "recall": 0.0, "f_beta": 0.0}
