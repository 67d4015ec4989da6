"""Bad input, seen the way a user sees it: a `snakemake` run in a scratch directory.

Each case must exit non-zero with ONE `error:` line naming the file and line (or the config key) and what to
fix, print no traceback, leave no output that looks complete, and spend no model call (the server counts
every request; the response cache stays empty). The README's "Bad input" table lists the same cases.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from stressprobe.llm.serving import free_port
from tests.support.api_workdir import (
    CDV_QUESTIONS,
    cached_messages,
    error_lines,
    judge_cell,
    run_workflow,
    write_api_config,
    write_cdv_questions,
    write_judging_data,
)
from tests.support.helpers import make_workdir
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.slow

JUDGE_TARGET = "results/judging/tiny/judgments/api/baseline/umbrela.jsonl"
POOL_TARGET = "results/personas/personahub/pool.jsonl"
CDV_TARGET = "results/cdv/tinyqa/api/api/search.jsonl"


@dataclass(frozen=True)
class Case:
    """A broken input: `setup(workdir, base_url)` breaks it and returns (config, target, api key or None)."""

    setup: Callable[[Path, str], tuple[Path, str, str | None]]
    says: tuple[str, ...]  # what the error line must name


def edit_file(
    relative: str, edit: Callable[[bytes], bytes]
) -> Callable[[Path, str], tuple[Path, str, str | None]]:
    """A case that rewrites one data file and builds the judge cell with the plain config."""

    def setup(workdir: Path, base_url: str) -> tuple[Path, str, str | None]:
        path = workdir / relative
        path.write_bytes(edit(path.read_bytes()))
        return write_api_config(workdir, base_url), JUDGE_TARGET, "sk-test-unused"

    return setup


def replace_line(number: int, new: str) -> Callable[[bytes], bytes]:
    def edit(data: bytes) -> bytes:
        lines = data.decode().splitlines(keepends=True)
        lines[number - 1] = new + "\n"
        return "".join(lines).encode()

    return edit


def config_edit(edits: dict, api_key: str | None = "sk-test-unused", url: str | None = "server"):
    """A case that only changes the config (url "server" = the test's server, else the given URL)."""

    def setup(workdir: Path, base_url: str) -> tuple[Path, str, str | None]:
        config = write_api_config(workdir, base_url if url == "server" else url, edits)
        return config, JUDGE_TARGET, api_key

    return setup


def empty_persona_pool(workdir: Path, base_url: str) -> tuple[Path, str, str | None]:
    (workdir / "data" / "personas.jsonl").write_text("")
    config = write_api_config(workdir, base_url, {"personas.sources.personahub.path": "data/personas.jsonl"})
    return config, POOL_TARGET, "sk-test-unused"


def cdv_questions(questions: list[dict]) -> Callable[[Path, str], tuple[Path, str, str | None]]:
    """A case that replaces the CDV question file and builds the CDV search cell."""

    def setup(workdir: Path, base_url: str) -> tuple[Path, str, str | None]:
        write_cdv_questions(workdir, questions)
        return write_api_config(workdir, base_url), CDV_TARGET, "sk-test-unused"

    return setup


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens."""
    return f"http://127.0.0.1:{free_port()}/v1"


CASES = {
    "malformed qrels line": Case(
        edit_file("data/qrels.txt", replace_line(2, "q1 0 q1d2")), ("data/qrels.txt:2",)
    ),
    "malformed run line": Case(
        edit_file("data/runs/bm25.run", replace_line(3, "q1 Q0 q1d3 3")), ("bm25.run:3",)
    ),
    "malformed topic line": Case(
        edit_file("data/topics.tsv", replace_line(2, "q2 no tab here")), ("topics.tsv:2",)
    ),
    "run with a duplicate docid": Case(
        edit_file("data/runs/dense.run", replace_line(2, "q1 Q0 q1d3 2 9 dense")), ("dense.run:2", "q1d3")
    ),
    "label outside 0-3": Case(
        edit_file("data/qrels.txt", replace_line(3, "q1 0 q1d3 4")), ("qrels.txt:3", "'4'")
    ),
    "non-UTF-8 file": Case(
        edit_file("data/passages.tsv", lambda data: data.replace(b"Passage 1", b"Passage \xff1", 1)),
        ("passages.tsv:", "UTF-8"),
    ),
    "empty persona pool": Case(empty_persona_pool, ("data/personas.jsonl",)),
    "unknown config key": Case(config_edit({"judging.colour": "blue"}), ("judging", "colour")),
    "wrong config type": Case(
        config_edit({"judging.judge_max_tokens": "lots"}), ("judging.judge_max_tokens",)
    ),
    "unknown model": Case(config_edit({"judging.models": ["gpt-5-nano"]}), ("judging.models", "gpt-5-nano")),
    "unknown condition": Case(
        config_edit({"judging.conditions": ["baseline/vibes"]}), ("judging.conditions",)
    ),
    "missing API key variable": Case(
        config_edit({}, api_key=None, url=None), ("models.api.api_key_env", "STRESSPROBE_TEST_API_KEY")
    ),
    "unreachable base_url": Case(config_edit({}, url=closed_port_url()), ("models.api.base_url",)),
    "CDV answer not among the choices": Case(
        cdv_questions([CDV_QUESTIONS[0], {**CDV_QUESTIONS[1], "answer": "Nectar"}]),
        ("data/cdv.json[1]", "Nectar"),
    ),
    "duplicate CDV question ids": Case(
        cdv_questions([{**CDV_QUESTIONS[0], "id": "x1"}, {**CDV_QUESTIONS[1], "id": "x1"}]),
        ("data/cdv.json[1]", "x1"),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_bad_input_is_one_clear_line(tmp_path, name):
    case = CASES[name]
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    write_cdv_questions(workdir)
    with OpenAIServer() as server:
        config, target, api_key = case.setup(workdir, server.base_url)
        run = run_workflow(workdir, config, target, api_key=api_key, check=False)
        requests = server.total_requests

    assert run.returncode != 0, f"{name}: the run succeeded"
    assert "Traceback" not in run.stderr, run.stderr[-3000:]
    errors = error_lines(run.stderr)
    assert len(errors) == 1, f"{name}: expected one error line, got {errors}\n{run.stderr[-3000:]}"
    for words in case.says:
        assert words in errors[0], f"{name}: {errors[0]!r} does not name {words!r}"
    assert requests == 0, f"{name}: {requests} model calls were made before the error"
    assert cached_messages(workdir / "results" / "cache" / "llm") == []
    assert not (workdir / target).exists()
    assert not any(path.exists() for path in judge_cell(workdir).values() if path.suffix != ".log")
