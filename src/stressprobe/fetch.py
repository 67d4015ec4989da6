"""Published files the method depends on (prompt templates, question samples), fetched at run time and
checked against a pinned sha256.

The files are never copied into the repository. Each is a *pinned source*, one entry of the config's
`sources` (name -> url, commit, sha256, or a local `path` with its sha256), and a file key that accepts one
says `source:<name>`. One download job per source (rule fetch_source) fetches it on the submitting host into
results/sources/<name>/<file name of the URL> and refuses a file whose checksum differs (a moved branch, an
edited file, a proxy's error page). A file key given a URL is refused (`refuse_url`): a published
file is a source, pinned in one place.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_target

TIMEOUT_S = 60.0
SOURCE_PREFIX = "source:"
SOURCES_DIR = "results/sources"


def is_url(spec: str) -> bool:
    """Whether a config value is an http(s) URL to fetch (else a local path or a source reference)."""
    return spec.startswith(("http://", "https://"))


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def source_name(value: str | None) -> str | None:
    """The source a file key names (`source:<name>`), or None for a plain path."""
    if value and value.startswith(SOURCE_PREFIX):
        return value[len(SOURCE_PREFIX) :]
    return None


def source_keys(name: str) -> tuple[str, str]:
    """The config keys that hold a source's URL (or path) and its sha256, for error messages."""
    return f"sources.{name}.url", f"sources.{name}.sha256"


def refuse_url(value: str, config_key: str) -> None:
    """A file key holds a path or `source:<name>`, never a URL: a published file is pinned once, under
    `sources`, with its commit and sha256."""
    if is_url(value):
        raise StressprobeError(
            f"config key '{config_key}': {value} is a URL; add it under 'sources' (url, commit, sha256) and "
            f"set '{config_key}: source:<name>'"
        )


def check_sources(pinned: Mapping[str, Mapping[str, Any]]) -> None:
    """Before any job: every source has exactly one of url and path, its commit (when given) appears in its
    URL, and a local copy matches its sha256."""
    for name, entry in pinned.items():
        url_key, sha_key = source_keys(name)
        if bool(entry.get("url")) == bool(entry.get("path")):
            raise StressprobeError(
                f"config key 'sources.{name}': give exactly one of 'url' (fetched by a job) and 'path' (a local copy)"
            )
        if not entry.get("sha256"):
            raise StressprobeError(
                f"config key '{sha_key}': required when '{url_key}' is a URL; "
                "give the sha256 of the file the study must use"
            )
        commit = entry.get("commit")
        if commit and entry.get("url") and commit not in entry["url"]:
            raise StressprobeError(
                f"config key 'sources.{name}.commit': {commit} is not in the URL {entry['url']}; "
                "pin the URL to that commit (a branch name can move)"
            )
        if entry.get("path"):
            check_local_copy(entry["path"], entry["sha256"], f"sources.{name}.path", sha_key)


def source_file(name: str, entry: Mapping[str, Any]) -> str:
    """Where jobs read a source: its local copy, or where its download job writes it (the URL's file name,
    so that its extension still says how to read it)."""
    if entry.get("path"):
        return entry["path"]
    filename = unquote(Path(urlparse(entry["url"]).path).name) or "file"
    return f"{SOURCES_DIR}/{name}/{filename}"


def resolve(value: str, pinned: Mapping[str, Mapping[str, Any]], config_key: str) -> str:
    """The file a file key means: `source:<name>` -> that source's file; anything else is a path."""
    name = source_name(value)
    if name is None:
        return value
    if name not in pinned:
        known = ", ".join(sorted(pinned)) or "none"
        raise StressprobeError(
            f"config key '{config_key}': no source '{name}' in 'sources' (known: {known}); add it or fix the name"
        )
    return source_file(name, pinned[name])


def check_local_copy(path: str, sha256: str, path_key: str, sha256_key: str) -> None:
    """A source's local copy (e.g. downloaded by hand for an offline cluster) must match its sha256."""
    local = Path(path)
    if local.is_file() and (got := sha256_hex(local.read_bytes())) != sha256.lower():
        raise StressprobeError(
            f"config key '{sha256_key}': {local} has sha256 {got}, not {sha256}; "
            "use the pinned file or fix the checksum"
        )


def fetch_verified(url: str, sha256: str, dest: str | os.PathLike, config_key: str, sha256_key: str) -> None:
    """Download `url` to `dest` if its sha256 is `sha256`; otherwise nothing is written and the error names
    `config_key` (the key that holds the URL) or `sha256_key` (the checksum's)."""
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as reply:  # noqa: S310 (http(s) only, checked)
            data = reply.read()
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise StressprobeError(
            f"config key '{config_key}': cannot download {url} ({reason}); check the URL and the network, "
            "or download the file yourself and give its local path"
        ) from None
    got = sha256_hex(data)
    if got != sha256.lower():
        raise StressprobeError(
            f"config key '{sha256_key}': {url} has sha256 {got}, not {sha256}; "
            "the file changed or the URL is wrong: check both before using it"
        )
    with atomic_target(dest, suffix=Path(dest).suffix) as tmp:
        tmp.write_bytes(data)


def unpinned_problem(source: Mapping[str, Any], key: str) -> str | None:
    """Why a dataset source (a persona pool) is not pinned (a Hugging Face dataset without `revision`: its current head would be read,
    whatever version that is), or None when it is (a revision, or a local `path`)."""
    if source.get("path") or source.get("revision") or not source.get("hf_dataset"):
        return None
    return (
        f"{key}: {source['hf_dataset']} has no 'revision': its current head would be read, not a fixed "
        f"version; set '{key}.revision' to a dataset commit (or '{key}.path' to a local copy), or "
        "'personas.unpinned: warn' to read the head anyway"
    )
