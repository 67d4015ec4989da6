"""The preflight before the first paid call, against the real test server's model listing, and the
substitution of retired models (`models.<name>.substitute`): what is run, keyed and marked in tables."""

from __future__ import annotations

import csv
import json
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import pandas as pd

from stressprobe.llm import Request
from stressprobe.llm.backends import backend_identity, run_entry
from stressprobe.llm.cache import cache_key
from stressprobe.preflight import (
    listing_request,
    models_in_use,
    problems,
    raise_on_problems,
    run_preflight,
)
from stressprobe.tables import mark_substitutes
from tests.support.api_workdir import (
    error_lines,
    judge_cell,
    run_workflow,
    write_api_config,
    write_judging_data,
)
from tests.support.openai_server import OpenAIServer

TODAY = date(2026, 12, 3)
KEY = "STRESSPROBE_TEST_API_KEY"


def api(server: OpenAIServer, model: str, **extra) -> dict:
    return {"backend": "openai", "model": model, "base_url": server.base_url, "api_key_env": KEY, **extra}


def test_unserved_model_is_refused_before_any_completion():
    with OpenAIServer(model_ids=("test-model",)) as server:
        models = {"ok": api(server, "test-model"), "gone": api(server, "retired-model")}
        findings = run_preflight(models, models, 30, today=TODAY, env={KEY: "sk-x"})
        assert problems(findings) == [
            f"config models.gone.model: retired-model is not served by {server.base_url} (not in its model "
            "listing: retired or misspelt); set models.gone.substitute to a current model id"
        ]
        assert server.total_requests == 0  # the listing only: no chat completion


def test_missing_key_of_a_provider_is_refused_without_a_request():
    models = {
        "claude": {
            "backend": "openai",
            "model": "claude-x",
            "base_url": "https://api.anthropic.com/v1/",
            "api_key_env": "NO_SUCH_KEY_VAR",
        }
    }

    def no_fetch(url, headers):
        raise AssertionError("no listing is asked without a key")

    findings = run_preflight(models, models, 30, today=TODAY, env={}, fetch=no_fetch)
    assert problems(findings) == [
        "config models.claude.api_key_env: environment variable NO_SUCH_KEY_VAR is not set; "
        "export NO_SUCH_KEY_VAR=<your API key> (keys never go in the config)"
    ]


def test_a_llamacpp_server_answers_any_id():
    listing = {"/models/x.gguf": {"id": "/models/x.gguf", "object": "model", "owned_by": "llamacpp"}}
    models = {"m": {"backend": "openai", "model": "anything", "base_url": "http://127.0.0.1:1/v1"}}
    findings = run_preflight(models, models, 1, today=TODAY, env={}, fetch=lambda url, headers: listing)
    assert problems(findings) == []
    other = {"y": {"id": "y", "owned_by": "vllm"}}
    assert len(problems(run_preflight(models, models, 1, today=TODAY, env={}, fetch=lambda u, h: other))) == 1


def test_the_llama_cpp_python_server_answers_any_id():
    from tests.support.llama_server import LlamaServer

    with LlamaServer() as server:
        models = {"m": {"backend": "openai", "model": "any-name", "base_url": server.base_url}}
        assert problems(run_preflight(models, models, 1, today=TODAY, env={})) == []


def test_anthropic_listing_uses_its_own_headers():
    url, headers = listing_request("https://api.anthropic.com/v1/", "k")
    assert url == "https://api.anthropic.com/v1/models?limit=1000"
    assert headers == {"x-api-key": "k", "anthropic-version": "2023-06-01"}
    assert listing_request("https://api.openai.com/v1", "k") == (
        "https://api.openai.com/v1/models",
        {"Authorization": "Bearer k"},
    )


def test_o_series_rules_checked_against_the_entry():
    with OpenAIServer(model_ids=("o3-mini", "o1-mini")) as server:
        models = {
            "o3": api(server, "o3-mini", token_limit_param="max_completion_tokens"),
            "o1": api(
                server,
                "o1-mini",
                token_limit_param="max_completion_tokens",
                unsupported_params=["temperature", "top_p"],
                system_role="user",
            ),
        }
        findings = run_preflight(models, models, 30, today=TODAY, env={KEY: "sk-x"})
        assert problems(findings) == [
            "config models.o3.unsupported_params: o3-mini refuses temperature and top_p (only the default); "
            "add temperature, top_p to unsupported_params"
        ]
        models["o1"].pop("token_limit_param")
        assert problems(run_preflight(["o1"], models, 30, today=TODAY, env={KEY: "sk-x"})) == [
            "config models.o1.token_limit_param: o1-mini takes max_completion_tokens, not max_tokens; "
            "set token_limit_param: max_completion_tokens"
        ]
        assert server.total_requests == 0


def test_shutdown_before_the_estimated_end_warns():
    with OpenAIServer(model_ids=("snap",), shutdown_dates={"snap": "2027-01-14"}) as server:
        models = {"m": api(server, "snap")}
        # Today + 42 days = 2027-01-14: the last day counts; 41 days ends the day before.
        late = run_preflight(models, models, 42, today=TODAY, env={KEY: "k"})
        assert [(f.level, f.message) for f in late if f.level == "warning"] == [
            (
                "warning",
                "config models.m.model: snap shuts down on 2027-01-14 (the provider's model listing), before "
                "the run's estimated end 2027-01-14; set models.m.substitute to run one current model "
                "throughout",
            )
        ]
        assert problems(late) == []
        early = run_preflight(models, models, 41, today=TODAY, env={KEY: "k"})
        assert [f.level for f in early] == ["ok"]


def test_rejected_key_and_unreachable_server_are_problems():
    with OpenAIServer(require_key="sk-right") as server:
        models = {"m": api(server, "test-model")}
        assert problems(run_preflight(models, models, 1, today=TODAY, env={KEY: "sk-wrong"})) == [
            f"config models.m.base_url: {server.base_url}/models rejected the API key (HTTP 401); "
            "the model listing is needed first"
        ]
        url = server.base_url
    models = {"m": {**models["m"], "base_url": url}}  # the server has stopped
    (line,) = problems(run_preflight(models, models, 1, today=TODAY, env={KEY: "sk-right"}))
    assert (
        line
        == f"config models.m.base_url: cannot reach {url}/models (ConnectError); the model listing is needed first"
    )


def test_substitute_is_checked_and_keyed():
    with OpenAIServer(model_ids=("new-model",)) as server:
        entry = api(server, "retired-model", substitute="new-model")
        assert problems(run_preflight({"m": entry}, {"m": entry}, 1, today=TODAY, env={KEY: "k"})) == []
    request = Request.chat(user="hello")
    plain = {k: v for k, v in entry.items() if k != "substitute"}
    assert backend_identity("m", entry)["model"] == "new-model"
    assert cache_key(backend_identity("m", entry), request) == cache_key(
        backend_identity("m", run_entry(plain) | {"model": "new-model"}), request
    )
    assert cache_key(backend_identity("m", entry), request) != cache_key(
        backend_identity("m", plain), request
    )


def test_provenance_records_the_id_run():
    from stressprobe.provenance import model_identities

    models = {"m": {"backend": "openai", "model": "paper-id", "substitute": "run-id", "base_url": "http://x"}}
    assert model_identities(models) == {
        "m": {"backend": "openai", "model": "paper-id", "substitute": "run-id"}
    }


def test_vllm_models_resolve_and_hold_the_prompts(tmp_path: Path):
    folder = tmp_path / "model"
    folder.mkdir()
    models = {
        "local": {"backend": "vllm", "model": str(folder), "max_model_len": 1024},
        "missing": {"backend": "vllm", "model": str(tmp_path / "nowhere"), "max_model_len": 1024},
        "hub": {"backend": "vllm", "model": "org/not-cached", "max_model_len": 1024},
    }
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    findings = run_preflight(models, models, 1, longest={"local": 1025}, today=TODAY, env=env)
    assert problems(findings) == [
        "config models.hub.model: org/not-cached is not in the Hugging Face cache and HF_HUB_OFFLINE is set; "
        "download it first",
        "config models.local.max_model_len: 1024 tokens cannot hold the longest request the config sends it "
        "(about 1025 tokens of prompt and maximum answer, estimated as in the cost estimate); raise "
        "max_model_len or lower the task's max_tokens",
        f"config models.missing.model: {tmp_path / 'nowhere'} is not a folder; give a model folder in Hugging "
        "Face format or a hub id",
    ]
    # A cached hub id resolves (the cache's layout: models--org--name/snapshots/<rev>/config.json).
    snapshot = tmp_path / "hub" / "models--org--not-cached" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--org--not-cached" / "refs").mkdir()
    (tmp_path / "hub" / "models--org--not-cached" / "refs" / "main").write_text("abc")
    assert problems(run_preflight(["hub"], models, 1, today=TODAY, env=env)) == []


def test_a_gated_hub_model_needs_hf_token(tmp_path: Path, monkeypatch):
    from huggingface_hub import constants

    from tests.support.file_server import FileServer

    # The check is of the `env` given; an earlier test's import of `datasets` may have left the process's
    # Hugging Face client in its offline mode, which is read once per process.
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)

    # The hub's model info as a static file (GET {endpoint}/api/models/<org>/<name>).
    for name, gated in (("gated", "manual"), ("open", False)):
        info = tmp_path / "site" / "api" / "models" / "org" / name
        info.parent.mkdir(parents=True, exist_ok=True)
        info.write_text(json.dumps({"id": f"org/{name}", "gated": gated, "private": False}))
    models = {n: {"backend": "vllm", "model": f"org/{n}"} for n in ("gated", "open", "absent")}
    with FileServer(tmp_path / "site") as site:
        env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_ENDPOINT": site.url("").rstrip("/")}
        assert problems(run_preflight(models, models, 1, today=TODAY, env=env)) == [
            "config models.absent.model: org/absent is not a model on the Hugging Face hub; fix the id or "
            "give a local folder",
            "config models.gated.model: org/gated is gated; accept its licence on huggingface.co and export "
            "HF_TOKEN=<your token>",
        ]
        assert (
            problems(run_preflight(["gated"], models, 1, today=TODAY, env={**env, "HF_TOKEN": "hf_x"})) == []
        )


def test_trained_base_models_resolve(tmp_path: Path):
    from stressprobe.preflight import trained_base_models

    folder = tmp_path / "base"
    folder.mkdir()
    config = {
        "cdv": {
            "classifier": {"lora": {"enabled": True, "base_models": [str(folder), "org/absent"]}},
            "dpo": {"train": False, "base_models": ["org/not-trained"]},
        }
    }
    trained = trained_base_models(config)
    assert trained == [
        ("cdv.classifier.lora.base_models[0]", str(folder)),
        ("cdv.classifier.lora.base_models[1]", "org/absent"),
    ]
    env = {"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"}
    assert problems(run_preflight([], {}, 1, today=TODAY, env=env, trained=trained)) == [
        "config cdv.classifier.lora.base_models[1]: org/absent is not in the Hugging Face cache and "
        "HF_HUB_OFFLINE is set; download it first"
    ]


def test_models_in_use_follows_the_enabled_stages():
    config = {
        "judging": {"enabled": True, "models": ["a"], "summarizer": "s"},
        "cdv": {"enabled": False, "eval_models": ["c"]},
    }
    assert models_in_use(config) == ["a", "s"]


def test_raise_names_every_problem_on_its_own_line():
    with OpenAIServer() as server:
        models = {"x": api(server, "gone-1"), "y": api(server, "gone-2")}
        findings = run_preflight(models, models, 1, today=TODAY, env={KEY: "k"})
    try:
        raise_on_problems(findings)
    except Exception as exc:  # noqa: BLE001
        lines = str(exc).splitlines()
    assert lines[0] == "preflight: 2 problem(s), no model was called:"
    assert [line.split(":")[0].strip() for line in lines[1:]] == [
        "config models.x.model",
        "config models.y.model",
    ]


def test_table_rows_computed_with_a_substitute_say_so():
    models = {
        "sub": {"backend": "openai", "model": "paper-id", "substitute": "run-id"},
        "same": {"backend": "openai", "model": "kept-id"},
    }
    frame = pd.DataFrame({"dataset": ["d", "d"], "model": ["sub", "same"], "accuracy": [0.5, 0.25]})
    marked = mark_substitutes(frame, models)
    assert list(marked.columns) == ["dataset", "model", "model_paper", "model_run", "accuracy"]
    assert marked[["model_paper", "model_run"]].values.tolist() == [
        ["paper-id", "run-id"],
        ["kept-id", "kept-id"],
    ]
    # No substitute among the table's models: the table is left as it is.
    assert mark_substitutes(frame.iloc[[1]], models).equals(frame.iloc[[1]])


def workflow_config(workdir: Path, server: OpenAIServer, edits: dict) -> Path:
    write_judging_data(workdir)
    return write_api_config(workdir, server.base_url, {"cdv.enabled": False, **edits})


def test_a_run_with_an_unserved_model_stops_before_its_first_job(workdir: Path):
    with OpenAIServer(model_ids=("test-model",)) as server:
        config = workflow_config(
            workdir, server, {"models.api.model": "retired-model", "preflight.before_run": True}
        )
        cell = judge_cell(workdir)
        result = run_workflow(workdir, config, str(cell["judgments"].relative_to(workdir)), check=False)
        assert result.returncode != 0
        assert error_lines(result.stderr) == ["error: preflight: 1 problem(s), no model was called:"]
        assert (
            f"  config models.api.model: retired-model is not served by {server.base_url} (not in its model "
            "listing: retired or misspelt); set models.api.substitute to a current model id"
        ) in result.stderr.splitlines()
        assert server.total_requests == 0
        assert not (workdir / "results" / "data").exists()  # no job ran, not even the local ones


def test_a_run_with_a_substitute_completes_on_the_substitute(workdir: Path):
    with OpenAIServer(model_ids=("test-model",)) as server:
        config = workflow_config(
            workdir,
            server,
            {
                "models.api.model": "retired-model",
                "models.api.substitute": "test-model",
                "preflight.before_run": True,
            },
        )
        table = "results/tables/kappa_agreement.csv"
        run_workflow(workdir, config, table)
        sent = {json.loads(body)["model"] for body in server.requests}
        assert sent == {"test-model"}
        rows = pd.read_csv(workdir / table)
        assert set(rows["model"]) == {"api"}
        assert set(rows["model_paper"]) == {"retired-model"}
        assert set(rows["model_run"]) == {"test-model"}


def test_a_shutdown_before_the_run_ends_is_a_warning_line_and_the_run_goes_on(workdir: Path):
    with OpenAIServer(model_ids=("test-model",), shutdown_dates={"test-model": "2000-01-01"}) as server:
        config = workflow_config(workdir, server, {"preflight.before_run": True})
        result = run_workflow(workdir, config, "results/data/tiny/pairs.jsonl", "preflight")
    assert [line for line in result.stderr.splitlines() if line.startswith("warning: ")] == [
        "warning: config models.api.model: test-model shuts down on 2000-01-01 (the provider's model listing), "
        f"before the run's estimated end {(datetime.now(UTC).date() + timedelta(days=30)).isoformat()}; set "
        "models.api.substitute to run one current model throughout"
    ]
    assert (workdir / "results/preflight/preflight.csv").is_file()


def test_preflight_rule_and_the_bill_show_the_same_findings(workdir: Path):
    with OpenAIServer(model_ids=("test-model",)) as server:
        line = (
            f"config models.api.model: retired-model is not served by {server.base_url} (not in its model "
            "listing: retired or misspelt); set models.api.substitute to a current model id"
        )
        config = workflow_config(workdir, server, {"models.api.model": "retired-model"})
        refused = run_workflow(workdir, config, "preflight", check=False)
        assert refused.returncode != 0 and f"  {line}" in refused.stderr.splitlines()
        assert not (workdir / "results/preflight/preflight.csv").exists()
        # A run that calls no model is not stopped by preflight.before_run: the bill shows the findings.
        billed = workflow_config(
            workdir, server, {"models.api.model": "retired-model", "preflight.before_run": True}
        )
        run_workflow(workdir, billed, "cost_estimate", "-f")
        (bill,) = csv.DictReader((workdir / "results/cost/models.csv").open())
        assert (bill["model"], bill["preflight"]) == ("api", "error")
        assert f"- **error** `api`: {line}" in (workdir / "results/cost/estimate.md").read_text().splitlines()
        substituted = workflow_config(
            workdir, server, {"models.api.model": "retired-model", "models.api.substitute": "test-model"}
        )
        run_workflow(workdir, substituted, "preflight")
        (row,) = csv.DictReader((workdir / "results/preflight/preflight.csv").open())
        assert (row["model"], row["level"]) == ("api", "ok")
        assert server.total_requests == 0


def test_the_bill_keeps_each_cells_longest_request_for_the_context_check():
    from stressprobe.cost import CacheView, bound_row, estimate_cell, total_row

    short, long = Request.chat(user="a" * 40, max_tokens=10), Request.chat(user="b" * 400, max_tokens=5)
    entry = {"backend": "vllm", "model": "org/m"}
    # 400 characters are 100 tokens, plus 4 for the message and 3 for the reply's priming; plus its 5 tokens.
    row = estimate_cell("judging", "d", "c", "m", entry, [short, long], CacheView("/nonexistent"))
    assert row.longest_request == 100 + 4 + 3 + 5
    bound = bound_row("d", "c", "m", entry, [(short, 3)])
    assert bound.longest_request == 10 + 4 + 3 + 10
    assert total_row([row, bound]).longest_request == 112


def test_the_preflight_refuses_an_unpinned_persona_pool_and_lists_a_pinned_one(workdir: Path):
    with OpenAIServer(model_ids=("test-model",)) as server:
        source = {"kind": "uspersona", "hf_dataset": "nvidia/Nemotron-Personas-USA"}
        edits = {
            "judging.conditions": ["baseline/umbrela", "uspersona/query"],
            "personas.sources": {"uspersona": source},
            "personas.unpinned": "refuse",
        }
        refused = run_workflow(workdir, workflow_config(workdir, server, edits), "preflight", check=False)
        assert refused.returncode != 0
        assert (
            "  personas.sources.uspersona: nvidia/Nemotron-Personas-USA has no 'revision': its current head "
            "would be read, not a fixed version; set 'personas.sources.uspersona.revision' to a dataset commit "
            "(or 'personas.sources.uspersona.path' to a local copy), or 'personas.unpinned: warn' to read the "
            "head anyway"
        ) in refused.stderr.splitlines()
        pinned = {**edits, "personas.sources": {"uspersona": {**source, "revision": "d" * 40}}}
        run_workflow(workdir, workflow_config(workdir, server, pinned), "preflight")
        rows = {r["model"]: r for r in csv.DictReader((workdir / "results/preflight/preflight.csv").open())}
        assert rows["personas.sources.uspersona"]["level"] == "ok"
        assert (
            rows["personas.sources.uspersona"]["message"]
            == f"nvidia/Nemotron-Personas-USA at revision {'d' * 40}"
        )
