"""Start vLLM's OpenAI-compatible server for several models side by side, inside one job.

A job that needs several vLLM models resident at once (the CDV dataset job, rule cdv_vllm_served) starts one
server per model as a child process on its own slice of the job's GPUs, waits until each answers
`GET /health`, hands back the registry entries with the server's URL under `served_base_url` (the vllm
backend then answers through it, keeping its `vllm` identity in the cache), and stops every server when the
job ends, also on an exception:

    with serve_models(models, log_prefix="results/logs/cdv/served/MMLU", seed=42) as served:
        with open_client(served, "qwen2.5-72b", cache_path) as client:
            ...

The servers run `vllm serve` (vLLM deprecates `python -m vllm.entrypoints.openai.api_server`). The URL exists
only at run time; the config schema has no `served_base_url` key, so no config file can set one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from stressprobe.errors import StressprobeError, one_line_tail
from stressprobe.llm.backends import run_entry

log = logging.getLogger(__name__)

READY_TIMEOUT_S = 1800.0  # a 72B model on 4 GPUs takes minutes to load, more from a cold file system
POLL_S = 1.0
GRACE_S = 30.0
LOG_TAIL_LINES = 5
SERVED_URL_KEY = "served_base_url"


@dataclass
class Server:
    """One running server: its registry name and model, where it listens, its GPUs, its log and process."""

    name: str
    model: str
    port: int
    gpus: list[str]
    log_path: Path
    process: subprocess.Popen

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def job_gpus(total: int, environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this job may use: CUDA_VISIBLE_DEVICES (set by SLURM's --gpus and by Snakemake's GPU
    resources), else SLURM_JOB_GPUS, else 0..total-1."""
    environ = os.environ if environ is None else environ
    for variable in ("CUDA_VISIBLE_DEVICES", "SLURM_JOB_GPUS"):
        value = environ.get(variable, "").strip()
        if value:
            return [gpu.strip() for gpu in value.split(",") if gpu.strip()]
    return [str(i) for i in range(total)]


def assign_gpus(models: Mapping[str, Mapping[str, Any]], visible: list[str]) -> dict[str, list[str]]:
    """Each model's slice of `visible`, in the order given: its entry's `gpus` devices, none shared."""
    wanted = {name: int(entry.get("gpus", 1)) for name, entry in models.items()}
    if sum(wanted.values()) > len(visible):
        asked = ", ".join(f"{name} {n}" for name, n in wanted.items())
        raise StressprobeError(
            f"models: the served vLLM models need {sum(wanted.values())} GPUs ({asked}) but the job sees "
            f"{len(visible)} ({','.join(visible) or 'none'}); give the job more GPUs or set "
            "cdv.eval.vllm_served: false"
        )
    slices, start = {}, 0
    for name, n in wanted.items():
        slices[name] = visible[start : start + n]
        start += n
    return slices


def engine_args(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The engine settings of a registry entry, as keyword arguments of `vllm.LLM` (the in-process backend)
    and, spelt as flags, of `vllm serve`: one definition, so both paths load the model the same way."""
    args = {
        "model": str(entry["model"]),
        "tensor_parallel_size": int(entry.get("tensor_parallel_size", 1)),
        "gpu_memory_utilization": float(entry.get("gpu_memory_utilization", 0.9)),
        "max_model_len": int(entry.get("max_model_len", 8192)),
        "dtype": str(entry.get("dtype", "auto")),
        "enable_prefix_caching": True,
        "enforce_eager": bool(entry.get("enforce_eager", False)),
        "kv_cache_memory_bytes": entry.get("kv_cache_memory_bytes"),
    }
    if entry.get("chat_template"):  # a family's template in place of the one the model folder ships
        args["chat_template"] = str(entry["chat_template"])
    return args


def server_command(entry: Mapping[str, Any], port: int, seed: int, python: str = sys.executable) -> list[str]:
    """`vllm serve` for one registry entry (run as this interpreter's `vllm` command-line module, so the
    server uses the job's environment): the in-process engine's settings, and vLLM's own sampling defaults
    rather than the model's generation_config.json, as offline `LLM.chat` has them."""
    args = engine_args(entry)
    command = [python, "-m", "vllm.entrypoints.cli.main", "serve", args.pop("model")]
    command += ["--served-model-name", str(entry["model"]), "--host", "127.0.0.1", "--port", str(port)]
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            command.append(flag)
        elif value is not None and value is not False:
            command += [flag, str(value)]
    return [*command, "--generation-config", "vllm", "--seed", str(int(seed))]


# A Python exception's own line in a server log ("pkg.SomeError: why"), also behind vLLM's process prefix.
EXCEPTION_LINE = re.compile(r"^(\(\w+ pid=\d+\) )?[\w.]*(Error|Exception)\b")


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """Why a server stopped, in one line: the last exception its log reports (with the lines that go on
    explaining it), else the log's last lines; a traceback's frames would say less."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    kept = [line.rstrip() for line in text.splitlines() if line.strip()]
    starts = [i for i, line in enumerate(kept) if EXCEPTION_LINE.match(line)]
    if starts:
        return one_line_tail("\n".join(kept[starts[-1] : starts[-1] + lines]), lines)
    return one_line_tail(text, lines)


def start_server(
    name: str,
    entry: Mapping[str, Any],
    gpus: list[str],
    log_path: Path,
    seed: int,
    environ: Mapping[str, str] | None = None,
) -> Server:
    """Start one server in a session of its own (so its workers stop with it), output into `log_path`."""
    entry = run_entry(entry)  # the id run (a `substitute`) is the id served and asked for
    port = free_port()
    env = {**(os.environ if environ is None else environ), "CUDA_VISIBLE_DEVICES": ",".join(gpus)}
    log_path.parent.mkdir(parents=True, exist_ok=True)
    command = server_command(entry, port, seed)
    with open(log_path, "w", encoding="utf-8") as handle:
        process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    log.info(
        "%s: vLLM server pid %d on port %d, GPUs %s; log %s",
        name,
        process.pid,
        port,
        env["CUDA_VISIBLE_DEVICES"],
        log_path,
    )
    return Server(name, str(entry["model"]), port, gpus, log_path, process)


def wait_ready(server: Server, timeout_s: float = READY_TIMEOUT_S, poll_s: float = POLL_S) -> None:
    """Block until the server answers GET /health; a server that exits or stays silent is one error line
    naming its config key, its model and its log."""
    url = server.base_url.removesuffix("/v1") + "/health"
    what = f"config models.{server.name}: the vLLM server of {server.model}"
    deadline = time.monotonic() + timeout_s
    while True:
        status = server.process.poll()
        if status is not None:
            tail = log_tail(server.log_path)
            raise StressprobeError(
                f"{what} {exit_reason(status)} before answering {url}; see {server.log_path}"
                + (f": {tail}" if tail else "")
            )
        try:
            if httpx.get(url, timeout=poll_s).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            raise StressprobeError(
                f"{what} did not answer {url} within {timeout_s:g} s; see {server.log_path}"
            )
        time.sleep(poll_s)


def exit_reason(status: int) -> str:
    """How a process ended, from its Popen return code (negative: the signal that killed it)."""
    if status < 0:
        with contextlib.suppress(ValueError):
            return f"was killed by signal {-status} ({signal.Signals(-status).name})"
        return f"was killed by signal {-status}"
    return f"exited with status {status}"


def stop_servers(servers: list[Server], grace_s: float = GRACE_S) -> None:
    """SIGTERM to every server's process group, then SIGKILL to those still running after `grace_s`."""
    for server in servers:
        _signal_group(server.process, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    for server in servers:
        try:
            server.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.warning("%s: the vLLM server ignored SIGTERM for %g s; killing it", server.name, grace_s)
            _signal_group(server.process, signal.SIGKILL)
            server.process.wait()
    # Workers of a server that exited first may still hold GPU memory.
    for server in servers:
        _signal_group(server.process, signal.SIGKILL)


def _signal_group(process: subprocess.Popen, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)


def served_entries(
    models: Mapping[str, Mapping[str, Any]], servers: list[Server]
) -> dict[str, dict[str, Any]]:
    """The registry `models` with each served model's entry pointing at its server."""
    urls = {server.name: server.base_url for server in servers}
    return {
        name: {**entry, SERVED_URL_KEY: urls[name]} if name in urls else dict(entry)
        for name, entry in models.items()
    }


@contextlib.contextmanager
def serve_models(
    models: Mapping[str, Mapping[str, Any]],
    served: list[str],
    log_prefix: str | os.PathLike,
    seed: int,
    ready_timeout_s: float = READY_TIMEOUT_S,
    grace_s: float = GRACE_S,
    environ: Mapping[str, str] | None = None,
) -> Iterator[dict[str, dict[str, Any]]]:
    """Serve the models named in `served` (all started before any is waited for: they load in parallel);
    yields `models` with those entries pointing at their servers. Server logs: `<log_prefix>.<model>.server.log`.
    """
    wanted = {name: models[name] for name in served}
    with _sigterm_as_exit():
        gpus = job_gpus(sum(int(entry.get("gpus", 1)) for entry in wanted.values()), environ)
        slices = assign_gpus(wanted, gpus)
        servers: list[Server] = []
        try:
            for name in served:
                log_path = Path(f"{log_prefix}.{name}.server.log")
                servers.append(start_server(name, models[name], slices[name], log_path, seed, environ))
            for server in servers:
                wait_ready(server, ready_timeout_s)
                log.info("%s: the vLLM server answers at %s", server.name, server.base_url)
            yield served_entries(models, servers)
        finally:
            stop_servers(servers, grace_s)


@contextlib.contextmanager
def _sigterm_as_exit() -> Iterator[None]:
    """SIGTERM (Snakemake cancelling the job, a scheduler's time limit) raises SystemExit, so the servers,
    which run in sessions of their own, are stopped on the way out instead of outliving the job."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, _frame: Any) -> None:
        log.warning("%s: stopping the vLLM servers and leaving", signal.Signals(signum).name)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
