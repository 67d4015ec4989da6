"""Stand-in for vLLM's OpenAI-compatible server (`vllm serve`, run as `python -m vllm.entrypoints.cli.main
serve`), for the tests that need GPUs (several per job, tensor parallelism): parses the flags
stressprobe.llm.serving passes (an unknown one fails, as it would in
vLLM), records a `load` event in STRESSPROBE_VLLM_STANDIN_LOG (with the GPUs it was given) and serves
`/health`, `/v1/models` and `/v1/chat/completions` (tests/support/openai_server.py) with the in-process
stand-in's answers, logging a `chat` event per request; a prompt longer than `--max-model-len` is answered
HTTP 400 as vLLM answers it, and so is a request that the chat template (`--chat-template`, else the model
folder's) raises on, as vLLM's server does. `POST /tokenize` renders a conversation with that template (the
stand-in's tokens are its characters), answering 400 with the template's message where it raises.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

# The repository root, for tests.support.openai_server (the job's PYTHONPATH need not have it).
sys.path.insert(0, str(Path(__file__).resolve().parents[6]))

import jinja2  # noqa: E402

from tests.support.openai_server import OpenAIServer, Refusal  # noqa: E402
from vllm import answer, load_template, record, render  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vllm")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--served-model-name", nargs="+")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.9)
    parser.add_argument("--max-model-len", type=int)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--enable-prefix-caching", action="store_true")
    parser.add_argument("--enforce-eager", action="store_true")
    parser.add_argument("--kv-cache-memory-bytes", type=int)
    parser.add_argument("--generation-config", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--chat-template")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    names = tuple(args.served_model_name or [args.model])
    record(
        {
            "event": "load",
            "model": args.model,
            "served": True,
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES", ""),
            "tensor_parallel_size": args.tensor_parallel_size,
            "generation_config": args.generation_config,
        }
    )

    template = load_template(args.chat_template, args.model)

    def respond(body: dict, index: int) -> str:
        if template is not None:
            try:  # vLLM's server renders the template first and answers 400 where it raises
                render(template, body["messages"])
            except jinja2.exceptions.TemplateError as exc:
                raise Refusal(str(exc)) from None
        if index == 0:
            record({"event": "chat", "model": args.model, "requests": 1, "served": True})
        return answer(body["messages"])

    def tokenize(body: dict) -> tuple[int, dict]:
        if template is None:
            return 400, {"error": {"message": "this model has no chat template", "code": 400}}
        try:
            prompt = render(template, body["messages"])
        except jinja2.exceptions.TemplateError as exc:
            return 400, {"error": {"message": str(exc), "type": "BadRequestError", "code": 400}}
        return 200, {
            "count": len(prompt),
            "max_model_len": args.max_model_len,
            "tokens": list(range(len(prompt))),
        }

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    # Its refusal of a prompt longer than the model's context: HTTP 400 in vLLM's wording (max_model_len counts
    # prompt and completion, in the test server's tokens).
    with OpenAIServer(
        responder=respond,
        model_ids=names,
        port=args.port,
        context_tokens=args.max_model_len,
        error_style="vllm",
        routes={"/tokenize": tokenize},
    ):
        print(f"stand-in vLLM server for {args.model} on {args.host}:{args.port}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
