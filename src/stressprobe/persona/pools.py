"""Persona pools, the domain taxonomy, and retrieval of the query, domain and orthogonal roles.

Pools: PersonaHub (`persona` free text) and USPersona (Nemotron-Personas-USA), whose persona text is built
from the skills fields only: "A persona with the following skills: ...". Demographic, cultural and
lifestyle fields are never read, so they cannot leak into a judge's prompt.
Retrieval is by cosine similarity of normalised embeddings (see `stressprobe.embedding`).
"""

from __future__ import annotations

import ast
import hashlib
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from stressprobe.embedding import file_sha256
from stressprobe.errors import StressprobeError
from stressprobe.fetch import unpinned_problem
from stressprobe.io import iter_jsonl, read_tsv_lines
from stressprobe.persona.pool_build import BLOCK_ROWS, rank_candidates

log = logging.getLogger(__name__)

USPERSONA_PREFIX = "A persona with the following skills: "
SKILLS_LIST_FIELD = "skills_and_expertise_list"
SKILLS_TEXT_FIELD = "skills_and_expertise"
ROLES = ("query", "domain", "orthogonal")
# How the orthogonal persona is read: the least similar persona, or the one nearest cosine 0.
ORTHOGONAL_READINGS = ("least_similar", "nearest_zero")
# What an unpinned Hugging Face pool (no `revision`) gets: a loud warning, or a refusal (`personas.unpinned`).
UNPINNED = ("warn", "refuse")


# ---- taxonomy and query domains ---------------------------------------------------------------------


@dataclass(frozen=True)
class Domain:
    """One domain of the taxonomy."""

    name: str
    description: str

    @property
    def text(self) -> str:
        """What is embedded for the domain: its name and description."""
        return f"{self.name}: {self.description}" if self.description else self.name


def read_taxonomy(path: str | Path) -> list[Domain]:
    """Read `domains: [{name, description}, ...]` from a YAML file."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StressprobeError(f"{path}: taxonomy file not found; fix 'personas.taxonomy'") from None
    except yaml.YAMLError as exc:
        raise StressprobeError(f"{path}: not valid YAML ({exc}); fix the file") from None
    entries = data.get("domains") if isinstance(data, dict) else None
    if not isinstance(entries, list) or not entries:
        raise StressprobeError(f"{path}: expected 'domains: [{{name, description}}, ...]'; fix the file")
    domains = []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"].strip():
            raise StressprobeError(f"{path}: domains[{i}] needs a 'name'; fix the entry")
        domains.append(Domain(entry["name"].strip(), str(entry.get("description") or "").strip()))
    if len({d.name for d in domains}) != len(domains):
        raise StressprobeError(f"{path}: domain names must be unique; fix the file")
    return domains


def require_domain_source(dataset: str, mapping: str | None, taxonomy: str | None) -> bool:
    """A dataset needs a query->domain file or a taxonomy to assign domains from: neither is an error.

    Returns whether the taxonomy file exists, so that callers need not check again.
    """
    has_taxonomy = bool(taxonomy) and Path(taxonomy).is_file()
    if not mapping and not has_taxonomy:
        raise StressprobeError(
            f"dataset '{dataset}': no 'domains' file and no taxonomy at '{taxonomy}'; give "
            f"'judging.datasets.{dataset}.domains' or a 'personas.taxonomy' file to assign domains "
            "automatically"
        )
    return has_taxonomy


def read_domain_mapping(path: str | Path, qids: Iterable[str], known: Sequence[str] | None) -> dict[str, str]:
    """Read `qid<TAB>domain` for the selected `qids`.

    A domain that is not in the taxonomy (`known`, when there is one) is an error naming the line; a
    selected query without a line is an error too (a silent gap would drop it from the domain role).
    Lines of unselected queries are ignored.
    """
    mapping: dict[str, str] = {}
    for lineno, fields in read_tsv_lines(path):
        if len(fields) != 2 or not fields[0].strip() or not fields[1].strip():
            raise StressprobeError(f"{path}:{lineno}: expected 'qid<TAB>domain'; fix the line")
        qid, name = fields[0].strip(), fields[1].strip()
        if known is not None and name not in known:
            raise StressprobeError(
                f"{path}:{lineno}: domain '{name}' is not in the taxonomy ({', '.join(known)}); fix the name"
            )
        mapping[qid] = name
    qids = list(qids)
    missing = [q for q in qids if q not in mapping]
    if missing:
        raise StressprobeError(
            f"{path}: query '{missing[0]}' has no domain ({len(missing)} missing); add a line "
            "'qid<TAB>domain' or remove the dataset's 'domains' key to assign domains automatically"
        )
    return {q: mapping[q] for q in qids}


def assign_domains(
    qids: Sequence[str], query_vectors: np.ndarray, domains: Sequence[Domain], domain_vectors: np.ndarray
) -> dict[str, tuple[str, float]]:
    """Each query's most similar domain (by its name + description) with the cosine similarity."""
    similarities = query_vectors @ domain_vectors.T
    best = np.argmax(similarities, axis=1)
    return {
        q: (domains[j].name, float(similarities[i, j]))
        for i, (q, j) in enumerate(zip(qids, best, strict=True))
    }


def domains_for_queries(
    dataset: str,
    topics: Mapping[str, str],
    mapping_path: str | None,
    taxonomy_path: str,
    embed: Callable[[list[str]], np.ndarray],
) -> dict[str, str]:
    """Each selected query's domain: from the dataset's mapping file when given, else the most similar
    taxonomy domain (each assignment is logged with its similarity, for review)."""
    has_taxonomy = require_domain_source(dataset, mapping_path, taxonomy_path)
    taxonomy = read_taxonomy(taxonomy_path) if has_taxonomy else None
    if mapping_path:
        return read_domain_mapping(mapping_path, topics, [d.name for d in taxonomy] if taxonomy else None)
    qids = list(topics)
    assigned = assign_domains(
        qids, embed([topics[q] for q in qids]), taxonomy, embed([d.text for d in taxonomy])
    )
    for qid, (name, similarity) in assigned.items():
        log.info("query %s -> %s (similarity %.3f): %s", qid, name, similarity, topics[qid])
    return {qid: name for qid, (name, _) in assigned.items()}


def domain_texts(names: Iterable[str], taxonomy: Sequence[Domain] | None) -> dict[str, str]:
    """What is embedded for each domain: name and description from the taxonomy, else the name alone."""
    described = {d.name: d.text for d in taxonomy or ()}
    return {name: described.get(name, name) for name in sorted(set(names))}


def format_domains(mapping: Mapping[str, str]) -> str:
    """`qid<TAB>domain` lines."""
    return "".join(f"{qid}\t{name}\n" for qid, name in mapping.items())


# ---- pools --------------------------------------------------------------------------------------------


def read_persona_records(path: str | Path) -> Iterator[dict[str, Any]]:
    """Records of a local pool file, one at a time: JSONL (`.jsonl`/`.json`) or Parquet (`.parquet`, read
    in row batches), so a million-row pool is never all in memory."""
    path = Path(path)
    if path.suffix != ".parquet":
        return (record for _, record in iter_jsonl(path))
    if not path.is_file():
        raise StressprobeError(f"{path}: persona pool file not found; fix the source's 'path'")
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise StressprobeError(
            f"{path}: reading Parquet needs 'pyarrow'; install the 'download' extra or convert to JSONL"
        ) from None
    return (row for batch in pq.ParquetFile(path).iter_batches(batch_size=10000) for row in batch.to_pylist())


def load_hf_records(
    name: str,
    config_name: str | None,
    split: str,
    limit: int | None,
    load: Callable[..., Any] | None = None,
    revision: str | None = None,
) -> Iterator[dict[str, Any]]:
    """Records of a Hugging Face dataset (optional extra `download`), always streamed, at `revision` (a
    dataset commit) when given."""
    if load is None:
        try:
            from datasets import load_dataset
        except ImportError:
            raise StressprobeError(
                f"persona dataset '{name}': the 'datasets' package is not installed; install the 'download' "
                "extra (pip install 'stressprobe[download]') or give a local 'path'"
            ) from None
        load = load_dataset
    rows = load(name, config_name, split=split, streaming=True, revision=revision)
    return (dict(row) for row in islice(rows, limit))


def check_file_sha256(path: str | Path, sha256: str | None, key: str) -> None:
    """A local pool file must have its pinned sha256 (`key`; null = unchecked)."""
    if sha256 is None:
        return
    if not Path(path).is_file():
        raise StressprobeError(f"{path}: persona pool file not found; fix the source's 'path'")
    actual = file_sha256(Path(path))
    if actual != sha256:
        raise StressprobeError(
            f"{path}: sha256 {actual}, not the pinned {sha256} (config key '{key}'); use the pinned file or "
            "change the pin"
        )


def check_pinned(source: Mapping[str, Any], key: str, unpinned: str) -> None:
    """An unpinned pool (`unpinned_problem`) is refused under `personas.unpinned: refuse`, else warned of."""
    if unpinned not in UNPINNED:
        raise StressprobeError(
            f"config key 'personas.unpinned': {unpinned!r}; use one of {', '.join(UNPINNED)}"
        )
    problem = unpinned_problem(source, key)
    if problem and unpinned == "refuse":
        raise StressprobeError(problem)
    if problem:
        log.warning("UNPINNED POOL (personas.unpinned: warn): %s", problem)


def load_pool_records(
    source: Mapping[str, Any], key: str, unpinned: str = "warn"
) -> Iterator[dict[str, Any]]:
    """The records of a configured pool, streamed: the local `path` when set, else the Hugging Face dataset
    (at its `revision`; without one refused or warned of, per `unpinned`)."""
    if source["path"]:
        check_file_sha256(source["path"], source.get("sha256"), f"{key}.sha256")
        return islice(read_persona_records(source["path"]), source["limit"])
    if not source.get("hf_dataset"):
        raise StressprobeError(f"config key '{key}': give a local 'path' or an 'hf_dataset'")
    check_pinned(source, key, unpinned)
    return load_hf_records(
        source["hf_dataset"],
        source.get("hf_config"),
        source["hf_split"],
        source["limit"],
        revision=source.get("revision"),
    )


def pool_size(source: Mapping[str, Any]) -> int | None:
    """About how many records a configured pool has (for the pool job's projected time), or None when that
    cannot be read: a local file's rows (JSONL lines, Parquet metadata), else the Hugging Face dataset's
    split size from its builder info; never more than `limit`."""
    limit = source.get("limit")
    if source.get("path") and Path(source["path"]).suffix == ".parquet":
        import pyarrow.parquet as pq

        rows = pq.ParquetFile(source["path"]).metadata.num_rows
    elif source.get("path"):
        with open(source["path"], "rb") as handle:
            rows = sum(1 for line in handle if line.strip())
    elif limit:
        return limit
    else:
        rows = hf_split_size(source)
    return rows if rows is None or limit is None else min(rows, limit)


def hf_split_size(source: Mapping[str, Any]) -> int | None:
    """The split's size from the dataset's builder info at its revision; None when the info lacks it or
    cannot be read (the size only feeds the projection: the records are streamed either way)."""
    from datasets import load_dataset_builder

    try:
        info = load_dataset_builder(
            source["hf_dataset"], source.get("hf_config"), revision=source.get("revision")
        ).info
    except Exception as exc:  # noqa: BLE001 - any failure only loses the projection, and is logged
        log.warning("%s: its size could not be read (%s): no projected time", source["hf_dataset"], exc)
        return None
    split = (info.splits or {}).get(source["hf_split"])
    return split.num_examples if split is not None and split.num_examples else None


def parse_skills(value: Any) -> list[str]:
    """Skills from a list or a list-string like "['a', 'b']" (as the USPersona release stores them)."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return []
    if isinstance(value, np.ndarray):  # Parquet list columns arrive as arrays
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [str(s).strip() for s in value if str(s).strip()]
    return []


def uspersona_text(record: Mapping[str, Any], period: bool = False) -> str | None:
    """ "A persona with the following skills: ..." from the skills fields only, or None when they are empty.

    The list field is preferred, its skills joined by ", " and ended with "." when `period` (as the
    paper's Table 2 prints them); the free-text field is the fallback.
    """
    skills = parse_skills(record.get(SKILLS_LIST_FIELD))
    if skills:
        return USPERSONA_PREFIX + ", ".join(skills) + ("." if period else "")
    text = record.get(SKILLS_TEXT_FIELD)
    if isinstance(text, str) and text.strip():
        return USPERSONA_PREFIX + " ".join(text.split())
    return None


def personahub_text(record: Mapping[str, Any], period: bool = False) -> str | None:
    """PersonaHub's free-text `persona`, or None when it is missing or empty (`period` does not apply: the
    texts are the dataset's sentences)."""
    text = record.get("persona")
    return " ".join(text.split()) if isinstance(text, str) and text.strip() else None


PERSONA_TEXT: dict[str, Callable[[Mapping[str, Any], bool], str | None]] = {
    "personahub": personahub_text,
    "uspersona": uspersona_text,
}
USABLE_FIELDS = {"personahub": "persona", "uspersona": f"{SKILLS_LIST_FIELD} or {SKILLS_TEXT_FIELD}"}


def iter_pool(
    records: Iterable[Mapping[str, Any]], kind: str, origin: str, period: bool = False
) -> Iterator[dict[str, str]]:
    """The pool entries `{"pid", "text"}` of a source, one at a time; pid = the record's `uuid`/`id`, else
    its position.

    Records without a usable text and repeated texts are skipped with a logged count (texts are remembered
    by a 16-byte digest, so a million-row pool's texts are not all held); a pool where no record has a
    usable field is an error (likely the wrong file or `kind`), as are repeated ids.
    """
    to_text = PERSONA_TEXT[kind]
    seen: set[bytes] = set()
    pids: set[str] = set()
    unusable = duplicates = 0
    for i, record in enumerate(records):
        text = to_text(record, period)
        if text is None:
            unusable += 1
            continue
        digest = hashlib.blake2b(text.encode(), digest_size=16).digest()
        if digest in seen:
            duplicates += 1
            continue
        seen.add(digest)
        pid = str(record.get("uuid") or record.get("id") or i)
        if pid in pids:
            raise StressprobeError(f"{origin}: persona id '{pid}' (uuid/id) repeats; fix the pool")
        pids.add(pid)
        yield {"pid": pid, "text": text}
    if not seen:
        raise StressprobeError(
            f"{origin}: no record has a usable '{USABLE_FIELDS[kind]}' field; "
            "check the file and the source's 'kind'"
        )
    if unusable:
        log.warning("%s: %d records without a usable %s field skipped", origin, unusable, USABLE_FIELDS[kind])
    if duplicates:
        log.info("%s: %d repeated persona texts skipped", origin, duplicates)


def pool_fingerprint(source: Mapping[str, Any], embedding: Mapping[str, Any]) -> dict[str, Any]:
    """What a pool's chunks depend on: the source (with its revision), the model and the chunk size."""
    keys = ("kind", "path", "hf_dataset", "hf_config", "hf_split", "limit", "revision", "sha256", "period")
    return {
        **{key: source.get(key) for key in keys},
        "model": embedding["model"],
        "pool_chunk": embedding["pool_chunk"],
    }


def build_pool(records: Iterable[Mapping[str, Any]], kind: str, origin: str) -> list[dict[str, str]]:
    """The whole pool as a list (small pools and tests; the pool job streams `iter_pool`)."""
    return list(iter_pool(records, kind, origin))


# ---- retrieval ------------------------------------------------------------------------------------------


def orthogonal_key(orthogonal: str) -> Callable[[np.ndarray], np.ndarray]:
    """What the orthogonal role ranks by (largest first): the negated cosine (least similar) or the negated
    distance from 0."""
    if orthogonal not in ORTHOGONAL_READINGS:
        raise StressprobeError(
            f"config key 'personas.orthogonal': {orthogonal!r}; use one of {', '.join(ORTHOGONAL_READINGS)}"
        )
    return np.negative if orthogonal == "least_similar" else (lambda s: -np.abs(s))


def retrieve(
    qids: Sequence[str],
    query_vectors: np.ndarray,
    query_domains: Mapping[str, str],
    domain_vectors: Mapping[str, np.ndarray],
    pool_vectors: np.ndarray,
    k: int = 3,
    orthogonal: str = "least_similar",
    block_rows: int = BLOCK_ROWS,
) -> dict[tuple[int, str], list[tuple[int, float]]]:
    """Per (query position, role): the exact top-`k` pool positions and cosines (`pool_build.rank_candidates`;
    `pool_vectors` may be a memory map). `query` = most similar to the query, `domain` = most similar to the
    query's domain, `orthogonal` = least similar to the query (`"least_similar"`, the project's reading of
    the paper) or the cosine nearest 0 (`"nearest_zero"`). Vectors must be normalised (dot = cosine)."""
    key = orthogonal_key(orthogonal)
    domains = np.stack([domain_vectors[query_domains[q]] for q in qids]) if qids else query_vectors
    return rank_candidates(
        query_vectors,
        {"query": query_vectors, "domain": domains, "orthogonal": query_vectors},
        pool_vectors,
        k,
        {"query": lambda s: s, "domain": lambda s: s, "orthogonal": key},
        block_rows,
    )


def role_records(
    qids: Sequence[str],
    ranked: Mapping[tuple[int, str], Sequence[tuple[int, float]]],
    pool: Mapping[int, Mapping[str, str]] | Sequence[Mapping[str, str]],
) -> list[dict[str, Any]]:
    """One record per query and role: the best candidate plus the top-`k` with their similarities."""
    records = []
    for i, qid in enumerate(qids):
        for role in ROLES:
            candidates = [
                {"pid": pool[j]["pid"], "text": pool[j]["text"], "similarity": round(similarity, 6)}
                for j, similarity in ranked[(i, role)]
            ]
            best = candidates[0]
            records.append(
                {
                    "qid": qid,
                    "role": role,
                    "persona": best["text"],
                    "pid": best["pid"],
                    "similarity": best["similarity"],
                    "candidates": candidates,
                }
            )
    return records


def select_personas(
    qids: Sequence[str],
    query_vectors: np.ndarray,
    query_domains: Mapping[str, str],
    domain_vectors: Mapping[str, np.ndarray],
    pool: Sequence[Mapping[str, str]],
    pool_vectors: np.ndarray,
    k: int = 3,
    orthogonal: str = "least_similar",
) -> list[dict[str, Any]]:
    """`retrieve` and `role_records` for a pool held as a list."""
    ranked = retrieve(qids, query_vectors, query_domains, domain_vectors, pool_vectors, k, orthogonal)
    return role_records(qids, ranked, pool)
