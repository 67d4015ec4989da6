"""A real HTTP server on 127.0.0.1 speaking the OpenAI Batch API (/v1/files, /v1/batches), for tests.

Usage::

    from tests.support.batch_server import BatchServer

    with BatchServer(duration=0.2, statuses=["expired"], request_faults={"server_error": 0.1}) as server:
        entry = {"backend": "openai", "model": "test-model", "base_url": server.base_url, "batch": True, ...}
        ...
        server.batches_created        # batches created so far
        server.lines_received         # Counter: custom_id -> times it was sent in a batch input file

Endpoints: ``GET /v1/models``; ``POST /v1/files`` (multipart, purpose ``batch``); ``GET /v1/files/{id}/content``;
``POST /v1/batches``; ``GET /v1/batches`` (list, newest first); ``GET /v1/batches/{id}``;
``POST /v1/batches/{id}/cancel``.

A batch is ``validating`` when created, ``in_progress`` once polled, and ends when it has existed for
``duration`` seconds and is not held (``hold()``/``release()``): its chat completions are answered by
`openai_server.completion_body` with `openai_server.rule_responder`, so the answers equal the synchronous
test server's. How the n-th created batch ends is ``statuses[n]`` (default ``completed``): ``expired`` answers
its first half of requests only (as the API keeps what finished before the window closed), ``cancelled``
and ``failed`` answer none (``failed`` with a validation error). ``request_faults``: share of result lines
that are errors, drawn from ``seed``, the custom_id and the number of times that custom_id was sent
(``server_error``: 500, ``rate_limit``: 429, ``bad_request``: 400); errors go to the error file.
``model_rules`` and ``context_tokens``: the synchronous test server's refusals (`openai_server.refusal`): a
batch with a line asking for a model id the rules do not serve fails validation (``model_not_found``, as the
Batch API reports it); a line refused otherwise (400 ``unsupported_parameter``, ``context_length_exceeded``,
...) is answered in the error file. ``missing_scopes``: the scopes a restricted key lacks
(``api.files.write``: uploads, ``api.batches.write``: creating batches), answered 401 as the API answers them
while the key still lists models. Unknown file or batch ids are answered 404, as the API does.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.openai_server import (
    ModelRules,
    _State,
    completion_body,
    refusal,
    rule_responder,
    served,
    unit_hash,
)

FAULT_STATUS = {"server_error": 500, "rate_limit": 429, "bad_request": 400}


class _BatchState:
    def __init__(
        self,
        duration,
        statuses,
        request_faults,
        seed,
        model_rules=None,
        context_tokens=None,
        missing_scopes=(),
    ):
        self.duration = duration
        self.missing_scopes = set(missing_scopes)
        self.statuses = list(statuses or [])
        self.request_faults = dict(request_faults or {})
        self.seed = seed
        self.lock = threading.Lock()
        self.files: dict[str, bytes] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.created_at: dict[str, float] = {}
        self.lines_received: Counter[str] = Counter()
        self.attempts: Counter[str] = Counter()
        self.held = threading.Event()
        # The chat completion bodies come from the synchronous test server's code.
        self.chat = _State(0.0, {}, seed, rule_responder, 0.0, ("test-model",), None, None, model_rules)
        self.chat.context_tokens = context_tokens

    def new_id(self, prefix: str, table: dict) -> str:
        return f"{prefix}-{len(table) + 1:05d}"

    def fault_for(self, custom_id: str, attempt: int) -> str | None:
        u = unit_hash(self.seed, custom_id, attempt)
        edge = 0.0
        for kind, share in self.request_faults.items():
            edge += share
            if u < edge:
                return kind
        return None

    def finish(self, batch: dict[str, Any]) -> None:
        """Answer the batch's input file into output and error files, as its planned status says."""
        status = batch["planned"]
        lines = [json.loads(x) for x in self.files[batch["input_file_id"]].decode().splitlines() if x.strip()]
        retired = [
            (i, line) for i, line in enumerate(lines) if not served(self.chat, line["body"].get("model"))
        ]
        if retired:
            i, line = retired[0]
            model = line["body"]["model"]
            message = f"The model `{model}` does not exist or you do not have access to it."
            error = {"code": "model_not_found", "message": message, "param": "body.model", "line": i + 1}
            batch["errors"] = {"object": "list", "data": [error]}
            status, lines = "failed", []
        elif status == "failed":
            batch["errors"] = {
                "object": "list",
                "data": [{"code": "invalid_request", "message": "bad input"}],
            }
            lines = []
        elif status == "cancelled":
            lines = []
        elif status == "expired":
            lines = lines[: len(lines) // 2]
        outputs, errors = [], []
        for line in lines:
            custom_id = line["custom_id"]
            attempt = self.attempts[custom_id]
            self.attempts[custom_id] += 1
            fault = self.fault_for(custom_id, attempt)
            refused = refusal(self.chat, line["body"])
            if refused is not None:
                response = {"status_code": refused[0], "request_id": "", "body": refused[1]}
                errors.append({"id": f"br-{custom_id[:8]}", "custom_id": custom_id, "response": response})
            elif fault is None:
                body = completion_body(self.chat, line["body"], "ok")
                response = {"status_code": 200, "request_id": f"req-{custom_id[:8]}", "body": body}
                outputs.append({"id": f"br-{custom_id[:8]}", "custom_id": custom_id, "response": response})
            else:
                body = {"error": {"message": f"injected {fault}", "type": fault}}
                response = {"status_code": FAULT_STATUS[fault], "request_id": "", "body": body}
                errors.append({"id": f"br-{custom_id[:8]}", "custom_id": custom_id, "response": response})
        for key, records in (("output_file_id", outputs), ("error_file_id", errors)):
            if records:
                file_id = self.new_id("file", self.files)
                self.files[file_id] = "".join(json.dumps(r) + "\n" for r in records).encode()
                batch[key] = file_id
        batch["status"] = status
        batch["request_counts"] = {
            "total": batch["request_counts"]["total"],
            "completed": len(outputs),
            "failed": len(errors),
        }
        batch[f"{status}_at"] = int(time.time())


def public(batch: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in batch.items() if k != "planned"}


def parse_multipart(content_type: str, raw: bytes) -> dict[str, bytes]:
    """Form field name -> value of a multipart/form-data body."""
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + raw
    )
    fields = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        fields[name] = part.get_payload(decode=True)
    return fields


def make_handler(state: _BatchState) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def send_json(self, status: int, payload: Any) -> None:
            self.send_raw(status, json.dumps(payload).encode(), "application/json")

        def send_raw(self, status: int, data: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def not_found(self) -> None:
            self.send_json(
                404, {"error": {"message": f"no route {self.path}", "type": "invalid_request_error"}}
            )

        def permitted(self, scope: str) -> bool:
            """False (and the API's 401 sent) when the key lacks `scope` (``missing_scopes``)."""
            if scope not in state.missing_scopes:
                return True
            message = f"You have insufficient permissions for this operation. Missing scopes: {scope}."
            self.send_json(
                401, {"error": {"message": message, "type": "invalid_request_error", "code": None}}
            )
            return False

        def do_GET(self) -> None:
            parts = self.path.split("?")[0].strip("/").split("/")
            with state.lock:
                if parts[-1] == "models":
                    self.send_json(200, {"object": "list", "data": [{"id": "test-model", "object": "model"}]})
                elif len(parts) >= 3 and parts[-3] == "files" and parts[-1] == "content":
                    data = state.files.get(parts[-2])
                    if data is None:
                        self.not_found()
                    else:
                        self.send_raw(200, data, "application/jsonl")
                elif parts[-1] == "batches":
                    listed = [public(b) for b in reversed(list(state.batches.values()))]
                    self.send_json(200, {"object": "list", "data": listed, "has_more": False})
                elif parts[-2] == "batches" and parts[-1] in state.batches:
                    batch = state.batches[parts[-1]]
                    if batch["status"] == "validating":
                        batch["status"] = "in_progress"
                    elif (
                        batch["status"] == "in_progress"
                        and time.monotonic() - state.created_at[batch["id"]] >= state.duration
                        and not state.held.is_set()
                    ):
                        state.finish(batch)
                    self.send_json(200, public(batch))
                elif parts[-2] == "batches":
                    message = f"No batch found with id '{parts[-1]}'."
                    self.send_json(404, {"error": {"message": message, "type": "invalid_request_error"}})
                else:
                    self.not_found()

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = self.path.split("?")[0].strip("/").split("/")
            if not self.permitted(f"api.{parts[-1]}.write"):
                return
            with state.lock:
                if parts[-1] == "files":
                    fields = parse_multipart(self.headers["Content-Type"], raw)
                    if fields.get("purpose") != b"batch":
                        self.send_json(400, {"error": {"message": "purpose must be batch"}})
                        return
                    file_id = state.new_id("file", state.files)
                    state.files[file_id] = fields["file"]
                    for line in fields["file"].decode().splitlines():
                        if line.strip():
                            state.lines_received[json.loads(line)["custom_id"]] += 1
                    self.send_json(
                        200,
                        {
                            "id": file_id,
                            "object": "file",
                            "bytes": len(fields["file"]),
                            "created_at": 0,
                            "filename": "input.jsonl",
                            "purpose": "batch",
                            "status": "processed",
                        },
                    )
                elif parts[-1] == "batches":
                    body = json.loads(raw)
                    if body.get("input_file_id") not in state.files:
                        self.send_json(400, {"error": {"message": "unknown input file"}})
                        return
                    batch_id = state.new_id("batch", state.batches)
                    count = sum(1 for x in state.files[body["input_file_id"]].splitlines() if x.strip())
                    planned = (
                        state.statuses[len(state.batches)]
                        if len(state.batches) < len(state.statuses)
                        else "completed"
                    )
                    state.batches[batch_id] = {
                        "id": batch_id,
                        "object": "batch",
                        "endpoint": body["endpoint"],
                        "input_file_id": body["input_file_id"],
                        "completion_window": body["completion_window"],
                        "status": "validating",
                        "created_at": int(time.time()),
                        "output_file_id": None,
                        "error_file_id": None,
                        "errors": None,
                        "metadata": body.get("metadata"),
                        "request_counts": {"total": count, "completed": 0, "failed": 0},
                        "planned": planned,
                    }
                    state.created_at[batch_id] = time.monotonic()
                    self.send_json(200, public(state.batches[batch_id]))
                elif parts[-1] == "cancel" and parts[-2] in state.batches:
                    batch = state.batches[parts[-2]]
                    batch["planned"] = "cancelled"
                    state.finish(batch)
                    self.send_json(200, public(batch))
                else:
                    self.not_found()

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class BatchServer:
    """Context manager running the fake Batch API; see the module docstring."""

    def __init__(
        self,
        duration: float = 0.0,
        statuses=None,
        request_faults=None,
        seed: int = 0,
        model_rules: dict[str, ModelRules] | None = None,
        context_tokens: int | None = None,
        missing_scopes: tuple[str, ...] = (),
    ) -> None:
        self.state = _BatchState(
            duration, statuses, request_faults, seed, model_rules, context_tokens, missing_scopes
        )
        self._server: _Server | None = None

    def __enter__(self) -> BatchServer:
        self._server = _Server(("127.0.0.1", 0), make_handler(self.state))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._thread.join(5)
        self._server.server_close()

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def hold(self) -> None:
        """Keep every batch in progress until `release`."""
        self.state.held.set()

    def release(self) -> None:
        self.state.held.clear()

    @property
    def batches_created(self) -> int:
        with self.state.lock:
            return len(self.state.batches)

    @property
    def batch_statuses(self) -> list[str]:
        with self.state.lock:
            return [b["status"] for b in self.state.batches.values()]

    @property
    def lines_received(self) -> Counter[str]:
        with self.state.lock:
            return Counter(self.state.lines_received)
