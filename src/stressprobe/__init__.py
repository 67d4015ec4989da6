"""stressprobe: stress-testing LLM-based evaluation (persona-conditioned judging and CDV)."""

import sys

__version__ = "0.1.0"


def _begin_snakemake_job() -> None:
    """Inside a Snakemake `script:` (whose preamble defines `snakemake` in `__main__`), open the job's log
    now: the script imports the library before `run_script` runs, and a crash in those imports (a missing
    package, a native library dying from a signal) would otherwise leave an empty log."""
    smk = getattr(sys.modules.get("__main__"), "snakemake", None)
    if all(hasattr(smk, name) for name in ("log", "output", "wildcards", "rule")):
        from stressprobe.snakemake_io import begin_job

        begin_job(smk)


_begin_snakemake_job()
