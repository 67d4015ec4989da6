"""A stand-in for the `vllm` package, for the workflow tests of what needs GPUs: models on several GPUs (tensor
parallelism, each served model on its own slice of the job's GPUs) and GPU memory sizing. Everything else
runs real vLLM (tests/test_vllm_real.py, vLLM's CPU build).

Put tests/support/vllm_standin on PYTHONPATH. Every engine load (`LLM(...)`) and every `chat` call appends a
JSON line to the file named by STRESSPROBE_VLLM_STANDIN_LOG, so a test can count model loads and requests
per job. Answers follow the judge format (``##final score: <0-3>`` from a hash of the prompt), or the CDV one
(``Answer: <A-D>``) when the prompt asks for it, with top-k logprobs when asked. The OpenAI-compatible server
(`vllm serve`) records its load in the same log and
answers with the same `answer` function.
"""

from __future__ import annotations

import hashlib
import json
import os
from types import SimpleNamespace


def answer(conversation) -> tuple[str, int]:
    """The text the stand-in answers a conversation with, and its grade (0-3)."""
    prompt = "\n".join(m["content"] for m in conversation)
    grade = int(hashlib.sha256(prompt.encode()).hexdigest(), 16) % 4
    text = f"Answer: {'ABCD'[grade]}" if "Answer:" in prompt else f"##final score: {grade}"
    return text, grade


def record(event: dict) -> None:
    path = os.environ.get("STRESSPROBE_VLLM_STANDIN_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({**event, "pid": os.getpid()}) + "\n")


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
        outputs = []
        for conversation, params in zip(conversations, sampling_params, strict=True):
            prompt = "\n".join(m["content"] for m in conversation)
            text, grade = answer(conversation)
            k = params.kwargs.get("logprobs") or 0
            logprobs = None
            if k:
                logprobs = [
                    {
                        d: SimpleNamespace(logprob=-0.1 if d == grade else -3.0 - d, decoded_token=str(d))
                        for d in range(min(k, 4))
                    }
                ]
            samples = [
                SimpleNamespace(text=text, token_ids=[1, 2, 3, 4], logprobs=logprobs)
                for _ in range(params.kwargs.get("n") or 1)
            ]
            outputs.append(SimpleNamespace(outputs=samples, prompt_token_ids=[0] * (len(prompt) // 4)))
        return outputs
