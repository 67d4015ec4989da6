"""Judging datasets: read topics, qrels, passages and runs, and write the prepared files.

A dataset comes from local files (topics `qid<TAB>text`, TREC qrels, passages as `docid<TAB>text` or JSONL,
a directory of TREC runs) or from an `ir_datasets` id plus a local runs directory. Bad input is an error
naming file and line; the few tolerable irregularities are logged and counted (see each function).
Selecting the queries and pairs to judge: `stressprobe.persona.selection`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
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
TREC_PREFIX = "input."
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


def is_run_file(path: Path) -> bool:
    """A `<name>.run` file, or a run as TREC's archives name it: `input.<tag>` or `input.<tag>.gz`."""
    return path.name.endswith(RUN_SUFFIX) or (
        path.name.startswith(TREC_PREFIX) and len(path.name) > len(TREC_PREFIX)
    )


def run_name(path: str | Path) -> str:
    """A run's name: its file name without `.run` (tags inside files are often reused or truncated); TREC's
    `input.<tag>.gz` is `<tag>`."""
    name = Path(path).name
    name = name.removeprefix(TREC_PREFIX).removesuffix(".gz") if name.startswith(TREC_PREFIX) else name
    name = name.removesuffix(RUN_SUFFIX)
    if not name or any(c.isspace() for c in name):
        raise StressprobeError(
            f"{path}: run file names must be non-empty and without spaces; rename the file"
        )
    return name


def read_runs_dir(directory: str | Path) -> dict[str, Run]:
    """Read every run file of a directory: `*.run`, or TREC's archived `input.<tag>.gz` as downloaded from
    trec.nist.gov (other files, like a SOURCES.tsv, are ignored).

    A missing directory or one without run files is an error: the study ranks systems, so a dataset
    without runs is a configuration mistake rather than something to continue quietly without.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise StressprobeError(f"{directory}: runs directory not found; check the dataset's 'runs' key")
    paths = sorted(p for p in directory.iterdir() if p.is_file() and is_run_file(p))
    if not paths:
        raise StressprobeError(
            f"{directory}: no '*{RUN_SUFFIX}' or 'input.<tag>.gz' files in the runs directory; add TREC run "
            "files or fix 'runs'"
        )
    names: dict[str, Path] = {}
    for path in paths:
        name = run_name(path)
        if name in names:
            raise StressprobeError(
                f"{path}: names the same run '{name}' as {names[name].name}; keep one of the two files"
            )
        names[name] = path
    return {name: read_run(path) for name, path in names.items()}


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


def ranked(scores: Mapping[str, float]) -> list[str]:
    """Docids in trec_eval order: score descending, ties by docid descending (the rank column is ignored)."""
    return [d for d, _ in sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)]


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
