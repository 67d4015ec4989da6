"""Offline batched generation on a GPU with vLLM (`vllm.LLM.chat` + `SamplingParams`), or the same model
answering from a vLLM server that the job started itself (stressprobe.llm.serving).

vllm is an optional extra (`pip install stressprobe[vllm]` on a GPU node) and is imported only when a
vllm model is opened. The client hands over `batch_size` requests (`models.<name>.batch_size`, 512 by
default) per `chat` call, which vLLM batches continuously with prefix caching, and commits each call's answers
to the cache when it returns, before the next is asked: a killed job loses at most one call's work. A request
vLLM refuses (a prompt longer than `max_model_len`) stops the job with one line naming the config key, as a
served model's HTTP 400 does (stressprobe.llm.failures). System turns are folded into the first user turn
where `system_role` says so, or (`auto`) where the chat template (the entry's `chat_template`, else the
model's) refuses one (stressprobe.llm.system_turns); a served model's template is asked of its server.

An entry that carries `served_base_url` (set at run time by `serving.serve_models`, never by a config file)
is answered over HTTP by the OpenAI backend's machinery instead, with the same `vllm` identity in the cache
keys: a request answered in-process is not paid again when served, nor the other way round.
"""

from __future__ import annotations

import dataclasses
import importlib
import logging
import re
from pathlib import Path
from typing import Any

import httpx

from stressprobe.errors import StressprobeError, one_line_tail
from stressprobe.llm import system_turns
from stressprobe.llm.backends import backend_identity, chat_template_text
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.backends.openai import OpenAIBackend
from stressprobe.llm.backends.openai_protocol import API_DEFAULTS, KEYLESS_PLACEHOLDER, preflight
from stressprobe.llm.failures import TOO_LONG, refusal
from stressprobe.llm.serving import SERVED_URL_KEY, engine_args
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)


# A served model: requests in flight at once (the server batches them on the GPU) and the time one may take.
SERVED_CONCURRENCY = 256
SERVED_TIMEOUT_S = 1800.0


def open_backend(name: str, entry: dict[str, Any]) -> Backend:
    """Import vllm and load the model on the GPU(s), or connect to the job's server of it."""
    if not entry.get("model"):
        raise StressprobeError(f"config models.{name}.model: missing; give a Hugging Face id or a local path")
    model = str(entry["model"])
    if model.startswith(("/", "./", "../")) and not Path(model).is_dir():
        raise StressprobeError(
            f"config models.{name}.model: {model} is not a folder; give the folder of a model in Hugging Face "
            "format or a Hugging Face id"
        )
    if entry.get("chat_template"):
        chat_template_text(name, entry)  # an unreadable file stops the job before the model loads
    if entry.get(SERVED_URL_KEY):
        return open_served_backend(name, entry)
    try:
        vllm = importlib.import_module("vllm")
    except ImportError:
        raise StressprobeError(
            f"config models.{name}.backend: vllm is not installed; run this model on a GPU node with "
            "`pip install stressprobe[vllm]`, or use the llamacpp/openai backend"
        ) from None
    share_job_log(logging.getLogger("vllm"))
    return VllmBackend(name, entry, backend_identity(name, entry), vllm)


def share_job_log(engine_log: logging.Logger) -> None:
    """vLLM's own records of this process (loading, KV cache size, warnings) go to the job's log too: vLLM
    gives its logger a stdout handler of its own and stops it propagating to the root logger."""
    for handler in logging.getLogger().handlers:
        if handler not in engine_log.handlers:
            engine_log.addHandler(handler)


# vLLM raises any positive temperature below this to it, with a warning (SamplingParams, "maxed it out").
VLLM_MIN_TEMPERATURE = 0.01


def as_decoded(request: Request, tiny_temperature: str) -> Request:
    """The request as vLLM is asked it: with `tiny_temperature: greedy` (the default) a temperature between
    0 and vLLM's floor (the CDV evaluation's 0.001) is decoded greedily, the limit such a temperature tends
    to, instead of sampling at vLLM's 0.01; `vllm` leaves it to vLLM. The cache key keeps the asked value."""
    if tiny_temperature == "greedy" and 0 < request.temperature < VLLM_MIN_TEMPERATURE:
        return dataclasses.replace(request, temperature=0.0)
    return request


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


# A chat template's refusal of a system turn (Gemma-2's "System role not supported").
SYSTEM_REFUSED = re.compile(r"system role|system message|system turn", re.IGNORECASE)

# A template is rendered without the model: the server answers at once or not at all.
TOKENIZE_TIMEOUT_S = 30

# Requests per `chat` call: enough for vLLM to fill a GPU's batch, few enough that a killed job loses little.
BATCH_SIZE = 512


class VllmBackend(Backend):
    """A vllm.LLM engine; requests are answered in chunks of `batch_size`."""

    kind = "vllm"

    def __init__(self, name: str, entry: dict[str, Any], identity: dict[str, Any], vllm: Any) -> None:
        super().__init__(name, identity)
        self._vllm = vllm
        self.tiny_temperature = entry.get("tiny_temperature", "greedy")
        self.batch_size = int(entry.get("batch_size", BATCH_SIZE))
        args = engine_args(entry)
        self.max_model_len = args["max_model_len"]
        self.model = args["model"]
        log.info("%s: loading %s in vLLM", name, args["model"])
        try:
            self.llm = vllm.LLM(**args)
        except Exception as exc:  # a config, memory or engine-start failure: vLLM raises many kinds
            reason = one_line_tail(str(exc), 1) or type(exc).__name__
            raise StressprobeError(
                f"config models.{name}: vLLM could not load {entry['model']} ({type(exc).__name__}: {reason}); "
                "vLLM's messages are in the job's log and output above"
            ) from exc
        self.system_role = entry.get("system_role", "auto")
        self.fold_system = system_turns.folds(name, self.system_role, self.render)

    def render(self, conversation: list[dict[str, str]]) -> str:
        """The prompt the engine's chat template makes of a conversation, as `LLM.chat` renders it (the
        tokenizer's `apply_chat_template` with the engine's `chat_template`); raises where the template does."""
        return self.llm.get_tokenizer().apply_chat_template(
            conversation,
            chat_template=getattr(self.llm, "chat_template", None),
            tokenize=False,
            add_generation_prompt=True,
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
        if self.fold_system:
            conversations = [system_turns.fold_system_turns(c) for c in conversations]
        params = [sampling_params(self._vllm, as_decoded(r, self.tiny_temperature)) for r in requests]
        log.info("%s: %d requests to vLLM", self.name, len(requests))
        try:
            outputs = self.llm.chat(
                conversations,
                sampling_params=params,
                use_tqdm=False,
                add_generation_prompt=not prefilled,
                continue_final_message=bool(prefilled),
            )
        except Exception as exc:  # vLLM's VLLMValidationError is no ValueError; an engine failure is any kind
            raise self.refused(exc, len(requests)) from exc
        return [parse_output(o, r) for o, r in zip(outputs, requests, strict=True)]

    def refused(self, exc: Exception, count: int) -> StressprobeError:
        """The job stops: a prompt that does not fit fails on every rerun, and an error record for it would
        quietly drop the longest inputs from the results. Answers already committed stay in the cache."""
        reason = one_line_tail(str(exc), 1) or type(exc).__name__
        if not self.fold_system and SYSTEM_REFUSED.search(reason):
            return StressprobeError(
                f"config models.{self.name}.system_role: the model's chat template refuses a system turn "
                f"({reason}); set models.{self.name}.system_role: user (or auto) to fold system turns into "
                "the first user turn"
            )
        if TOO_LONG.search(reason):  # (vLLM's message says it all: no traceback)
            return refusal(
                self.name,
                self.model,
                "context",
                f"{reason} (max_model_len {self.max_model_len})",
                key="max_model_len",
                fix=f"raise models.{self.name}.max_model_len (up to the model's context length) or shorten the inputs; "
                "vLLM's messages are in the job's log",
            )
        log.error("%s: vLLM failed on a call of %d requests", self.name, count, exc_info=exc)
        return StressprobeError(
            f"config models.{self.name}: vLLM failed on a call of {count} requests to {self.model!r} ({type(exc).__name__}: "
            f"{reason}); vLLM's messages and the traceback are in the job's log"
        )


def open_served_backend(name: str, entry: dict[str, Any]) -> ServedVllmBackend:
    """The model behind its server: check that it answers, then talk the OpenAI protocol to it."""
    base_url = entry[SERVED_URL_KEY]
    preflight(name, base_url, KEYLESS_PLACEHOLDER)
    backend = ServedVllmBackend(
        name,
        backend_identity(name, entry),
        model=entry["model"],
        base_url=base_url,
        api_key=KEYLESS_PLACEHOLDER,
        concurrency=SERVED_CONCURRENCY,
        timeout_s=SERVED_TIMEOUT_S,
        max_retries=3,
        backoff_s=1.0,
        api={**API_DEFAULTS, "system_role": "user" if served_folds(name, entry, base_url) else "system"},
    )
    backend.tiny_temperature = entry.get("tiny_temperature", "greedy")
    return backend


def served_folds(name: str, entry: dict[str, Any], base_url: str) -> bool:
    """Whether the served model gets its system turns folded: `auto` asks the server itself to render a
    conversation with a system turn (vLLM's `POST /tokenize`, which applies the chat template the server
    was started with and answers 400 where it raises), so no completion is spent on finding out."""

    def render(conversation: list[dict[str, str]]) -> None:
        try:
            reply = httpx.post(
                base_url.removesuffix("/v1") + "/tokenize",
                json={"model": entry["model"], "messages": conversation, "add_generation_prompt": True},
                timeout=TOKENIZE_TIMEOUT_S,
            )
            reason = None if reply.status_code == 200 else served_error_message(reply)
        except httpx.HTTPError as exc:
            reason = f"{type(exc).__name__}: {exc}"
        if reason is None:
            return
        if not any(m["role"] == "system" for m in conversation):  # the probe itself failed: say so
            log.warning(
                "%s: the server did not render a conversation for the system-turn check (%s); system turns "
                "are sent as they are (models.%s.system_role: auto; set user to fold them)",
                name,
                reason,
                name,
            )
        raise ValueError(reason)

    return system_turns.folds(name, entry.get("system_role", "auto"), render)


def served_error_message(reply: httpx.Response) -> str:
    """The server's own words for a refused request (vLLM's `{"error": {"message": ...}}`), else its status."""
    try:
        return str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"HTTP {reply.status_code}"


class ServedVllmBackend(OpenAIBackend):
    """A vllm model answering from `vllm serve` on this job's GPUs: the identity and sampling of the
    in-process backend (greedy requests ask for one sample; prefilled answers are continued) over HTTP."""

    kind = "vllm"
    continues_prefill = True

    tiny_temperature = "greedy"

    async def acomplete(self, request: Request) -> Response:
        request = as_decoded(request, self.tiny_temperature)
        if request.temperature == 0 and request.n > 1:
            response = await super().acomplete(dataclasses.replace(request, n=1))
            if response.error is None:
                response = dataclasses.replace(response, texts=response.texts * request.n)
            return response
        return await super().acomplete(request)
