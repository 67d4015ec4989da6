"""The two values that cross the LLM layer's boundary: what to ask (Request) and what came back (Response)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Messages = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Request:
    """One chat completion: the conversation and every decoding parameter that changes the answer.

    Frozen and hashable so identical requests can be deduplicated; all fields enter the cache key.
    """

    messages: Messages
    max_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    n: int = 1
    seed: int = 0
    logprobs: int = 0
    stop: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Lists are accepted for convenience but stored as tuples so the request stays hashable.
        object.__setattr__(self, "messages", tuple((str(r), str(c)) for r, c in self.messages))
        object.__setattr__(self, "stop", tuple(self.stop))
        if not self.messages:
            raise ValueError("Request needs at least one message")
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError(
                f"Request needs n >= 1 and max_tokens >= 1 (got n={self.n}, max_tokens={self.max_tokens})"
            )
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"Request needs temperature >= 0 and 0 < top_p <= 1 (got {self.temperature}, {self.top_p})"
            )
        if not 0 <= self.logprobs <= 20:
            raise ValueError(f"Request.logprobs must be between 0 and 20 (got {self.logprobs})")

    @classmethod
    def chat(
        cls, system: str | None = None, user: str = "", prefill: str | None = None, **decoding: Any
    ) -> Request:
        """A request of an optional system message and one user message.

        `prefill` starts the model's answer (a final assistant message it continues), for models that do
        not keep to a required answer format otherwise; the returned text is what follows it.
        """
        messages = ((("system", system),) if system is not None else ()) + (("user", user),)
        messages += (("assistant", prefill),) if prefill is not None else ()
        return cls(messages=messages, **decoding)

    @property
    def prefill(self) -> str | None:
        """The start of the answer the model continues (a final assistant message), or None."""
        role, content = self.messages[-1]
        return content if role == "assistant" else None

    def decoding(self) -> dict[str, Any]:
        """The decoding parameters in a canonical form (floats as floats, lists as lists) for hashing."""
        return {
            "max_tokens": int(self.max_tokens),
            "temperature": float(self.temperature),
            "top_p": float(self.top_p),
            "n": int(self.n),
            "seed": int(self.seed),
            "logprobs": int(self.logprobs),
            "stop": list(self.stop),
        }

    def message_dicts(self) -> list[dict[str, str]]:
        """The conversation in the `{"role", "content"}` shape every chat API takes."""
        return [{"role": role, "content": content} for role, content in self.messages]


def answer_prefill(entry: dict[str, Any], prefix: str) -> str | None:
    """`prefix` when the model's registry entry asks for prefilled answers (`answer_prefill`), else None."""
    return prefix if entry.get("answer_prefill", False) else None


@dataclass
class Response:
    """What a model returned for one Request (n samples), or why it could not.

    `error` is set (and `texts` empty) when a transient failure outlasted every retry; such responses are
    never cached, so the next run asks again. (A permanent failure raises ModelRefused instead:
    stressprobe.llm.failures.) `top_logprobs` covers the first sample only: one dict token -> logprob per generated token.
    """

    texts: list[str] = field(default_factory=list)
    top_logprobs: list[dict[str, float]] | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    error: str | None = None

    @property
    def text(self) -> str:
        """The first sample's text, or "" when there is none."""
        return self.texts[0] if self.texts else ""

    def to_payload(self) -> dict[str, Any]:
        """The cacheable part of a successful response."""
        return {
            "texts": self.texts,
            "top_logprobs": self.top_logprobs,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
        }

    @classmethod
    def from_payload(cls, payload: dict[str, Any]) -> Response:
        """Rebuild a response stored by `to_payload`; it comes from the cache, so it is marked cached."""
        return cls(
            texts=list(payload["texts"]),
            top_logprobs=payload.get("top_logprobs"),
            prompt_tokens=int(payload.get("prompt_tokens", 0)),
            completion_tokens=int(payload.get("completion_tokens", 0)),
            cached=True,
        )

    @classmethod
    def failure(cls, message: str) -> Response:
        """A call that failed for good."""
        return cls(error=message)
