"""A stand-in for the `vllm` package, for the workflow tests of what needs GPUs: models on several GPUs (tensor
parallelism, each served model on its own slice of the job's GPUs). Everything else runs real vLLM
(tests/support/vllm_real.py, vLLM's CPU build).

Put tests/support/vllm_standin on PYTHONPATH. Every engine load (`LLM(...)`) and every `chat` call appends a
JSON line to the file named by STRESSPROBE_VLLM_STANDIN_LOG, so a test can count model loads and requests
per job. Every answer is the CDV one (``Answer: <A-D>``, from a hash of the prompt), or with
STRESSPROBE_VLLM_STANDIN_ROLES set (the rehearsal, tests/support/rehearsal.py) the role server's. A prompt of
more tokens than `max_model_len` (a token is 4 characters here) is refused as vLLM 0.32's `LLM.chat` refuses
it: the whole call raises VLLMValidationError. The OpenAI-compatible server (`vllm serve`,
entrypoints/cli/main.py) records its load in the same log, answers with the same `answer` function and
refuses such a prompt with HTTP 400.
"""

from __future__ import annotations

import hashlib
import json
import os
from types import SimpleNamespace


def answer(conversation) -> str:
    """The text the stand-in answers a conversation with; with STRESSPROBE_VLLM_STANDIN_ROLES set, the
    answer of the rehearsal's role server (each role in the format its prompt asks for)."""
    if os.environ.get("STRESSPROBE_VLLM_STANDIN_ROLES"):
        from tests.support.rehearsal import role_responder

        return role_responder({"messages": list(conversation)}, 0)
    prompt = "\n".join(m["content"] for m in conversation)
    return f"Answer: {'ABCD'[int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 4]}"


def record(event: dict) -> None:
    path = os.environ.get("STRESSPROBE_VLLM_STANDIN_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**event, "pid": os.getpid()}) + "\n")


def prompt_tokens(conversation) -> int:
    """The stand-in's token count of a conversation."""
    return len("\n".join(m["content"] for m in conversation)) // 4


class VLLMValidationError(Exception):
    """As vllm.exceptions.VLLMValidationError: no ValueError."""


class SamplingParams:
    def __init__(self, **kwargs):
        self.kwargs = kwargs


class LLM:
    def __init__(self, **kwargs):
        self.kwargs = kwargs
        record({"event": "load", "model": kwargs.get("model")})

    def chat(
        self,
        conversations,
        sampling_params,
        use_tqdm=False,
        add_generation_prompt=True,
        continue_final_message=False,
    ):
        record({"event": "chat", "model": self.kwargs.get("model"), "requests": len(conversations)})
        limit = self.kwargs.get("max_model_len")
        for conversation in conversations:
            if limit is not None and prompt_tokens(conversation) > limit:
                raise VLLMValidationError(  # vLLM 0.32's wording
                    f"This model's maximum context length is {limit} tokens. However, your prompt contains "
                    f"{prompt_tokens(conversation)} input tokens, which exceeds this limit even without any "
                    "output tokens. Please reduce the length of the input prompt. "
                    f"(parameter=input_tokens, value={prompt_tokens(conversation)})"
                )
        outputs = []
        for conversation, params in zip(conversations, sampling_params, strict=True):
            samples = [
                SimpleNamespace(text=answer(conversation), token_ids=[1, 2, 3, 4], logprobs=None)
                for _ in range(params.kwargs.get("n") or 1)
            ]
            outputs.append(
                SimpleNamespace(outputs=samples, prompt_token_ids=[0] * prompt_tokens(conversation))
            )
        return outputs
