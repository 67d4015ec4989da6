"""Provenance records: what produced a results folder (config, models, versions, commit, seeds)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

# The distributions whose versions can change a result; missing ones (optional extras) are recorded as null.
TRACKED_PACKAGES = (
    "stressprobe",
    "snakemake",
    "llama_cpp_python",
    "openai",
    "vllm",
    "sentence-transformers",
    "torch",
    "pytrec-eval-terrier",
    "numpy",
    "scipy",
    "pandas",
    "statsmodels",
    "matplotlib",
)


def config_hash(config: dict[str, Any]) -> str:
    """A stable hash of the whole config (key order does not matter)."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def package_versions(names: tuple[str, ...] = TRACKED_PACKAGES) -> dict[str, str | None]:
    """Installed versions of `names`, read from package metadata without importing anything."""
    versions = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def git_commit(directory: str | Path) -> str | None:
    """The commit of the workflow's checkout (with `-dirty` when it has local changes), or None."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(directory), "describe", "--always", "--dirty", "--abbrev=40"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit or None


def model_identities(models: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per model: backend and the model id or weights file (never keys or URLs with credentials)."""
    identities = {}
    for name, entry in sorted(models.items()):
        identity = {"backend": entry["backend"]}
        # `substitute`: the id actually run in place of the paper's `model`.
        for field in ("model", "substitute", "gguf", "tensor_parallel_size", "dtype"):
            if field in entry:
                identity[field] = entry[field]
        identities[name] = identity
    return identities


def seeds(config: dict[str, Any]) -> dict[str, Any]:
    """Every seed the config sets, by config key."""
    found = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                path = f"{prefix}.{key}" if prefix else key
                if key == "seed" or key.endswith("_seed"):
                    found[path] = value
                walk(value, path)

    walk(config, "")
    return found


def pins(config: dict[str, Any]) -> dict[str, Any]:
    """The pinned inputs the jobs check: the embedding weights' sha256 and each persona pool's dataset
    revision (or local file and sha256); null where a pin is missing."""
    embedding = config.get("embedding", {})
    sources = config.get("personas", {}).get("sources", {})
    fields = ("hf_dataset", "hf_config", "revision", "path", "sha256")
    return {
        "embedding": {"model": embedding.get("model"), "sha256": embedding.get("sha256")},
        "persona_sources": {
            name: {field: source.get(field) for field in fields} for name, source in sorted(sources.items())
        },
    }


def provenance_record(config: dict[str, Any], area: str, commit: str | None) -> dict[str, Any]:
    """The provenance of one results area; free of timestamps so that identical runs give identical files."""
    return {
        "area": area,
        "config_sha256": config_hash(config),
        "git_commit": commit,
        "models": model_identities(config.get("models", {})),
        "packages": package_versions(),
        "pins": pins(config),
        "seeds": seeds(config),
    }
