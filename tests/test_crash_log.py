"""A job that dies from a signal leaves a log naming its rule, model, signal, Python stack and a remedy.

Real Snakemake runs of a two-rule workflow whose script (through `run_script`) dies the way a native
library does: SIGILL raised in the process (what an AMX instruction on a VM that traps it delivers) and
a real SIGSEGV from reading address 0 in C code.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from stressprobe.snakemake_io import crash_context, job_models

SNAKEFILE = """
rule crash:
    output:
        "out/{model}.txt",
    log:
        "logs/crash/{model}.log",
    params:
        models=lambda w: {w.model: {"backend": "llamacpp", "gguf": "m.gguf"}},
        how=config["how"],
    script:
        "crash.py"


use rule crash as api with:
    output:
        "api/{model}.txt",
    log:
        "logs/api/{model}.log",
    params:
        models=lambda w: {w.model: {"backend": "openai", "model": "gpt-4o"}},
"""

SCRIPT = """
import ctypes
import os
import signal
import sys

from stressprobe.snakemake_io import run_script


def matmul_in_native_code(how):
    if how == "sigterm":  # as serving._sigterm_as_exit does: the handler says why and exits
        signal.signal(signal.SIGTERM, lambda *_: (print("SIGTERM: leaving"), sys.exit(143)))
        os.kill(os.getpid(), signal.SIGTERM)
    if how == "sigill":
        os.kill(os.getpid(), signal.SIGILL)
    ctypes.string_at(0)


def main(smk):
    matmul_in_native_code(smk.params.how)


run_script(main, snakemake)
"""


def run_crashing_job(tmp_path, target: str, how: str) -> tuple[subprocess.CompletedProcess, str]:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    (tmp_path / "crash.py").write_text(textwrap.dedent(SCRIPT))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-c1", target, "--config", f"how={how}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc, (tmp_path / target.replace("out/", "logs/crash/").replace("api/", "logs/api/")).with_suffix(
        ".log"
    ).read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "fatal"), [("sigill", "Illegal instruction"), ("sigsegv", "Segmentation fault")]
)
def test_native_crash_log_names_rule_model_signal_stack_and_remedy(tmp_path, how, fatal):
    proc, log = run_crashing_job(tmp_path, "out/smollm2-135m.txt", how)
    assert proc.returncode != 0
    assert not (tmp_path / "out" / "smollm2-135m.txt").exists()
    lines = log.splitlines()
    assert "job: rule crash, wildcards model=smollm2-135m, models smollm2-135m (llamacpp)" in lines[0]
    assert "set models.smollm2-135m.extra_buffers to off in the config and rerun" in lines[1]
    assert f"Fatal Python error: {fatal}" in log
    # The Python stack where it happened, innermost first.
    stack = log[log.index(f"Fatal Python error: {fatal}") :]
    assert stack.index("in matmul_in_native_code") < stack.index("in main") < stack.index("in run_script")


@pytest.mark.slow
def test_a_job_stopped_by_sigterm_logs_its_exit_without_a_traceback(tmp_path):
    proc, log = run_crashing_job(tmp_path, "api/gpt-4o.txt", "sigterm")
    assert proc.returncode != 0
    assert "stopped: exit status 143" in log
    assert "Traceback" not in log and "unexpected failure" not in log


@pytest.mark.slow
def test_crash_of_a_job_without_local_models_suggests_a_rerun_alone(tmp_path):
    proc, log = run_crashing_job(tmp_path, "api/gpt-4o.txt", "sigsegv")
    assert proc.returncode != 0
    assert "job: rule api, wildcards model=gpt-4o, models gpt-4o (openai)" in log
    assert "extra_buffers" not in log and "snakemake -c1 --forcerun" in log
    assert "Fatal Python error: Segmentation fault" in log


def test_job_models_prefers_the_model_wildcard():
    models = {"a": {"backend": "llamacpp"}, "b": {"backend": "openai"}}
    assert job_models({"model": "b", "dataset": "x"}, models) == {"b": "openai"}
    assert job_models({"dataset": "x"}, models) == {"a": "llamacpp", "b": "openai"}
    assert job_models({"dataset": "x"}, None) == {}


def test_crash_context_names_the_job_and_the_remedy_for_local_models():
    head, advice = crash_context("cdv_search", {"dataset": "demo-mmlu"}, {"p": "openai", "v": "llamacpp"})
    assert head.startswith(
        "job: rule cdv_search, wildcards dataset=demo-mmlu, models p (openai), v (llamacpp)"
    )
    assert "models.v.extra_buffers to off" in advice and "models.p" not in advice
    head, advice = crash_context("write_qrels", {}, {})
    assert "wildcards none, models none" in head and "--forcerun" in advice


IMPORT_SNAKEFILE = """
rule imports:
    output:
        "out/{how}.txt",
    log:
        "logs/imports/{how}.log",
    params:
        models={"smollm2-135m": {"backend": "llamacpp", "gguf": "m.gguf"}},
    script:
        "scripts/{wildcards.how}.py"
"""

# Scripts that die in their own top-level imports, after the library but before `run_script`: a package
# that is missing, and a native extension that kills the process while it loads.
IMPORT_SCRIPTS = {
    "missing": "from stressprobe.io import read_jsonl\nimport stressprobe_no_such_package\n",
    "native": "from stressprobe.io import read_jsonl\nimport ctypes\nctypes.string_at(0)\n",
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("how", "expected"),
    [
        ("missing", "ModuleNotFoundError: No module named 'stressprobe_no_such_package'"),
        ("native", "Fatal Python error: Segmentation fault"),
    ],
)
def test_a_crash_in_the_scripts_imports_leaves_a_log(tmp_path, how, expected):
    (tmp_path / "Snakefile").write_text(IMPORT_SNAKEFILE)
    (tmp_path / "scripts").mkdir()
    for name, text in IMPORT_SCRIPTS.items():
        (tmp_path / "scripts" / f"{name}.py").write_text(text)
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-c1", f"out/{how}.txt"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    log = (tmp_path / "logs" / "imports" / f"{how}.log").read_text()
    assert f"job: rule imports, wildcards how={how}, models smollm2-135m (llamacpp)" in log.splitlines()[0]
    assert expected in log
