"""Judging datasets: read topics, qrels, passages and runs; select queries and the pairs to judge.

A dataset comes from local files (topics `qid<TAB>text`, TREC qrels, passages as `docid<TAB>text` or JSONL,
a directory of TREC runs) or from an `ir_datasets` id plus a local runs directory. Bad input is an error
naming file and line; the few tolerable irregularities are logged and counted (see each function).
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stressprobe.errors import StressprobeError
from stressprobe.io import iter_jsonl, read_text_lines, read_tsv_lines

log = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]  # qid -> docid -> grade
Run = dict[str, dict[str, float]]  # qid -> docid -> score
PassageLookup = Callable[[set[str]], dict[str, str]]  # wanted docids -> {docid: text} (those found)

GRADES = (0, 1, 2, 3)  # the relevance scale of qrels, judge labels and κ tables
RUN_SUFFIX = ".run"
PASSAGE_ID_KEYS = ("docid", "doc_id", "id", "_id", "docno")
PASSAGE_TEXT_KEYS = ("text", "contents", "segment", "body")


# ---- readers -------------------------------------------------------------------------------------


def read_topics(path: str | Path) -> dict[str, str]:
    """Read `qid<TAB>text` lines; a line without a tab, an empty text or a repeated qid is an error."""
    topics: dict[str, str] = {}
    for lineno, line in read_text_lines(path):
        if not line.strip():
            continue
        qid, sep, text = line.partition("\t")
        qid, text = qid.strip(), text.strip()
        if not sep or not qid or not text:
            raise StressprobeError(f"{path}:{lineno}: expected 'qid<TAB>query text'; fix the line")
        if qid in topics:
            raise StressprobeError(f"{path}:{lineno}: query '{qid}' appears twice; keep one line per query")
        topics[qid] = text
    if not topics:
        raise StressprobeError(f"{path}: no queries; expected 'qid<TAB>query text' lines")
    return topics


def parse_grade(value: str, where: str) -> int:
    """A relevance grade 0-3; anything else (e.g. -1, 4, 'x') is an error at `where`."""
    try:
        grade = int(value)
    except ValueError:
        grade = None
    if grade not in GRADES:
        raise StressprobeError(
            f"{where}: relevance grade '{value}' is not one of 0, 1, 2, 3; map the collection's grades to 0-3"
        )
    return grade


def read_qrels(path: str | Path, allow_empty: bool = False) -> Qrels:
    """Read TREC qrels `qid iter docid grade`.

    Wrong field count, a grade outside 0-3 and a repeated (qid, docid) are errors naming the line
    (trec_eval itself refuses duplicate judgments of a document). An empty file is an error unless
    `allow_empty` (an LLM judge may fail to grade anything).
    """
    qrels: Qrels = {}
    for lineno, line in read_text_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 4:
            raise StressprobeError(
                f"{path}:{lineno}: expected 4 fields 'qid iter docid grade', found {len(fields)}; "
                "fix the line"
            )
        qid, _, docid, grade = fields
        judged = qrels.setdefault(qid, {})
        if docid in judged:
            raise StressprobeError(
                f"{path}:{lineno}: document '{docid}' is judged twice for query '{qid}'; keep one judgment"
            )
        judged[docid] = parse_grade(grade, f"{path}:{lineno}")
    if not qrels and not allow_empty:
        raise StressprobeError(f"{path}: no judgments; expected 'qid iter docid grade' lines")
    return qrels


def read_run(path: str | Path) -> Run:
    """Read a TREC run `qid Q0 docid rank score tag`; only qid, docid and score matter (as in trec_eval).

    A malformed line, a non-numeric score, and a document listed twice for the same query are errors
    naming the line: trec_eval refuses such a run ("duplicate docs"), and keeping either copy would
    silently change the run's score.
    """
    run: Run = {}
    first_seen: dict[tuple[str, str], int] = {}
    for lineno, line in read_text_lines(path):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 6:
            raise StressprobeError(
                f"{path}:{lineno}: expected 6 fields 'qid Q0 docid rank score tag', found {len(fields)}; "
                "fix the line"
            )
        qid, _, docid, _, score, _ = fields
        try:
            value = float(score)
        except ValueError:
            raise StressprobeError(
                f"{path}:{lineno}: score '{score}' is not a number; fix the line"
            ) from None
        if (qid, docid) in first_seen:
            raise StressprobeError(
                f"{path}:{lineno}: document '{docid}' is listed twice for query '{qid}' "
                f"(first at line {first_seen[qid, docid]}); trec_eval rejects such runs, remove the duplicate"
            )
        first_seen[qid, docid] = lineno
        run.setdefault(qid, {})[docid] = value
    if not run:
        raise StressprobeError(f"{path}: no result lines; expected 'qid Q0 docid rank score tag' lines")
    return run


def run_name(path: str | Path) -> str:
    """A run's name: its file name without `.run` (tags inside files are often reused or truncated)."""
    name = Path(path).name.removesuffix(RUN_SUFFIX)
    if not name or any(c.isspace() for c in name):
        raise StressprobeError(
            f"{path}: run file names must be non-empty and without spaces; rename the file"
        )
    return name


def read_runs_dir(directory: str | Path) -> dict[str, Run]:
    """Read every `*.run` file of a directory (other files, like a SOURCES.tsv, are ignored).

    A missing directory or one without run files is an error: the study ranks systems, so a dataset
    without runs is a configuration mistake rather than something to continue quietly without.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise StressprobeError(f"{directory}: runs directory not found; check the dataset's 'runs' key")
    paths = sorted(p for p in directory.iterdir() if p.is_file() and p.name.endswith(RUN_SUFFIX))
    if not paths:
        raise StressprobeError(
            f"{directory}: no '*{RUN_SUFFIX}' files in the runs directory; add TREC run files or fix 'runs'"
        )
    return {run_name(p): read_run(p) for p in paths}


def passage_from_json(record: Mapping[str, Any], where: str, title: bool = True) -> tuple[str, str]:
    """(docid, text) of a JSON passage; its `title`, when present, is prepended if `title` (the dataset's
    `title` switch; the papers do not say, UMBRELA's code reads the segment alone)."""
    docid = next((record[k] for k in PASSAGE_ID_KEYS if record.get(k) not in (None, "")), None)
    text = next((record[k] for k in PASSAGE_TEXT_KEYS if isinstance(record.get(k), str)), None)
    if docid is None or text is None:
        raise StressprobeError(
            f"{where}: a passage needs an id ({'/'.join(PASSAGE_ID_KEYS)}) and a text "
            f"({'/'.join(PASSAGE_TEXT_KEYS)}); fix the record"
        )
    heading = record.get("title")
    if title and isinstance(heading, str) and heading.strip():
        text = f"{heading.strip()}\n{text}"
    return str(docid), text


def read_passages(path: str | Path, wanted: set[str], title: bool = True) -> dict[str, str]:
    """The texts of the `wanted` docids found in a passages file (`.jsonl`/`.json` = JSONL, else TSV).

    Only wanted passages are kept, so a full collection can be given without loading it into memory.
    """
    found: dict[str, str] = {}
    if Path(path).suffix in (".jsonl", ".json"):
        for lineno, record in iter_jsonl(path):
            docid, text = passage_from_json(record, f"{path}:{lineno}", title)
            if docid in wanted:
                found[docid] = text.strip()
        return found
    for lineno, line in read_text_lines(path):
        if not line.strip():
            continue
        docid, sep, text = line.partition("\t")
        if not sep:
            raise StressprobeError(f"{path}:{lineno}: expected 'docid<TAB>text'; fix the line")
        if docid in wanted:
            found[docid] = text.strip()
    return found


def read_run_metadata(path: str | Path) -> dict[str, str]:
    """Read `run<TAB>type` lines (an optional header line `run<TAB>type` is skipped)."""
    metadata: dict[str, str] = {}
    for lineno, fields in read_tsv_lines(path):
        if len(fields) != 2:
            raise StressprobeError(f"{path}:{lineno}: expected 'run<TAB>type'; fix the line")
        run, kind = (f.strip() for f in fields)
        if lineno == 1 and (run, kind) == ("run", "type"):
            continue
        metadata[run] = kind
    return metadata


def read_run_names(path: str | Path) -> list[str]:
    """The run names listed one per line in a `runs.txt`."""
    return [line.strip() for _, line in read_text_lines(path) if line.strip()]


def read_listed_runs(runs_txt: str | Path) -> dict[str, Run]:
    """The prepared runs of a dataset: each name of `runs.txt` read from `runs/<name>.run` beside it."""
    runs_dir = Path(runs_txt).parent / "runs"
    return {name: read_run(runs_dir / f"{name}{RUN_SUFFIX}") for name in read_run_names(runs_txt)}


# ---- sources --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """A dataset as configured, before selection: topics, human qrels and a passage lookup."""

    name: str  # where it came from, for messages
    topics: dict[str, str]
    qrels: Qrels
    passages: PassageLookup
    qrels_origin: str = ""  # file or id named in errors about the qrels


def load_local_source(topics: str, qrels: str, passages: str, title: bool = True) -> Source:
    """A dataset from local files (`title`: prepend a JSON passage's title)."""
    return Source(
        name=str(topics),
        topics=read_topics(topics),
        qrels=read_qrels(qrels),
        passages=lambda wanted: read_passages(passages, wanted, title),
        qrels_origin=str(qrels),
    )


def item_text(item: Any) -> str:
    """The text of an ir_datasets query or document (`text` field, else `default_text()`)."""
    text = getattr(item, "text", None)
    return text if isinstance(text, str) else item.default_text()


def load_ir_datasets_source(dataset_id: str, load: Callable[[str], Any] | None = None) -> Source:
    """A dataset through `ir_datasets` (extra `download`); `load` stands in for `ir_datasets.load` in tests.

    Uses the documented API: `queries_iter()` (query_id, text), `qrels_iter()` (query_id, doc_id,
    relevance) and `docs_store().get_many(doc_ids)`.
    """
    if load is None:
        try:
            import ir_datasets
        except ImportError:
            raise StressprobeError(
                f"dataset '{dataset_id}': the 'ir_datasets' package is not installed; "
                "install the 'download' extra (pip install 'stressprobe[download]') or use local files"
            ) from None
        load = ir_datasets.load
    try:
        dataset = load(dataset_id)
    except KeyError:
        raise StressprobeError(f"ir_datasets id '{dataset_id}' is unknown; check 'ir_datasets_id'") from None
    origin = f"ir_datasets:{dataset_id}"
    topics = {str(q.query_id): item_text(q).strip() for q in dataset.queries_iter()}
    qrels: Qrels = {}
    for i, qrel in enumerate(dataset.qrels_iter(), start=1):
        where = f"{origin} qrels entry {i}"
        judged = qrels.setdefault(str(qrel.query_id), {})
        if str(qrel.doc_id) in judged:
            raise StressprobeError(
                f"{where}: document '{qrel.doc_id}' judged twice for query '{qrel.query_id}'"
            )
        judged[str(qrel.doc_id)] = parse_grade(str(qrel.relevance), where)

    def passages(wanted: set[str]) -> dict[str, str]:
        docs = dataset.docs_store().get_many(sorted(wanted))
        return {str(docid): item_text(doc).strip() for docid, doc in docs.items()}

    return Source(name=origin, topics=topics, qrels=qrels, passages=passages, qrels_origin=origin)


def load_source(entry: Mapping[str, Any], key: str, title: bool = True) -> Source:
    """The source of a dataset config entry (`key` names it in errors)."""
    if entry["source"] == "ir_datasets":
        if not entry.get("ir_datasets_id"):
            raise StressprobeError(f"config key '{key}.ir_datasets_id': required when source is ir_datasets")
        return load_ir_datasets_source(entry["ir_datasets_id"])
    missing = [k for k in ("topics", "qrels", "passages") if not entry.get(k)]
    if missing:
        raise StressprobeError(
            f"config key '{key}.{missing[0]}': required when source is local; give a file path"
        )
    return load_local_source(entry["topics"], entry["qrels"], entry["passages"], title)


# ---- selection ------------------------------------------------------------------------------------


def check_qrels_in_topics(source: Source) -> None:
    """Every judged query must have a text: judging needs it, so a missing one is an error."""
    missing = sorted(set(source.qrels) - set(source.topics))
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise StressprobeError(
            f"{source.qrels_origin}: query '{missing[0]}'{more} is judged but not in the topics of "
            f"{source.name}; add it to the topics or remove its judgments"
        )


def select_queries(
    judged: Iterable[str], queries: None | int | list[str | int], seed: int, key: str
) -> list[str]:
    """The query subset: all judged queries (None), the listed qids, or a seeded sample of a count.

    Listed qids may be numbers (YAML reads `[1030303]` as an int); they are compared as text.
    """
    judged_set = set(judged)  # built once for the membership checks below
    judged = sorted(judged_set)
    if queries is None:
        return judged
    if isinstance(queries, int):
        if queries > len(judged):
            raise StressprobeError(
                f"config key '{key}': asks for {queries} queries but only {len(judged)} are judged; lower it"
            )
        return sorted(random.Random(seed).sample(judged, queries))
    queries = [str(q) for q in queries]
    unknown = [q for q in queries if q not in judged_set]
    if unknown:
        raise StressprobeError(
            f"config key '{key}': query '{unknown[0]}' is not a judged query of the dataset; fix the list"
        )
    return sorted(set(queries))


def subsample_by_grade(grades: Mapping[str, int], limit: int | None, rng: random.Random) -> list[str]:
    """Up to `limit` judged docids, taken round-robin over grades (highest first) from seeded shuffles.

    Round-robin keeps every grade present: a plain random sample would be mostly grade 0 on TREC pools.
    """
    if limit is None or len(grades) <= limit:
        return sorted(grades)
    by_grade = {
        g: sorted(d for d, x in grades.items() if x == g) for g in sorted(set(grades.values()), reverse=True)
    }
    for docids in by_grade.values():
        rng.shuffle(docids)
    chosen: list[str] = []
    while len(chosen) < limit:
        for docids in by_grade.values():
            if docids and len(chosen) < limit:
                chosen.append(docids.pop())
    return sorted(chosen)


def ranked(scores: Mapping[str, float]) -> list[str]:
    """Docids in trec_eval order: score descending, ties by docid descending (the rank column is ignored)."""
    return [d for d, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


def unjudged_top_k(
    runs: Mapping[str, Run], qrels: Qrels, qids: Iterable[str], k: int
) -> set[tuple[str, str]]:
    """(qid, docid) pairs in some run's top `k` for a selected query that the human qrels do not judge."""
    pairs = set()
    for qid in qids:
        for run in runs.values():
            pairs.update((qid, d) for d in ranked(run.get(qid, {}))[:k] if d not in qrels.get(qid, {}))
    return pairs


def restrict_runs(
    runs: Mapping[str, Run], topics: Mapping[str, str], qids: Iterable[str]
) -> tuple[dict[str, Run], int]:
    """Runs limited to the selected queries, and how many run queries were not in the topics at all.

    Those are dropped with a logged warning and counted rather than refused: runs often cover more
    topics than the topics file holds; worth a look, not worth stopping for.
    """
    qids = set(qids)
    restricted, outside = {}, 0
    for name, run in runs.items():
        unknown = sorted(set(run) - set(topics))
        if unknown:
            log.warning(
                "run %s: %d queries not in the topics, ignored (e.g. %s)", name, len(unknown), unknown[0]
            )
        outside += len(unknown)
        restricted[name] = {qid: run[qid] for qid in sorted(set(run) & qids)}
    return restricted, outside


@dataclass
class PreparedDataset:
    """What the judging study reads: selected topics, the judged pairs, their human grades, and the runs."""

    topics: dict[str, str]
    qrels: Qrels  # human grades of the judged pairs only, so human and LLM qrels cover the same pool
    pairs: list[dict[str, str]]  # {"qid","docid","passage"}, sorted by qid then docid
    runs: dict[str, Run]
    run_metadata: dict[str, str] = field(default_factory=dict)
    warnings: dict[str, int] = field(default_factory=dict)  # counted, logged irregularities


def prepare_dataset(
    source: Source,
    runs: Mapping[str, Run],
    *,
    queries: None | int | list[str | int] = None,
    max_passages_per_query: int | None = None,
    unjudged_top_k_depth: int = 0,
    seed: int = 0,
    key: str = "dataset",
    run_metadata: Mapping[str, str] | None = None,
) -> PreparedDataset:
    """Select queries and pairs, fetch the passages and restrict the runs.

    Judged pairs: the human qrels of the selected queries (subsampled per query when
    `max_passages_per_query` is set); plus, when `unjudged_top_k_depth` > 0, unjudged documents of the
    runs' top-k. A judged pair without a passage text is an error; an unjudged one is skipped and counted.
    """
    check_qrels_in_topics(source)
    qids = select_queries(source.qrels, queries, seed, f"{key}.queries")
    rng = random.Random(seed)
    judged = {qid: subsample_by_grade(source.qrels[qid], max_passages_per_query, rng) for qid in qids}
    qrels = {qid: {d: source.qrels[qid][d] for d in docids} for qid, docids in judged.items()}
    extra = unjudged_top_k(runs, source.qrels, qids, unjudged_top_k_depth)
    wanted = {d for docids in judged.values() for d in docids} | {d for _, d in extra}
    texts = source.passages(wanted)
    missing = sorted({(q, d) for q, docids in judged.items() for d in docids if d not in texts})
    if missing:
        raise StressprobeError(
            f"{source.name}: no passage text for judged document '{missing[0][1]}' (query '{missing[0][0]}'; "
            f"{len(missing)} judged documents lack one); add them to the passages"
        )
    skipped = sorted(p for p in extra if p[1] not in texts)
    if skipped:
        log.warning("%d unjudged top-k documents have no passage text and are not judged", len(skipped))
    pairs = {(q, d) for q, docids in judged.items() for d in docids} | (extra - set(skipped))
    metadata = dict(run_metadata or {})
    unknown_runs = sorted(set(metadata) - set(runs))
    if unknown_runs:
        log.warning(
            "run metadata names %d runs not in the runs directory (e.g. %s)",
            len(unknown_runs),
            unknown_runs[0],
        )
    restricted, outside = restrict_runs(runs, source.topics, qids)
    return PreparedDataset(
        topics={qid: source.topics[qid] for qid in qids},
        qrels=qrels,
        pairs=[{"qid": q, "docid": d, "passage": texts[d]} for q, d in sorted(pairs)],
        runs=restricted,
        run_metadata={r: metadata[r] for r in sorted(metadata) if r in runs},
        warnings={
            "run_queries_not_in_topics": outside,
            "unjudged_without_passage": len(skipped),
            "unknown_runs_in_metadata": len(unknown_runs),
        },
    )


# ---- writers --------------------------------------------------------------------------------------


def format_topics(topics: Mapping[str, str]) -> str:
    """`qid<TAB>text` lines (tabs and newlines inside a text become spaces)."""
    return "".join(f"{qid}\t{' '.join(text.split())}\n" for qid, text in topics.items())


def format_qrels(qrels: Qrels) -> str:
    """TREC qrels `qid 0 docid grade`, sorted by qid then docid."""
    return "".join(f"{qid} 0 {d} {qrels[qid][d]}\n" for qid in sorted(qrels) for d in sorted(qrels[qid]))


def format_run(name: str, run: Run) -> str:
    """A normalised TREC run: per query in trec_eval order with ranks 1..n, tag = run name."""
    return "".join(
        f"{qid} Q0 {d} {rank} {run[qid][d]!r} {name}\n"
        for qid in sorted(run)
        for rank, d in enumerate(ranked(run[qid]), start=1)
    )


def format_run_metadata(metadata: Mapping[str, str]) -> str:
    """`run<TAB>type` with a header line."""
    return "run\ttype\n" + "".join(f"{run}\t{kind}\n" for run, kind in metadata.items())
