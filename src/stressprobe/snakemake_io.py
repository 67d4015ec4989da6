"""The bridge between a Snakemake `script:` and the library: logging, one-line errors, clean failure."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError

log = logging.getLogger("stressprobe")


def configure_logging(log_path: str | None) -> None:
    """Send the library's log records to the rule's log file (and stderr when there is none)."""
    handler: logging.Handler = (
        logging.FileHandler(log_path, mode="w") if log_path else logging.StreamHandler()
    )
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


def run_script(main: Callable[[Any], None], smk: Any) -> None:
    """Run `main(smk)`; a StressprobeError becomes one line on stderr and in the log, and exit status 1."""
    configure_logging(smk.log[0] if len(smk.log) else None)
    try:
        main(smk)
    except StressprobeError as exc:
        log.error("%s", exc)
        remove_outputs(list(smk.output))
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
    except BaseException:
        log.exception("unexpected failure")
        remove_outputs(list(smk.output))
        raise


def cache_path(smk: Any) -> str:
    """The response cache's location.

    Read from the config rather than `params:` on purpose: moving the cache must not rerun any job.
    """
    return smk.config["cache"]["path"]
