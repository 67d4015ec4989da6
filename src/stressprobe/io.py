"""Reading and writing the workflow's files: atomic writes and line-numbered errors."""

from __future__ import annotations

import contextlib
import gzip
import importlib.util
import json
import os
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError


@contextlib.contextmanager
def atomic_target(path: str | os.PathLike, suffix: str = ".tmp") -> Iterator[Path]:
    """Yield a temporary path next to `path` to write to; it replaces `path` only once the block succeeds.

    A killed job or a full disk leaves either the old file or none, never a truncated one. The temporary
    file is in the same directory (a rename across file systems would not be atomic) and is removed when
    the block fails; `suffix` keeps the extension for writers that infer the format from it.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=suffix)
        os.close(fd)
        yield Path(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise StressprobeError(
            f"{path}: cannot write ({exc.strerror}); check free space and permissions"
        ) from exc
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)


def atomic_write(path: str | os.PathLike, text: str) -> None:
    """Write `text` to `path` so that a reader never sees a partial file (flushed to disk before the rename)."""
    with atomic_target(path) as tmp, open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def write_jsonl(path: str | os.PathLike, records: Iterable[dict[str, Any]]) -> None:
    """Write one JSON object per line, atomically."""
    atomic_write(path, "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in records))


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write pretty-printed JSON, atomically."""
    atomic_write(path, json.dumps(obj, indent=2, ensure_ascii=False, sort_keys=True) + "\n")


def read_text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield `(line_number, line)` without the newline; a file that is missing or not UTF-8 is a clear error."""
    path = Path(path)
    if not path.exists():
        raise StressprobeError(f"{path}: file not found; check the path in the config")
    if path.is_dir():
        raise StressprobeError(f"{path}: is a directory, expected a file; check the path in the config")
    # A gzip file (TREC's run archives are `input.<tag>.gz`) is read decompressed.
    with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as handle:
        # Decoded line by line (not by the buffered text layer) so that the error names the right line.
        for lineno, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise StressprobeError(
                    f"{path}:{lineno}: not valid UTF-8; re-encode the file as UTF-8"
                ) from None
            yield lineno, line.rstrip("\r\n")


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield `(line_number, record)` of a JSON-lines file; blank lines are skipped, a bad line names file and line."""
    for lineno, line in read_text_lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise StressprobeError(
                f"{path}:{lineno}: not valid JSON ({exc.msg}); fix or remove the line"
            ) from None
        if not isinstance(record, dict):
            raise StressprobeError(f"{path}:{lineno}: expected a JSON object per line")
        yield lineno, record


def read_jsonl(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a JSON-lines file; blank lines are skipped, a malformed line names file and line."""
    return [record for _, record in iter_jsonl(path)]


def read_tsv_lines(path: str | os.PathLike) -> Iterator[tuple[int, list[str]]]:
    """Yield `(line_number, fields)` of a tab-separated file, skipping blank lines."""
    for lineno, line in read_text_lines(path):
        if line.strip():
            yield lineno, line.split("\t")


def user_cache_dir(kind: str) -> Path:
    """`$XDG_CACHE_HOME/stressprobe/<kind>` (default `~/.cache/...`): per user and host, outside any results."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stressprobe" / kind


PACKAGE_PREFIX = "package:"


def package_file(spec: str, where: str) -> Path:
    """The existing file `package:<module>/<file>` names in an installed package; `where` opens each error.

    Found with importlib's finder, without importing the package (some print or load models on import).
    """
    module, _, relative = spec.removeprefix(PACKAGE_PREFIX).partition("/")
    if not module or not relative:
        raise StressprobeError(f"{where}: expected 'package:<module>/<file>'")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a dotted name whose parent package is missing, or a malformed name
        found = None
    if found is None or not found.submodule_search_locations:
        raise StressprobeError(
            f"{where}: package {module!r} of {spec!r} cannot be found ({module!r} is not installed); "
            "pip install it or give a path to the file"
        )
    path = Path(next(iter(found.submodule_search_locations))) / relative
    if not path.exists():
        raise StressprobeError(f"{where}: {path} does not exist in the installed package")
    return path


def output_path_problem(path: str | os.PathLike) -> str | None:
    """Why a job could not write `path`, or None when it can.

    The nearest existing ancestor decides: it must be a directory the job may write into. Checked before
    any job runs, because Snakemake itself stumbles over these cases with a traceback when it prepares the
    job's output directory.
    """
    path = Path(path)
    for parent in path.parents:
        if parent.is_symlink() and not parent.exists():
            return f"{parent}: a broken symbolic link where {path} needs a directory; fix or remove the link"
        if not parent.exists():
            continue
        if not parent.is_dir():
            return f"{parent}: a file where {path} needs a directory; move or delete the file"
        if not os.access(parent, os.W_OK | os.X_OK):
            return (
                f"{parent}: not writable (read-only file system or permissions), but {path} must be "
                "written there; make it writable or remove it"
            )
        return None
    return None
