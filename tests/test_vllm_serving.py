"""vLLM models served side by side inside one job (stressprobe.llm.serving), with the stand-in server
tests/support/vllm_standin/vllm/entrypoints/cli/main.py: several servers on their own GPUs and tensor
parallelism need GPUs (the real server, on the CPU, is tested in tests/test_vllm_real.py and, under the
workflow's cdv_vllm_served, in tests/test_vllm_cdv.py)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, open_client
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.serving import (
    SERVED_URL_KEY,
    assign_gpus,
    job_gpus,
    serve_models,
    server_command,
)
from tests.support.helpers import ROOT

STANDIN = ROOT / "tests" / "support" / "vllm_standin"
MODELS = {
    "big": {
        "backend": "vllm",
        "model": "org/big-72b",
        "gpus": 2,
        "tensor_parallel_size": 2,
        "max_model_len": 4096,
    },
    "small": {"backend": "vllm", "model": "org/small-27b", "gpus": 1},
    "api": {"backend": "openai", "model": "gpt-x"},
}


@pytest.fixture
def standin(monkeypatch, tmp_path):
    """The stand-in vllm package on the servers' PYTHONPATH (and this process's), its event log."""
    log = tmp_path / "vllm-events.jsonl"
    path = os.pathsep.join(filter(None, [str(STANDIN), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("STRESSPROBE_VLLM_STANDIN_LOG", str(log))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    return log


def events(log) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def test_the_command_carries_the_in_process_settings_and_vllm_sampling_defaults():
    entry = {**MODELS["big"], "enforce_eager": True, "kv_cache_memory_bytes": 1 << 28}
    command = server_command(entry, 8123, seed=7, python="py")
    assert command[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", "org/big-72b"]
    switches = [c for c in command if c in ("--enable-prefix-caching", "--enforce-eager")]
    assert switches == ["--enable-prefix-caching", "--enforce-eager"]
    rest = [c for c in command[5:] if c not in switches]
    flags = dict(zip(rest[::2], rest[1::2], strict=True))
    assert flags["--served-model-name"] == "org/big-72b"
    assert (flags["--host"], flags["--port"], flags["--seed"]) == ("127.0.0.1", "8123", "7")
    assert (flags["--tensor-parallel-size"], flags["--max-model-len"]) == ("2", "4096")
    assert (flags["--generation-config"], flags["--kv-cache-memory-bytes"]) == ("vllm", str(1 << 28))
    # Off and unset settings are left to vLLM's defaults.
    plain = server_command(MODELS["small"], 8123, seed=7, python="py")
    assert "--enforce-eager" not in plain and "--kv-cache-memory-bytes" not in plain


def test_each_model_gets_its_own_slice_of_the_jobs_gpus():
    assert job_gpus(3, {}) == ["0", "1", "2"]
    assert job_gpus(3, {"CUDA_VISIBLE_DEVICES": "4,5,6"}) == ["4", "5", "6"]
    assert job_gpus(3, {"SLURM_JOB_GPUS": "2,3,7"}) == ["2", "3", "7"]
    served = {name: MODELS[name] for name in ("big", "small")}
    assert assign_gpus(served, ["4", "5", "6"]) == {"big": ["4", "5"], "small": ["6"]}
    with pytest.raises(StressprobeError, match=r"need 3 GPUs \(big 2, small 1\) but the job sees 2"):
        assign_gpus(served, ["0", "1"])


def test_served_models_answer_with_their_vllm_identity_and_stop_with_the_job(standin, tmp_path):
    request = Request.chat(user="Which is right? Answer: <letter>", max_tokens=8, temperature=0, n=3, seed=1)
    with serve_models(MODELS, ["big", "small"], tmp_path / "logs" / "job", seed=3) as served:
        processes = {name: entry[SERVED_URL_KEY] for name, entry in served.items() if SERVED_URL_KEY in entry}
        assert set(processes) == {"big", "small"} and SERVED_URL_KEY not in served["api"]
        assert backend_identity("big", served["big"]) == backend_identity("big", MODELS["big"])
        with open_client(served, "big", tmp_path / "cache.sqlite") as client:
            (response,) = client.generate([request])
            assert client.backend.kind == "vllm"
        pids = [e["pid"] for e in events(standin) if e["event"] == "load"]
    # Greedy: one sample asked for, repeated n times, as the in-process backend does.
    assert response.error is None and response.texts == [response.texts[0]] * 3
    assert response.texts[0].startswith("Answer: ")
    loads = {e["model"]: e["gpus"] for e in events(standin) if e["event"] == "load"}
    assert loads == {"org/big-72b": "0,1", "org/small-27b": "2"}
    assert (tmp_path / "logs" / "job.big.server.log").read_text().startswith("stand-in vLLM server")
    for pid in pids:  # terminated when the block ends
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)

    # The same request answered in-process comes from the cache: the identity is the same.
    with open_client(MODELS, "big", tmp_path / "cache.sqlite") as client:
        (again,) = client.generate([request])
    assert again.cached and again.texts == response.texts
    assert [e["event"] for e in events(standin)].count("load") == 3  # the in-process engine loads


def test_a_prefilled_answer_is_continued_by_the_server(tmp_path):
    from tests.support.openai_server import OpenAIServer

    request = Request.chat(user="Which? Answer: <letter>", prefill="Answer:", max_tokens=4, temperature=0)
    with OpenAIServer() as server:
        models = {"m": {"backend": "vllm", "model": "test-model", SERVED_URL_KEY: server.base_url}}
        with open_client(models, "m", tmp_path / "cache.sqlite") as client:
            (response,) = client.generate([request])
        (body,) = [json.loads(b) for b in server.requests]
    assert response.error is None
    assert body["messages"][-1] == {"role": "assistant", "content": "Answer:"}
    assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)


def test_no_config_file_can_point_a_vllm_model_at_a_server():
    from stressprobe.config import validate_config

    config = {"models": {"m": {"backend": "vllm", "model": "org/m", SERVED_URL_KEY: "http://x:1/v1"}}}
    with pytest.raises(StressprobeError, match=SERVED_URL_KEY):
        validate_config(config, ROOT / "workflow" / "schemas" / "config.schema.yaml")


def test_the_reason_a_server_gives_is_its_last_exception_not_a_frame(tmp_path):
    from stressprobe.llm.serving import log_tail

    log = tmp_path / "server.log"
    log.write_text(
        "(APIServer pid=7) INFO loading\nTraceback (most recent call last):\n"
        '  File "x.py", line 1, in <module>\n    raise ValueError(...)\n'
        "pydantic_core.ValidationError: 1 validation error for ModelConfig\n"
        "  Value error, max_model_len (100000) is too long\n"
        "    For further information visit https://errors.pydantic.dev\n"
    )
    assert log_tail(log) == (
        "pydantic_core.ValidationError: 1 validation error for ModelConfig | Value error, max_model_len "
        "(100000) is too long | For further information visit https://errors.pydantic.dev"
    )
    log.write_text("line 1\n\nline 2\n")  # no exception: the last lines
    assert log_tail(log) == "line 1 | line 2"
