"""The vllm backend's translation of Requests, against a fake vllm module that records the calls (the real
engine's answers are tested in tests/test_vllm_real.py)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, open_client
from stressprobe.llm.cache import cache_key

ENTRY = {"backend": "vllm", "model": "org/model-8b", "tensor_parallel_size": 2, "max_model_len": 4096}


def fake_vllm(calls: dict) -> types.ModuleType:
    """A stand-in for the vllm module: records LLM(...) and chat(...) and answers by rule."""
    module = types.ModuleType("vllm")

    class SamplingParams:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

    class LLM:
        def __init__(self, **kwargs):
            calls["init"] = kwargs

        def chat(
            self, conversations, sampling_params, use_tqdm, add_generation_prompt, continue_final_message
        ):
            calls.setdefault("chat", []).append((conversations, sampling_params))
            calls.setdefault("continue", []).append((add_generation_prompt, continue_final_message))
            outputs = []
            for conversation, params in zip(conversations, sampling_params, strict=True):
                samples = [
                    SimpleNamespace(
                        text=f"{conversation[-1]['content']}#{i}",
                        token_ids=[1, 2],
                        logprobs=[
                            {
                                5: SimpleNamespace(logprob=-0.2, decoded_token=" 2"),
                                6: SimpleNamespace(logprob=-1.9, decoded_token="3"),
                            }
                        ]
                        if params.kwargs["logprobs"]
                        else None,
                    )
                    for i in range(params.kwargs["n"])
                ]
                outputs.append(SimpleNamespace(outputs=samples, prompt_token_ids=[0] * 7))
            return outputs

    module.LLM, module.SamplingParams = LLM, SamplingParams
    return module


def test_requests_become_one_chat_call_with_sampling_params(tmp_path, monkeypatch):
    calls: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(calls))
    requests = [
        Request.chat(system="s", user="greedy", n=3, logprobs=2, stop=("\n",), max_tokens=5),
        Request.chat(user="sampled", n=2, temperature=0.7, top_p=0.9, seed=4),
    ]
    with open_client({"big": ENTRY}, "big", tmp_path / "c.sqlite") as client:
        greedy, sampled = client.generate(requests)
        assert client.generate(requests)[0].cached
    assert calls["init"] == {
        "model": "org/model-8b",
        "tensor_parallel_size": 2,
        "gpu_memory_utilization": 0.9,
        "max_model_len": 4096,
        "dtype": "auto",
        "enable_prefix_caching": True,
        "enforce_eager": False,
        "kv_cache_memory_bytes": None,
    }
    assert len(calls["chat"]) == 1  # all prompts in one batch, the rerun came from the cache
    conversations, params = calls["chat"][0]
    assert conversations[0] == [{"role": "system", "content": "s"}, {"role": "user", "content": "greedy"}]
    assert params[0].kwargs == {
        "n": 1,
        "temperature": 0.0,
        "top_p": 1.0,
        "max_tokens": 5,
        "seed": 0,
        "logprobs": 2,
        "stop": ["\n"],
    }
    assert params[1].kwargs == {
        "n": 2,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 64,
        "seed": 4,
        "logprobs": None,
        "stop": None,
    }
    assert greedy.texts == ["greedy#0"] * 3 and greedy.top_logprobs == [{" 2": -0.2, "3": -1.9}]
    assert sampled.texts == ["sampled#0", "sampled#1"] and sampled.top_logprobs is None
    assert (sampled.prompt_tokens, sampled.completion_tokens) == (7, 4)


def test_prefilled_answers_are_continued_in_their_own_chat_call(tmp_path, monkeypatch):
    calls: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(calls))
    requests = [
        Request.chat(user="first", prefill="##final score:"),
        Request.chat(user="second"),
        Request.chat(user="third", prefill="##final score:"),
    ]
    with open_client({"big": ENTRY}, "big", tmp_path / "c.sqlite") as client:
        first, second, third = client.generate(requests)
    # vLLM applies the chat template per call: new turns and continued answers go in separate calls.
    assert sorted(calls["continue"]) == [(False, True), (True, False)]
    by_mode = dict(zip(calls["continue"], calls["chat"], strict=True))
    assert [c[-1] for c in by_mode[(False, True)][0]] == [
        {"role": "assistant", "content": "##final score:"}
    ] * 2
    assert [c[-1]["content"] for c in by_mode[(True, False)][0]] == ["second"]
    assert (first.text, second.text, third.text) == ("##final score:#0", "second#0", "##final score:#0")


def test_missing_vllm_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` fail
    with pytest.raises(StressprobeError, match=r"models\.big\.backend: vllm is not installed"):
        open_client({"big": ENTRY}, "big", tmp_path / "c.sqlite")


def test_a_temperature_below_vllms_floor_is_decoded_greedily(tmp_path, monkeypatch):
    calls: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(calls))
    request = Request.chat(user="evaluate", n=2, temperature=0.001, seed=3)
    with open_client({"big": ENTRY}, "big", tmp_path / "c.sqlite") as client:
        (answer,) = client.generate([request])
    # vLLM would raise 0.001 to 0.01 and sample; greedy is one sample, repeated.
    (params,) = calls["chat"][0][1]
    assert (params.kwargs["temperature"], params.kwargs["n"]) == (0.0, 1)
    assert answer.texts == ["evaluate#0"] * 2

    # `vllm` leaves the temperature to vLLM, and is another model identity in the cache.
    entry = {**ENTRY, "tiny_temperature": "vllm"}
    with open_client({"big": entry}, "big", tmp_path / "c.sqlite") as client:
        (sampled,) = client.generate([request])
    (params,) = calls["chat"][1][1]
    assert (params.kwargs["temperature"], params.kwargs["n"]) == (0.001, 2)
    assert not sampled.cached and sampled.texts == ["evaluate#0", "evaluate#1"]


def test_requests_go_to_vllm_in_chunks_of_batch_size_each_cached_as_it_returns(tmp_path, monkeypatch):
    calls: dict = {}
    monkeypatch.setitem(sys.modules, "vllm", fake_vllm(calls))
    requests = [Request.chat(user=f"q{i}") for i in range(5)]
    with open_client({"big": {**ENTRY, "batch_size": 2}}, "big", tmp_path / "c.sqlite") as client:
        keys = [cache_key(client.backend.identity, r) for r in requests]
        answer = client.backend.llm.chat
        stored = []  # answers in the cache when each call is made

        def chat(*args, **kwargs):
            stored.append(len(client.cache.get_many(keys)))
            return answer(*args, **kwargs)

        client.backend.llm.chat = chat
        client.generate(requests)
    assert [len(c[0]) for c in calls["chat"]] == [2, 2, 1]
    assert stored == [0, 2, 4]  # a chunk is committed before the next is asked


class ValidationError(Exception):
    """As vllm.exceptions.VLLMValidationError: no ValueError."""


def test_a_prompt_longer_than_max_model_len_stops_the_job_naming_the_key(tmp_path, monkeypatch):
    calls: dict = {}
    module = fake_vllm(calls)
    message = (  # as vLLM 0.32's LLM.chat words it
        "This model's maximum context length is 4096 tokens. However, your prompt contains 5000 input tokens, "
        "which exceeds this limit even without any output tokens. Please reduce the length of the input "
        "prompt. (parameter=input_tokens, value=5000)"
    )

    def refuse(self, conversations, **kwargs):
        calls.setdefault("chat", []).append(conversations)
        raise ValidationError(message)

    module.LLM.chat = refuse
    monkeypatch.setitem(sys.modules, "vllm", module)
    with open_client({"big": ENTRY}, "big", tmp_path / "c.sqlite") as client:
        with pytest.raises(StressprobeError) as raised:
            client.generate([Request.chat(user="long"), Request.chat(user="short")])
        assert str(raised.value) == (
            f"config models.big.max_model_len: 'org/model-8b' cannot take a prompt this long ({message} "
            "(max_model_len 4096)); raise models.big.max_model_len (up to the model's context length) or "
            "shorten the inputs; vLLM's messages are in the job's log; the answers received so far stay cached"
        )
        assert len(calls["chat"]) == 1  # not asked again one by one
        # The claims are released: the same requests can be asked again.
        with pytest.raises(StressprobeError):
            client.generate([Request.chat(user="long")])
