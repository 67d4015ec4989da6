"""A real OpenAI-compatible HTTP server on 127.0.0.1 for tests and benchmarks, with deterministic faults.

Usage::

    from tests.support.openai_server import OpenAIServer

    with OpenAIServer(latency=0.1, faults={"rate_limit": 0.2, "timeout": 0.05}, seed=1) as server:
        models = {"m": {"backend": "openai", "model": "test-model", "base_url": server.base_url,
                        "api_key_env": "TEST_KEY", "timeout_s": 0.5, "backoff_s": 0.01}}
        ...                                   # call stressprobe.llm against it
        server.requests                       # Counter: canonical request body -> times received
        server.total_requests                 # chat completion POSTs received (all attempts)
        server.outcomes                       # Counter: "ok", "rate_limit", "server_error", ..., "refused"
        server.api_keys                       # set of bearer tokens seen

Endpoints: ``GET /health`` (200 once serving, as vLLM's server), ``GET /v1/models`` (lists `model_ids`) and ``POST /v1/chat/completions`` (``n`` choices, ``usage``,
``logprobs.content[*].top_logprobs`` when ``logprobs`` is true, honouring ``top_logprobs``, ``stop`` and
``max_tokens`` (counted in words)). ``GET /_stats`` returns the counters as JSON (used in process mode).

Constructor arguments:
- ``latency``: seconds every chat completion waits before answering (a fixed service time).
- ``faults``: share of attempts per kind, drawn deterministically from ``seed``, the canonical body and
  the attempt number of that body (so reruns see the same faults). Kinds: ``rate_limit`` (429),
  ``server_error`` (500), ``timeout`` (sleeps ``timeout_sleep`` s before answering; set the client timeout
  below it), ``drop`` (closes the connection without a response), ``empty`` (200 with empty content),
  ``off_format`` (200 with text that follows no requested format).
- ``responder(body, index) -> str``: the content of choice ``index`` for the parsed request ``body``;
  default `rule_responder` answers by rule from the prompt: asks for ``##final score`` ->
  ``"##final score: <0-3>"``; asks for a final line ``Answer: <letter>`` -> a line of reasoning then
  ``"Answer: <letter>"``; asks to answer yes or no -> ``"no"``; otherwise a short sentence from the prompt.
  Choices come from a hash of the messages (and, at temperature > 0, of seed and sample index). A
  responder that raises `Refusal` makes the server answer that HTTP status (400) with its message.
- ``retry_after``: value of a ``Retry-After`` header sent with 429 answers (None = no header).
- ``require_key``: answer 401 unless the bearer token equals it.
- ``model_ids``: the ids ``GET /v1/models`` lists; ``shutdown_dates``: id -> ISO date, listed as the
  model's ``shutdown_date`` (as OpenAI's listing announces a snapshot's retirement).
- ``max_choices``: answer at most this many choices whatever ``n`` asks (as llama.cpp's server, which
  ignores ``n``); None = honour ``n``.
- Refusals, each in the provider's own wording (stressprobe.llm.failures classifies them):
  ``model_rules``: model id -> `ModelRules`, what the provider serves and accepts: an id not in it is
  answered 404 ``model_not_found`` (a retired or misspelt id; ``{}`` serves none), a parameter the model
  rejects (the o-series: temperature, top_p, max_tokens) 400 ``unsupported_parameter``, a system message
  where the model takes none 400 ``unsupported_value``, as OpenAI answers them; None = any model id, any
  parameter. ``context_tokens``: a request whose prompt plus ``max_tokens`` (both counted as `tokenize`
  counts) exceeds it is answered 400 ``context_length_exceeded``; ``missing_scope``: chat completions
  answered 401 though the key lists models (a restricted key without the ``model.request`` scope).
  ``error_style="vllm"`` words these errors as `vllm serve` does (``code`` the HTTP status, ``type`` the
  exception's name). Refused requests are counted in ``requests`` and as outcome ``refused``.
- ``port``: the port to listen on (0 = any free one).
- ``process``: serve from a forked child process (benchmarks: keeps the server off the client's GIL);
  counters are then fetched from ``/_stats``. Custom responders work in both modes.
"""

from __future__ import annotations

import hashlib
import json
import math
import multiprocessing
import re
import socket
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAULT_KINDS = ("rate_limit", "server_error", "timeout", "drop", "empty", "off_format")
OFF_FORMAT_TEXT = "I would rather talk about the weather today."
Responder = Callable[[dict[str, Any], int], str]


@dataclass(frozen=True)
class ModelRules:
    """What the provider accepts of one model id: request keys it rejects, and whether a system message."""

    rejected_params: tuple[str, ...] = ()
    system_message: bool = True


def canonical(body: dict[str, Any]) -> str:
    """The request body as canonical JSON: identical requests give identical strings."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def unit_hash(*parts: Any) -> float:
    """A deterministic number in [0, 1) from the parts."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def prompt_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content", "")) for m in body.get("messages", []))


def choice_letters(prompt: str) -> list[str]:
    """Option letters listed in a multiple-choice prompt ("A. ...", "(B) ...", "C) ..."), default A-D."""
    letters = sorted(set(re.findall(r"(?m)^\s*\(?([A-M])[.)]\s", prompt)))
    return letters or ["A", "B", "C", "D"]


def rule_responder(body: dict[str, Any], index: int) -> str:
    """Answer by rule from the prompt (see the module docstring)."""
    prompt = prompt_text(body)
    lower = prompt.lower()
    salt = (body.get("seed"), index) if float(body.get("temperature", 1.0) or 0) > 0 else ()
    h = unit_hash(prompt, *salt)
    if "##final score" in lower:
        return f"##final score: {int(h * 4)}"
    if re.search(r"answer:\s*[<(\[]?\s*(letter|[a-z]\b)", lower):
        letters = choice_letters(prompt)
        return f"Considering each option in turn, one fits best.\nAnswer: {letters[int(h * len(letters))]}"
    if "yes or no" in lower:
        return "no"
    words = re.findall(r"[A-Za-z]+", prompt.split("\n")[-1] or prompt)[:6]
    return f"This is a short note about {' '.join(words).lower() or 'nothing'}."


def tokenize(text: str) -> list[str]:
    """Word-ish tokens, keeping the leading space like BPE tokens do."""
    return re.findall(r"\s*\w+|\s*[^\w\s]|\s+$", text)


def token_logprobs(token: str, k: int, salt: str) -> dict[str, Any]:
    """An OpenAI logprobs entry: the chosen token and k alternatives (digits get other digits)."""
    space = token[: len(token) - len(token.lstrip())]
    core = token.strip()
    pool = (
        [str(d) for d in range(10)] if core.isdigit() else ["the", "a", "of", "and", "to", "in", "is", "it"]
    )
    alternatives = [space + t for t in pool if t != core][: max(k - 1, 0)]
    p_chosen = 0.4 + 0.5 * unit_hash(token, salt)
    rest = [(1 - p_chosen) * 0.5 ** (i + 1) for i in range(len(alternatives))]
    top = [{"token": token, "logprob": math.log(p_chosen)}] + [
        {"token": t, "logprob": math.log(p)} for t, p in zip(alternatives, rest, strict=True)
    ]
    return {"token": token, "logprob": math.log(p_chosen), "bytes": None, "top_logprobs": top[:k]}


class Refusal(Exception):
    """Raised by a responder for a request the model refuses: the server answers HTTP `status` (400, as
    vLLM's server does when the chat template raises) with this message."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


class _State:
    """Counters and settings shared by the handler threads."""

    def __init__(
        self,
        latency,
        faults,
        seed,
        responder,
        timeout_sleep,
        model_ids,
        retry_after,
        require_key,
        model_rules=None,
    ):
        unknown = set(faults) - set(FAULT_KINDS)
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; use {FAULT_KINDS}")
        self.latency = latency
        self.faults = faults
        self.seed = seed
        self.responder = responder
        self.timeout_sleep = timeout_sleep
        self.model_ids = model_ids
        self.retry_after = retry_after
        self.require_key = require_key
        self.model_rules = model_rules
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.api_keys: set[str] = set()
        self.stopping = threading.Event()
        self.max_choices: int | None = None
        self.context_tokens: int | None = None
        self.missing_scope = False
        self.error_style = "openai"
        self.shutdown_dates: dict[str, str] = {}
        # Further POST paths a server of another kind answers (vLLM's /tokenize): path -> body -> (status, payload).
        self.routes: dict[str, Callable[[dict[str, Any]], tuple[int, Any]]] = {}

    def fault_for(self, body_key: str, attempt: int) -> str:
        """The outcome of attempt `attempt` of this body: a fault kind or "ok"."""
        u = unit_hash(self.seed, attempt, body_key)
        edge = 0.0
        for kind in FAULT_KINDS:
            edge += self.faults.get(kind, 0.0)
            if u < edge:
                return kind
        return "ok"

    def stats(self) -> dict[str, Any]:
        with self.lock:
            return {
                "requests": dict(self.requests),
                "outcomes": dict(self.outcomes),
                "api_keys": sorted(self.api_keys),
            }


def completion_body(state: _State, body: dict[str, Any], outcome: str) -> dict[str, Any]:
    """The JSON of a successful chat completion."""
    n = min(int(body.get("n") or 1), state.max_choices or 10**6)
    max_words = int(body.get("max_tokens") or body.get("max_completion_tokens") or 10**6)
    want_logprobs = bool(body.get("logprobs"))
    k = int(body.get("top_logprobs") or 0)
    choices, completion_tokens = [], 0
    for index in range(n):
        if outcome == "empty":
            text = ""
        elif outcome == "off_format":
            text = OFF_FORMAT_TEXT
        else:
            text = state.responder(body, index)
        for stop in body.get("stop") or []:
            text = text.split(stop)[0]
        tokens = tokenize(text)[:max_words]
        text = "".join(tokens)
        completion_tokens += len(tokens)
        logprobs = None
        if want_logprobs:
            logprobs = {"content": [token_logprobs(t, k, str(index)) for t in tokens], "refusal": None}
        choices.append(
            {
                "index": index,
                "message": {"role": "assistant", "content": text},
                "logprobs": logprobs,
                "finish_reason": "stop" if len(tokens) < max_words else "length",
            }
        )
    prompt_tokens = len(tokenize(prompt_text(body)))
    return {
        "id": f"chatcmpl-{hashlib.sha256(canonical(body).encode()).hexdigest()[:16]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model", ""),
        "choices": choices,
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


VLLM_ERROR_TYPES = {400: "BadRequestError", 401: "UnauthorizedError", 404: "NotFoundError"}


def served(state: _State, model: str) -> bool:
    """Whether the provider serves this model id (`model_rules` None: any id)."""
    return state.model_rules is None or model in state.model_rules


def refusal(state: _State, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    """The (status, error body) a provider refuses this request with, or None when it is answered."""
    model = str(body.get("model", ""))
    rules = (state.model_rules or {}).get(model, ModelRules())
    rejected = [p for p in rules.rejected_params if p in body]
    system = [i for i, m in enumerate(body.get("messages") or []) if m.get("role") == "system"]
    error: dict[str, Any] | None = None
    if state.missing_scope:
        message = "You have insufficient permissions for this operation. Missing scopes: model.request."
        error = {"status": 401, "message": message, "param": None, "code": None}
    elif not served(state, model):
        message = f"The model `{model}` does not exist or you do not have access to it."
        error = {"status": 404, "message": message, "param": None, "code": "model_not_found"}
    elif rejected:
        hint = " Use 'max_completion_tokens' instead." if rejected[0] == "max_tokens" else ""
        message = f"Unsupported parameter: '{rejected[0]}' is not supported with this model.{hint}"
        error = {"status": 400, "message": message, "param": rejected[0], "code": "unsupported_parameter"}
    elif system and not rules.system_message:
        param = f"messages[{system[0]}].role"
        message = f"Unsupported value: '{param}' does not support 'system' with this model."
        error = {"status": 400, "message": message, "param": param, "code": "unsupported_value"}
    elif state.context_tokens is not None:
        prompt = len(tokenize(prompt_text(body)))
        asked = prompt + int(body.get("max_tokens") or body.get("max_completion_tokens") or 0)
        if asked > state.context_tokens:
            message = (
                f"This model's maximum context length is {state.context_tokens} tokens. However, you requested "
                f"{asked} tokens ({prompt} in the messages, {asked - prompt} in the completion). Please reduce "
                "the length of the messages or completion."
            )
            error = {
                "status": 400,
                "message": message,
                "param": "messages",
                "code": "context_length_exceeded",
            }
    if error is None:
        return None
    status = error.pop("status")
    error = {"message": error.pop("message"), "type": "invalid_request_error", **error}
    if state.error_style == "vllm":
        error.update(code=status, type=VLLM_ERROR_TYPES[status])
    return status, {"error": error}


def make_handler(state: _State) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real servers

        def setup(self) -> None:
            super().setup()
            # Headers and body go out in two writes: without NODELAY, Nagle + delayed ACK add ~40 ms each.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def authorized(self) -> bool:
            token = self.headers.get("Authorization", "").removeprefix("Bearer ").strip()
            with state.lock:
                state.api_keys.add(token)
            if state.require_key is not None and token != state.require_key:
                self.send_json(
                    401, {"error": {"message": "invalid api key", "type": "invalid_request_error"}}
                )
                return False
            return True

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/_stats":
                self.send_json(200, state.stats())
            elif self.path.rstrip("/") == "/health":
                self.send_json(200, {})
            elif self.path.rstrip("/").endswith("/models"):
                if self.authorized():
                    models = [
                        {"id": m, "object": "model", "created": 0, "owned_by": "test"}
                        | ({"shutdown_date": state.shutdown_dates[m]} if m in state.shutdown_dates else {})
                        for m in state.model_ids
                    ]
                    self.send_json(200, {"object": "list", "data": models})
            else:
                self.send_json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length)
            route = state.routes.get(self.path.rstrip("/"))
            if route is not None:
                self.send_json(*route(json.loads(raw)))
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self.send_json(404, {"error": {"message": f"no route {self.path}"}})
                return
            if not self.authorized():
                return
            body = json.loads(raw)
            key = canonical(body)
            with state.lock:
                attempt = state.requests[key]
                state.requests[key] += 1
            refused = refusal(state, body)
            if refused is not None:
                with state.lock:
                    state.outcomes["refused"] += 1
                self.send_json(*refused)
                return
            outcome = state.fault_for(key, attempt)
            with state.lock:
                state.outcomes[outcome] += 1
            if state.latency:
                state.stopping.wait(state.latency)
            if outcome == "rate_limit":
                headers = {"Retry-After": str(state.retry_after)} if state.retry_after is not None else {}
                self.send_json(429, {"error": {"message": "rate limited", "type": "rate_limit"}}, headers)
            elif outcome == "server_error":
                self.send_json(500, {"error": {"message": "internal error", "type": "server_error"}})
            elif outcome == "drop":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            else:
                if outcome == "timeout":
                    state.stopping.wait(state.timeout_sleep)
                try:
                    completion = completion_body(state, body, outcome)
                except Refusal as exc:
                    self.send_json(exc.status, {"error": {"message": str(exc), "type": "BadRequestError"}})
                    return
                self.send_json(200, completion)

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # listen backlog: the default 5 drops connections at high concurrency


def _serve_forever(server: ThreadingHTTPServer) -> None:
    server.serve_forever(poll_interval=0.05)


class OpenAIServer:
    """Context manager running the server; see the module docstring."""

    def __init__(
        self,
        latency: float = 0.0,
        faults: dict[str, float] | None = None,
        seed: int = 0,
        responder: Responder | None = None,
        timeout_sleep: float = 5.0,
        model_ids: tuple[str, ...] = ("test-model",),
        retry_after: float | None = None,
        require_key: str | None = None,
        process: bool = False,
        max_choices: int | None = None,
        context_tokens: int | None = None,
        missing_scope: bool = False,
        error_style: str = "openai",
        shutdown_dates: dict[str, str] | None = None,
        port: int = 0,
        host: str = "127.0.0.1",
        model_rules: dict[str, ModelRules] | None = None,
        routes: dict[str, Callable[[dict[str, Any]], tuple[int, Any]]] | None = None,
    ) -> None:
        self._state = _State(
            latency,
            dict(faults or {}),
            seed,
            responder or rule_responder,
            timeout_sleep,
            model_ids,
            retry_after,
            require_key,
            model_rules,
        )
        self._state.max_choices = max_choices
        self._state.context_tokens = context_tokens
        self._state.missing_scope = missing_scope
        self._state.error_style = error_style
        self._state.shutdown_dates = dict(shutdown_dates or {})
        self._state.routes = dict(routes or {})
        self._process_mode = process
        self._port = port
        self._host = host  # another address of this machine, for clients in other network namespaces
        self._server: ThreadingHTTPServer | None = None
        self._worker: threading.Thread | multiprocessing.Process | None = None

    def __enter__(self) -> OpenAIServer:
        server = _Server((self._host, self._port), make_handler(self._state))
        self._server = server
        if self._process_mode:
            self._worker = multiprocessing.get_context("fork").Process(target=_serve_forever, args=(server,))
            self._worker.start()
        else:
            self._worker = threading.Thread(target=_serve_forever, args=(server,), daemon=True)
            self._worker.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None and self._worker is not None
        self._state.stopping.set()
        # (A fork-context process is not a `multiprocessing.Process` instance: test the mode instead.)
        if self._process_mode:
            self._worker.terminate()
            self._worker.join(5)
        else:
            self._server.shutdown()
            self._worker.join(5)
        self._server.server_close()

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """The URL to give as `base_url` (ends in /v1)."""
        return f"http://{self._host}:{self.port}/v1"

    def _stats(self) -> dict[str, Any]:
        if not self._process_mode:
            return self._state.stats()
        with urllib.request.urlopen(f"http://{self._host}:{self.port}/_stats", timeout=5) as reply:
            return json.loads(reply.read())

    @property
    def requests(self) -> Counter[str]:
        """Chat completion requests received, per canonical request body."""
        return Counter(self._stats()["requests"])

    @property
    def total_requests(self) -> int:
        return sum(self.requests.values())

    @property
    def outcomes(self) -> Counter[str]:
        """How the received requests were answered: "ok" or a fault kind."""
        return Counter(self._stats()["outcomes"])

    @property
    def api_keys(self) -> set[str]:
        """Bearer tokens the server has seen."""
        return set(self._stats()["api_keys"])
