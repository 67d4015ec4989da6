"""What the real-vLLM tests share: the environment (skipped, with the reason, where it cannot be made), a
registry entry for the converted model sized for 2 CPU cores, and Snakemake run from that environment."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.support import vllm_env
from tests.support.helpers import snakemake_command

RUN_TIMEOUT_S = 1200  # a bound, never reached on a healthy run (≈ 3 min on 2 busy cores)


def require() -> tuple[Path, Path]:
    """(python, model folder) of the real-vLLM environment; made on first use, skipped where it cannot be."""
    reason = vllm_env.unsupported()
    if reason:
        pytest.skip(f"real vLLM: {reason}")
    return vllm_env.ensure()


def engine_entry(model: Path | str, **settings) -> dict:
    """A vllm registry entry for the converted model: eager and a small KV cache (a load of about a minute)."""
    return {
        "backend": "vllm",
        "model": str(model),
        "max_model_len": 2048,
        "enforce_eager": True,
        "kv_cache_memory_bytes": 1 << 28,
        **settings,
    }


def env_command(python: Path, workdir: Path, config: Path, *targets: str) -> list[str]:
    """Snakemake from the vLLM environment (its jobs then run there too), with one GPU slot for vLLM jobs."""
    command = snakemake_command(workdir, config, *targets, "--resources", "gpu=1")  # (takes what follows)
    command[0] = str(python)
    return command


def run_in_env(
    python: Path, workdir: Path, config: Path, *targets: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    command = env_command(python, workdir, config, *targets)
    return subprocess.run(
        command, capture_output=True, text=True, env=vllm_env.job_env(env), timeout=RUN_TIMEOUT_S
    )


def engine_log(log: Path, model: str = "gpu") -> tuple[int, int]:
    """(engine loads, requests handed to vLLM) in a job's log, by the backend's lines before each."""
    text = log.read_text()
    loads = len(re.findall(rf"vllm: {model}: loading .* in vLLM", text))
    return loads, sum(int(n) for n in re.findall(rf"vllm: {model}: (\d+) requests to vLLM", text))


def server_pids(log_prefix: Path) -> list[int]:
    """The pids of the server processes a job's log names ('vLLM server pid N')."""
    pids = []
    for path in log_prefix.parent.glob("*.log"):
        for line in path.read_text(errors="replace").splitlines():
            if "vLLM server pid " in line:
                pids.append(int(line.split("vLLM server pid ", 1)[1].split()[0]))
    return pids


def alive(pid: int) -> bool:
    """Whether a process (not a zombie) has this pid."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"
