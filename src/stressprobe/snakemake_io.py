"""The bridge between a Snakemake `script:` and the library: logging, one-line errors, clean failure."""

from __future__ import annotations

import faulthandler
import logging
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

from stressprobe.errors import StressprobeError

log = logging.getLogger("stressprobe")


def configure_logging(log_path: str | None) -> None:
    """Send the library's log records to the rule's log file (and stderr when there is none)."""
    handler: logging.Handler = logging.StreamHandler()
    if log_path:
        # Emptied once, then appended to: a library that reconfigures logging (vLLM's dictConfig at import)
        # closes every handler, and a closed mode-"w" FileHandler drops all later records silently, while
        # an append-mode one reopens its file on the next record.
        open(log_path, "w").close()
        handler = logging.FileHandler(log_path, mode="a")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    # Third-party chatter (HTTP requests, model loading) would drown the workflow's own messages.
    for noisy in ("httpx", "httpcore", "openai", "sentence_transformers", "urllib3", "filelock"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def remove_outputs(outputs: list[str]) -> None:
    """Delete whatever a failed job managed to write, so nothing looks complete."""
    for out in outputs:
        path = Path(out)
        if path.is_file() or path.is_symlink():
            path.unlink()


def job_models(wildcards: Mapping[str, str], models: Mapping[str, Any] | None) -> dict[str, str]:
    """The models a job calls, name -> backend: its `model` wildcard, else the registry entries it was given."""
    models = models or {}
    names = [wildcards["model"]] if wildcards.get("model") in models else sorted(models)
    return {name: str((models[name] or {}).get("backend", "?")) for name in names}


def crash_context(rule: str, wildcards: Mapping[str, str], models: Mapping[str, str]) -> list[str]:
    """The lines a job's log starts with: what runs, and what to try if it dies from a signal.

    A native crash (llama.cpp, torch) kills the process before Python can log anything; faulthandler then
    appends the signal and the Python stack, and these lines give that stack its context and a remedy.
    """
    where = ", ".join(f"{k}={v}" for k, v in wildcards.items()) or "none"
    used = ", ".join(f"{name} ({backend})" for name, backend in models.items()) or "none"
    lines = [f"job: rule {rule}, wildcards {where}, models {used}, pid {os.getpid()}"]
    advice = (
        "a native crash (a signal such as SIGILL or SIGSEGV) ends this log with 'Fatal Python error' and "
    )
    advice += "the Python stack where it happened"
    local = [name for name, backend in models.items() if backend == "llamacpp"]
    if local:
        keys = ", ".join(f"models.{name}.extra_buffers" for name in local)
        advice += (
            f"; inside llama.cpp it is usually a CPU feature this machine advertises but cannot run "
            f"(e.g. AMX): set {keys} to off in the config and rerun"
        )
    else:
        advice += "; rerun this job alone (snakemake -c1 --forcerun <its output>) to see whether it repeats"
    return [*lines, advice]


_crash_log: IO[str] | None = None


def enable_crash_log(log_path: str | None) -> None:
    """Write the Python stack of every thread to the job's log (or stderr) when a fatal signal arrives."""
    global _crash_log
    if log_path is None:
        faulthandler.enable(sys.stderr, all_threads=True)
        return
    # Its own handle in append mode, kept for the process's life: faulthandler writes to its descriptor
    # from the signal handler, after whatever the logging handler has flushed.
    _crash_log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115
    faulthandler.enable(_crash_log, all_threads=True)


_begun: str | None = None


def begin_job(smk: Any) -> None:
    """Open the job's log: its first lines name the job, a fatal signal appends its stack, and an exception
    that escapes the script (an import that fails before `run_script` runs) is logged.

    Called by `run_script`, and earlier by `stressprobe/__init__.py` when a Snakemake script imports the
    package, so that a crash during the script's own imports leaves a log too. Once per log path.
    """
    global _begun
    log_path = smk.log[0] if len(smk.log) else None
    if _begun == (log_path or ""):
        return
    _begun = log_path or ""
    configure_logging(log_path)
    # Tables mark rows computed with a substituted model (tables.mark_substitutes); imported only then, as
    # most jobs write no table and need no pandas.
    registry = (getattr(smk, "config", None) or {}).get("models") or {}
    if any(isinstance(e, dict) and e.get("substitute") for e in registry.values()):
        from stressprobe.tables import set_model_registry

        set_model_registry(registry)
    params = getattr(smk, "params", None)
    models = params.get("models") if hasattr(params, "get") else None
    wildcards = dict(smk.wildcards.items()) if hasattr(smk.wildcards, "items") else {}
    for line in crash_context(getattr(smk, "rule", "?"), wildcards, job_models(wildcards, models)):
        log.info("%s", line)
    enable_crash_log(log_path)
    previous = sys.excepthook

    def log_uncaught(kind, value, traceback):
        if not getattr(value, "stressprobe_logged", False):  # run_script logs what `main` raises
            log.critical("the job's script failed", exc_info=(kind, value, traceback))
        previous(kind, value, traceback)

    sys.excepthook = log_uncaught


def run_script(main: Callable[[Any], None], smk: Any) -> None:
    """Run `main(smk)`; a StressprobeError becomes one line on stderr and in the log, and exit status 1.

    The log first names the job (rule, wildcards, models); a native crash appends its signal and stack.
    """
    begin_job(smk)
    try:
        main(smk)
    except StressprobeError as exc:
        log.error("%s", exc)
        remove_outputs(list(smk.output))
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except SystemExit as exc:  # a signal handler's exit (SIGTERM): the handler logged why; no traceback
        log.error("stopped: exit status %s", exc.code)
        remove_outputs(list(smk.output))
        raise
    except BaseException as exc:
        log.exception("unexpected failure")
        exc.stressprobe_logged = True
        remove_outputs(list(smk.output))
        raise


def cache_path(smk: Any) -> str:
    """The response cache's location.

    Read from the config rather than `params:` on purpose: moving the cache must not rerun any job.
    """
    return smk.config["cache"]["path"]
