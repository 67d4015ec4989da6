"""Offline batched generation on a GPU with vLLM (`vllm.LLM.chat` + `SamplingParams`).

vllm is an optional extra (`pip install stressprobe[vllm]` on a GPU node) and is imported only when a
vllm model is opened. All claimed requests go to vLLM in one `chat` call (continuous batching, prefix
caching); the client hands over `batch_size` requests at a time so each chunk is committed to the cache
as soon as it is done.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)


def open_backend(name: str, entry: dict[str, Any]) -> VllmBackend:
    """Import vllm and load the model on the GPU(s)."""
    if not entry.get("model"):
        raise StressprobeError(f"config models.{name}.model: missing; give a Hugging Face id or a local path")
    try:
        vllm = importlib.import_module("vllm")
    except ImportError:
        raise StressprobeError(
            f"config models.{name}.backend: vllm is not installed; run this model on a GPU node with "
            "`pip install stressprobe[vllm]`, or use the llamacpp/openai backend"
        ) from None
    return VllmBackend(name, entry, backend_identity(name, entry), vllm)


def sampling_params(vllm: Any, request: Request) -> Any:
    """vllm.SamplingParams for a Request; greedy requests ask for one sample (the client repeats it)."""
    return vllm.SamplingParams(
        n=1 if request.temperature == 0 else request.n,
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_tokens,
        seed=request.seed,
        logprobs=request.logprobs or None,
        stop=list(request.stop) or None,
    )


def parse_output(output: Any, request: Request) -> Response:
    """A Response from a vllm RequestOutput (top-k logprobs of the first sample, keyed by decoded token)."""
    samples = output.outputs
    texts = [s.text for s in samples]
    if len(texts) < request.n:  # greedy: one sample stands for all n
        texts = texts * request.n
    top_logprobs = None
    if request.logprobs and samples and samples[0].logprobs:
        top_logprobs = [
            {lp.decoded_token: lp.logprob for lp in position.values() if lp.decoded_token is not None}
            for position in samples[0].logprobs
        ]
    return Response(
        texts=texts,
        top_logprobs=top_logprobs,
        prompt_tokens=len(output.prompt_token_ids or []),
        completion_tokens=sum(len(s.token_ids) for s in samples),
    )


class VllmBackend(Backend):
    """A vllm.LLM engine; requests are answered in chunks of `batch_size`."""

    kind = "vllm"
    batch_size = 512

    def __init__(self, name: str, entry: dict[str, Any], identity: dict[str, Any], vllm: Any) -> None:
        super().__init__(name, identity)
        self._vllm = vllm
        self.llm = vllm.LLM(
            model=entry["model"],
            tensor_parallel_size=int(entry.get("tensor_parallel_size", 1)),
            gpu_memory_utilization=float(entry.get("gpu_memory_utilization", 0.9)),
            max_model_len=int(entry.get("max_model_len", 8192)),
            dtype=entry.get("dtype", "auto"),
            enable_prefix_caching=True,
        )

    def complete(self, requests: list[Request]) -> list[Response]:
        # One `chat` call either opens a new assistant turn or continues the final (prefilled) one.
        prefilled = [i for i, r in enumerate(requests) if r.prefill is not None]
        if prefilled and len(prefilled) < len(requests):
            responses: list[Response | None] = [None] * len(requests)
            for part in (prefilled, [i for i in range(len(requests)) if requests[i].prefill is None]):
                for i, response in zip(part, self.complete([requests[i] for i in part]), strict=True):
                    responses[i] = response
            return responses  # type: ignore[return-value]
        conversations = [r.message_dicts() for r in requests]
        params = [sampling_params(self._vllm, r) for r in requests]
        try:
            outputs = self.llm.chat(
                conversations,
                sampling_params=params,
                use_tqdm=False,
                add_generation_prompt=not prefilled,
                continue_final_message=bool(prefilled),
            )
        except (ValueError, RuntimeError) as exc:
            # A bad prompt (e.g. longer than max_model_len) fails the batch: answer one by one to isolate it.
            if len(requests) == 1:
                return [Response.failure(f"{self.name}: {type(exc).__name__}: {str(exc)[:200]}")]
            log.warning("%s: batch of %d failed (%s); retrying one by one", self.name, len(requests), exc)
            return [self.complete([r])[0] for r in requests]
        return [parse_output(o, r) for o, r in zip(outputs, requests, strict=True)]
