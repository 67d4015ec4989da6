"""Published texts the method depends on, fetched at run time and checked against a pinned sha256.

The texts are never copied into the repository: a download job fetches them into results/ and refuses a
file whose checksum differs from the one in the config (a moved tag, an edited file, a proxy's error page).
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_target

TIMEOUT_S = 60.0
SUFFIXES = (".yaml", ".yml", ".txt")


def is_url(spec: str) -> bool:
    """Whether a template source in the config is a URL to fetch (else a local path)."""
    return spec.startswith(("http://", "https://"))


def url_suffix(url: str) -> str:
    """The file extension the fetched copy keeps (it decides how the template is read): .yaml/.yml/.txt."""
    suffix = Path(urlparse(url).path).suffix.lower()
    return suffix if suffix in SUFFIXES else ".txt"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_source(spec: str, sha256: str | None, config_key: str) -> None:
    """Before any job: a URL needs its pinned sha256 (an unpinned published text could change under the
    study), and a local copy given with one (e.g. downloaded by hand for an offline cluster) must match it."""
    if is_url(spec):
        if not sha256:
            raise StressprobeError(
                f"config key '{config_key}_sha256': required when '{config_key}' is a URL; "
                "give the sha256 of the file the study must use"
            )
        return
    path = Path(spec)
    if sha256 and path.is_file():
        got = sha256_hex(path.read_bytes())
        if got != sha256.lower():
            raise StressprobeError(
                f"config key '{config_key}_sha256': {path} has sha256 {got}, not {sha256}; "
                "use the pinned file or fix the checksum"
            )


def fetch_verified(url: str, sha256: str, dest: str | os.PathLike, config_key: str) -> None:
    """Download `url` to `dest` if its sha256 is `sha256`; otherwise nothing is written and the error names
    `config_key` (the key that holds the URL; its checksum is `{config_key}_sha256`)."""
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
            f"config key '{config_key}_sha256': {url} has sha256 {got}, not {sha256}; "
            "the file changed or the URL is wrong: check both before judging with it"
        )
    with atomic_target(dest, suffix=Path(dest).suffix) as tmp:
        tmp.write_bytes(data)
