"""In-process llama.cpp (llama-cpp-python) on a GGUF file: the demo's CPU backend.

Requests are computed in the order of their rendered prompts, so that consecutive prompts share their
longest prefix and llama.cpp reuses its KV cache for it. Top-k log-probabilities are read from the last
position's logits while generating, which avoids `logits_all=True` (several times slower).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from stressprobe.errors import StressprobeError
from stressprobe.io import PACKAGE_PREFIX, package_file
from stressprobe.llm.backends import backend_identity
from stressprobe.llm.backends.base import Backend
from stressprobe.llm.types import Request, Response

log = logging.getLogger(__name__)


def resolve_package_file(spec: str, config_key: str) -> Path:
    """A path, or the file `package:<module>/<file>` names in an installed package (not imported)."""
    if not spec.startswith(PACKAGE_PREFIX):
        return Path(spec)
    return package_file(spec, f"config {config_key}")


def truncate_at_stop(text: str, stop: tuple[str, ...]) -> str:
    """The text up to (not including) the first stop string, as the OpenAI API returns it."""
    cuts = [i for i in (text.find(s) for s in stop) if i >= 0]
    return text[: min(cuts)] if cuts else text


def gguf_identity(path: Path) -> dict[str, Any]:
    """The model's identity in cache keys: file name and size, not its location on this machine."""
    return {"backend": "llamacpp", "gguf": path.name, "size": path.stat().st_size}


def gguf_path(name: str, entry: Mapping[str, Any]) -> Path:
    """The registry entry's GGUF file; a missing one is a config error."""
    path = resolve_package_file(str(entry.get("gguf", "")), f"models.{name}.gguf")
    if not path.is_file():
        raise StressprobeError(
            f"config models.{name}.gguf: GGUF file not found: {path}; "
            "fix the path or install the package that ships it"
        )
    return path


def open_backend(name: str, entry: dict[str, Any]) -> LlamaCppBackend:
    """Check the GGUF file and load it once."""
    return LlamaCppBackend(
        name,
        gguf_path(name, entry),
        backend_identity(name, entry),
        n_ctx=int(entry.get("n_ctx", 2048)),
        n_threads=int(entry.get("n_threads", 2)),
    )


class LlamaCppBackend(Backend):
    """One loaded GGUF model answering requests one at a time, in shared-prefix order."""

    kind = "llamacpp"

    def __init__(self, name: str, path: Path, identity: dict[str, Any], n_ctx: int, n_threads: int) -> None:
        super().__init__(name, identity)
        import llama_cpp  # imported here: loading the native library is not free

        self._llama_cpp = llama_cpp
        try:
            self.llm = llama_cpp.Llama(
                model_path=str(path), n_ctx=n_ctx, n_threads=n_threads, verbose=False, seed=0
            )
        except ValueError as exc:
            raise StressprobeError(
                f"config models.{name}.gguf: cannot load {path} ({exc}); is it a GGUF file?"
            ) from None
        self._formatter = llama_cpp.llama_chat_format.Jinja2ChatFormatter(
            template=self.llm.metadata["tokenizer.chat_template"],
            eos_token=self.llm._model.token_get_text(self.llm.token_eos()),
            bos_token=self.llm._model.token_get_text(self.llm.token_bos()),
        )
        self._vocab = self.llm._model.vocab
        self._pieces: dict[int, str] = {}

    def render(self, request: Request) -> str:
        """The prompt text the chat template makes of the request (what llama.cpp actually sees).

        A prefilled answer follows the assistant turn's opening as plain text, so the model continues it.
        """
        if request.prefill is None:
            return self._formatter(messages=request.message_dicts()).prompt
        return self._formatter(messages=request.message_dicts()[:-1]).prompt + request.prefill

    def order(self, requests: list[Request]) -> list[int]:
        """Sorted by rendered prompt: neighbours share their longest common prefix."""
        rendered = [self.render(r) for r in requests]
        return sorted(range(len(requests)), key=rendered.__getitem__)

    def complete(self, requests: list[Request]) -> list[Response]:
        return [self._complete_one(r) for r in requests]

    def _complete_one(self, request: Request) -> Response:
        tokens = self.llm.tokenize(self.render(request).encode("utf-8"), add_bos=False, special=True)
        if len(tokens) + request.max_tokens > self.llm.n_ctx():
            return Response.failure(
                f"{self.name}: prompt of {len(tokens)} tokens + max_tokens {request.max_tokens} "
                f"exceeds n_ctx {self.llm.n_ctx()}; raise models.{self.name}.n_ctx or shorten the prompt"
            )
        # At temperature 0 every sample is the greedy one: compute it once and repeat it.
        samples = 1 if request.temperature == 0 else request.n
        texts, top_logprobs, completion_tokens = [], None, 0
        for i in range(samples):
            text, n_generated, logprobs = self._sample(
                tokens, request, seed=request.seed + i, want_logprobs=i == 0
            )
            texts.append(text)
            completion_tokens += n_generated
            top_logprobs = logprobs if i == 0 else top_logprobs
        return Response(
            texts=texts * (request.n // samples),
            top_logprobs=top_logprobs if request.logprobs else None,
            prompt_tokens=len(tokens),
            completion_tokens=completion_tokens,
        )

    def _sample(
        self, tokens: list[int], request: Request, seed: int, want_logprobs: bool
    ) -> tuple[str, int, list[dict[str, float]]]:
        """One sample: (text, generated token count, top-k logprobs per generated token)."""
        self.llm.set_seed(seed)
        generated: list[int] = []
        logprobs: list[dict[str, float]] = []
        # top_k=0, min_p=0: no extra truncation by llama.cpp, plain nucleus sampling as in the OpenAI API.
        for token in self.llm.generate(
            tokens, temp=request.temperature, top_p=request.top_p, top_k=0, min_p=0.0, repeat_penalty=1.0
        ):
            if self._llama_cpp.llama_vocab_is_eog(self._vocab, token):
                break
            if want_logprobs and request.logprobs:
                logprobs.append(self._top_logprobs(request.logprobs))
            generated.append(token)
            if request.stop and any(s in self._detokenize(generated) for s in request.stop):
                break
            if len(generated) >= request.max_tokens:
                break
        return truncate_at_stop(self._detokenize(generated), request.stop), len(generated), logprobs

    def _detokenize(self, tokens: list[int]) -> str:
        return self.llm.detokenize(tokens).decode("utf-8", errors="replace")

    def _top_logprobs(self, k: int) -> dict[str, float]:
        """Top-k log-softmax of the logits that produced the token just sampled."""
        pointer = self._llama_cpp.llama_get_logits_ith(self.llm._ctx.ctx, -1)
        logits = np.ctypeslib.as_array(pointer, shape=(self.llm.n_vocab(),)).astype(np.float64)
        top = np.argpartition(logits, -k)[-k:]
        shift = logits.max()
        log_norm = shift + np.log(np.exp(logits - shift).sum())
        result: dict[str, float] = {}
        for token_id in top[np.argsort(-logits[top])]:
            piece = self._piece(int(token_id))
            # Two ids can print the same (e.g. byte fallbacks): their probabilities add up.
            value = float(logits[token_id] - log_norm)
            result[piece] = float(np.logaddexp(result[piece], value)) if piece in result else value
        return result

    def _piece(self, token_id: int) -> str:
        if token_id not in self._pieces:
            self._pieces[token_id] = self._detokenize([token_id])
        return self._pieces[token_id]

    def close(self) -> None:
        self.llm.close()
