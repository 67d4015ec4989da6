"""Secrets: an API key lives only in its environment variable; no file the workflow writes contains it."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest

from tests.support.api_workdir import (
    error_lines,
    run_workflow,
    write_api_config,
    write_cdv_questions,
    write_judging_data,
)
from tests.support.helpers import make_workdir
from tests.support.openai_server import OpenAIServer

pytestmark = pytest.mark.slow

TARGETS = (
    "results/judging/tiny/judgments/api/baseline/umbrela.jsonl",
    "results/cdv/tinyqa/api/api/search.jsonl",
)
# Faults make the client log retries and failures: the messages most likely to echo a request's headers.
FAULTS = {"rate_limit": 0.1, "server_error": 0.1, "drop": 0.05, "empty": 0.05}


def files_containing(workdir: Path, secret: str) -> list[str]:
    """Every file below workdir (results/, .snakemake/, logs, the cache, config) containing `secret`."""
    needle = secret.encode()
    return [
        str(path.relative_to(workdir))
        for path in workdir.rglob("*")
        if path.is_file() and not path.is_symlink() and needle in path.read_bytes()
    ]


def test_planted_key_is_used_but_never_written(tmp_path):
    key = f"sk-test-{secrets.token_hex(16)}"
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    write_cdv_questions(workdir)
    with OpenAIServer(require_key=key, faults=FAULTS, seed=1, retry_after=0.05) as server:
        run = run_workflow(workdir, write_api_config(workdir, server.base_url), *TARGETS, api_key=key)
        assert server.api_keys == {key}, "the key in the environment variable was not the one sent"
        assert server.total_requests > 0

    assert any((workdir / "results" / "cache" / "llm").glob("*.jsonl")) and (workdir / ".snakemake").is_dir()
    assert files_containing(workdir, key) == []
    assert key not in run.stdout + run.stderr


def test_rejected_key_is_not_echoed(tmp_path):
    key = f"sk-test-{secrets.token_hex(16)}"
    workdir = make_workdir(tmp_path / "work")
    write_judging_data(workdir)
    with OpenAIServer(require_key="sk-test-the-right-one") as server:
        run = run_workflow(
            workdir, write_api_config(workdir, server.base_url), TARGETS[0], api_key=key, check=False
        )
        assert server.api_keys == {key}

    assert run.returncode != 0
    errors = error_lines(run.stderr)
    assert len(errors) == 1 and "models.api.api_key_env" in errors[0], run.stderr[-3000:]
    assert key not in run.stdout + run.stderr
    assert files_containing(workdir, key) == []
