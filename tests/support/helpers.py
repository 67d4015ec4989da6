"""Shared test helpers: paths, the shared real data, and running the workflow in a scratch directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = ROOT.parent / "shared" / "data"
TINY_CONFIG = ROOT / "tests" / "configs" / "tiny.yaml"
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def shared_data(*parts: str) -> Path:
    """A path under ../shared/data, or skip the test when that real data is not on this machine."""
    path = SHARED_DATA.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not available: {path} (only present in the development checkout)")
    return path


def make_workdir(path: Path) -> Path:
    """A scratch working directory that sees the project's resources/ (results/ stay inside it)."""
    path.mkdir(parents=True, exist_ok=True)
    link = path / "resources"
    if not link.exists():
        link.symlink_to(ROOT / "resources")
    return path


def run_snakemake(
    workdir: Path,
    *args: str,
    configfile: Path = TINY_CONFIG,
    check: bool = True,
    env: dict[str, str] | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess:
    """Run the project's workflow in `workdir` with `configfile`; returns the finished process."""
    proc = subprocess.run(
        snakemake_command(workdir, configfile, *args),
        capture_output=True,
        text=True,
        env=workflow_env(env),
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
        )
    return proc


def snakemake_command(workdir: Path, configfile: Path, *args: str) -> list[str]:
    """The command line that runs the project's workflow in `workdir` with `configfile` on 2 cores."""
    return [
        *SNAKEMAKE,
        "--snakefile",
        str(ROOT / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(configfile),
        "--cores",
        "2",
        *args,
    ]


def workflow_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a workflow run: this one, offline for Hugging Face, plus `extra`."""
    return {**os.environ, "HF_HUB_OFFLINE": "1", **(extra or {})}
