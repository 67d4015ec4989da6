"""The persona study's aggregation: read the judging stage's files into the tidy frames every table reads.

Frames are tidy (one row per observation) with the columns `dataset, model, condition` as pandas
categoricals in config order, so every table lists datasets, models and conditions as the config does.
The tables are built in `judgment_tables` and `system_tables`, the figures in `figures`; the statistics
live in `metrics`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_write, read_jsonl
from stressprobe.persona import metrics
from stressprobe.persona.data import Qrels, read_qrels, read_run_metadata, read_topics
from stressprobe.persona.evaluation import MEASURE, read_ndcg_table
from stressprobe.persona.judging import CONDITIONS, HUMAN
from stressprobe.persona.prompts import RULES
from stressprobe.scoring import UNANSWERED, is_unanswered

BASELINE = CONDITIONS[0]
SHIFTS = tuple(range(-3, 4))
CELL = ["dataset", "model", "condition"]
#: The paper's column order of Tables 3 and 4 (by source, then role; the fixed roles; UMBRELA last) and its
#: row order of Table 5 (by role, PersonaHub before USPersona). Only the paper-layout tables use them.
PAPER_COLUMN_ORDER = (*CONDITIONS[3:], *CONDITIONS[1:3], BASELINE)
PAPER_TABLE5_ORDER = (
    *(c for role in ("query", "domain", "orthogonal") for c in CONDITIONS[3:] if c.endswith("/" + role)),
    *CONDITIONS[1:3],
)


def in_paper_order(conditions, paper_order: Sequence[str] = PAPER_COLUMN_ORDER) -> list[str]:
    """`conditions` in the paper's order; any the paper does not list keep their order, after them."""
    conditions = [str(c) for c in conditions]
    return [c for c in paper_order if c in conditions] + [c for c in conditions if c not in paper_order]


# ---- reading the judging stage's files ----


def read_judgments(path: str | Path, unparsed: str = "exclude") -> pd.DataFrame:
    """A judgments file (one JSON object per line) → `qid, docid, label, rule, unanswered` (label NaN =
    null: unparsed, or `unanswered` where the call failed).

    With `unparsed` "zero" (`judging.unparsed`) an unparsed answer reads as grade 0, as in the cell's qrels.

    The file is parsed in one call for speed (tens of thousands of lines per cell); when that fails,
    it is read again line by line so that the error names the offending line.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
        records = json.loads("[" + ",".join(line for line in text.splitlines() if line.strip()) + "]")
        if not all(isinstance(record, dict) for record in records):
            raise ValueError("not an object per line")
    except (OSError, ValueError):
        records = read_jsonl(path)  # raises a StressprobeError naming the file and line
    for number, record in enumerate(records, start=1):
        label = record.get("label", "missing")
        if "qid" not in record or "docid" not in record or not (label is None or type(label) is int):
            raise StressprobeError(
                f"{path}: record {number} lacks qid/docid or has label {label!r} (want 0-3 or null); "
                "regenerate the judgments"
            )
    frame = pd.DataFrame.from_records(records, columns=["qid", "docid", "label"])
    frame = frame.astype({"qid": str, "docid": str, "label": float})
    frame["rule"] = [record.get("label_rule") or "" for record in records]
    # A failed call (no answer) is a null label like an unparsed one, but never graded: it is counted apart.
    frame[UNANSWERED] = [is_unanswered(record) for record in records]
    if unparsed == "zero":
        graded = [record.get("status") == "unparsed" for record in records]
        frame.loc[graded, "label"] = 0.0
    bad = frame["label"].notna() & ~frame["label"].isin(metrics.GRADES)
    if bad.any():
        number = int(bad.to_numpy().argmax()) + 1
        raise StressprobeError(
            f"{path}: record {number} has label {frame['label'][number - 1]:g}, not a grade 0-3; "
            "regenerate the judgments"
        )
    return frame


def qrels_frame(qrels: Qrels) -> pd.DataFrame:
    """Qrels (qid → docid → grade) → `qid, docid, label`."""
    rows = [(qid, docid, float(grade)) for qid, docs in qrels.items() for docid, grade in docs.items()]
    return pd.DataFrame(rows, columns=["qid", "docid", "label"])


def read_labels(path: str | Path, unparsed: str = "exclude") -> pd.DataFrame:
    """Labels of one judging cell: a judgments `.jsonl`, or TREC qrels (external judges come as qrels)."""
    if str(path).endswith(".jsonl"):
        return read_judgments(path, unparsed)
    return qrels_frame(read_qrels(path, allow_empty=True))


def system_scores(path: str | Path, qids: Sequence[str]) -> pd.Series:
    """Mean nDCG@10 per run of an nDCG table, over the dataset's queries `qids` (its topics).

    Computed from the per-query rows with trec_eval semantics: a run without a row for a query scores
    0 for it; rows of other queries and the `all` rows are ignored (so the mean does not depend on
    which queries the table's writer averaged over).
    """
    if not qids:
        raise StressprobeError(f"{path}: the dataset has no queries; check its topics file")
    wanted, totals = set(qids), {}
    for row in read_ndcg_table(path):
        totals[row["run"]] = totals.get(row["run"], 0.0) + (row[MEASURE] if row["qid"] in wanted else 0.0)
    return pd.Series({run: total / len(wanted) for run, total in sorted(totals.items())}, name="ndcg")


def read_run_types(datasets: Sequence[str], paths: Sequence[str | Path]) -> dict[str, dict[str, str]]:
    """dataset → run → system type from each dataset's `run_metadata.tsv` (same order as `datasets`)."""
    return {dataset: read_run_metadata(path) for dataset, path in zip(datasets, paths, strict=True)}


# ---- tidy frames: ordering and intermediate files ----


def categorize(frame: pd.DataFrame, order: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """Make `dataset`, `model`, `condition` (where present) categoricals in config order.

    Values missing from `order` (e.g. `human`) are appended after the configured ones.
    """
    frame = frame.copy()
    for column, categories in order.items():
        if column in frame:
            extra = sorted(set(frame[column].astype(str)) - set(categories))
            frame[column] = pd.Categorical(frame[column].astype(str), categories=[*categories, *extra])
    return frame


def with_categories_of(frame: pd.DataFrame, source: pd.DataFrame) -> pd.DataFrame:
    """Give `frame`'s dataset/model/condition columns the categories (config order) of `source`'s."""
    columns = [c for c in CELL if c in frame and isinstance(source[c].dtype, pd.CategoricalDtype)]
    return frame.astype({c: source[c].dtype for c in columns})


def write_frame(frame: pd.DataFrame, path: str | Path) -> None:
    """An intermediate tidy frame as TSV (full float precision), written atomically."""
    atomic_write(path, frame.to_csv(sep="\t", index=False, lineterminator="\n"))


def read_frames(paths: Sequence[str | Path], order: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """Concatenate intermediate TSVs (one per dataset) and order them as the config does."""
    frames = [
        pd.read_csv(p, sep="\t", dtype={"qid": str, "run": str}, keep_default_na=False, na_values=[""])
        for p in paths
    ]
    return categorize(pd.concat(frames, ignore_index=True), order)


# ---- per dataset: judgment level ----


def dataset_kappa(
    dataset: str,
    cells: Mapping[tuple[str, str], pd.DataFrame],
    human: pd.DataFrame,
    weights: str = "fixed",
) -> pd.DataFrame:
    """Per-query κ of every (model, condition) against human labels and against its model's UMBRELA labels.

    Columns: dataset, model, condition, reference (`human` | `umbrela`), qid, pairs, unanswered, kappa.
    Every query of the human qrels has a row (0 pairs and κ NaN where a cell shares no labelled pair with
    the reference), so that statistics over all queries (W%, Δ̄) see every one; `unanswered` counts the
    cell's failed calls on the query (never among the pairs κ compares).
    """
    parts = []
    qids = pd.Index(sorted(set(human["qid"].astype(str))), name="qid")
    for (model, condition), labels in cells.items():
        references = {HUMAN: human}
        if condition != BASELINE and (model, BASELINE) in cells:
            references["umbrela"] = cells[(model, BASELINE)]
        failed = labels.loc[_unanswered(labels), "qid"].value_counts()
        for reference, reference_labels in references.items():
            part = metrics.kappa_per_query(labels, reference_labels, weights).set_index("qid")
            part = part.reindex(qids.union(part.index)).fillna({"pairs": 0}).astype({"pairs": int})
            part[UNANSWERED] = failed.reindex(part.index, fill_value=0).astype(int).to_numpy()
            part = part.reset_index()
            parts.append(part.assign(dataset=dataset, model=model, condition=condition, reference=reference))
    columns = ["dataset", "model", "condition", "reference", "qid", "pairs", UNANSWERED, "kappa"]
    return pd.concat(parts, ignore_index=True)[columns] if parts else pd.DataFrame(columns=columns)


READ_COLUMNS = [f"read_{rule}" for rule in RULES]
_SHIFT_COLUMNS = ["pairs", "unparsed", UNANSWERED, *READ_COLUMNS, *[f"shift_{s}" for s in SHIFTS]]


def _unanswered(labels: pd.DataFrame) -> pd.Series:
    """Which of a cell's labels are failed calls (qrels, the external and human judges' files, have none)."""
    if UNANSWERED in labels:
        return labels[UNANSWERED].astype(bool)
    return pd.Series(False, index=labels.index)


def dataset_label_shift(dataset: str, cells: Mapping[tuple[str, str], pd.DataFrame]) -> pd.DataFrame:
    """Per (model, condition): pairs, unparsed pairs, unanswered pairs (failed calls; compared with nothing),
    answers read by each rule of `judging.answer_reader`, and counts of each grade shift vs UMBRELA (none
    for UMBRELA's own row, which is there for its counts)."""
    rows = []
    for (model, condition), labels in cells.items():
        if (model, BASELINE) not in cells:
            continue
        rules = labels["rule"].value_counts() if "rule" in labels else pd.Series(dtype=int)
        counts = (
            metrics.label_shift_counts(labels, cells[(model, BASELINE)])
            if condition != BASELINE
            else dict.fromkeys(SHIFTS, 0)
        )
        unanswered = _unanswered(labels)
        rows.append(
            {
                "dataset": dataset,
                "model": model,
                "condition": condition,
                "pairs": len(labels),
                "unparsed": int((labels["label"].isna() & ~unanswered).sum()),
                UNANSWERED: int(unanswered.sum()),
                **{f"read_{rule}": int(rules.get(rule, 0)) for rule in RULES},
                **{f"shift_{s}": int(counts[s]) for s in SHIFTS},
            }
        )
    return pd.DataFrame(rows, columns=["dataset", "model", "condition", *_SHIFT_COLUMNS])


def dataset_system_scores(
    dataset: str, tables: Mapping[tuple[str, str], str | Path], qids: Sequence[str]
) -> pd.DataFrame:
    """nDCG@10 of every run under every (model, condition), dataset, model, condition, run, ndcg."""
    parts = []
    for (model, condition), path in tables.items():
        scores = system_scores(path, qids)
        parts.append(
            pd.DataFrame(
                {
                    "dataset": dataset,
                    "model": model,
                    "condition": condition,
                    "run": scores.index,
                    "ndcg": scores.to_numpy(),
                }
            )
        )
    return pd.concat(parts, ignore_index=True)


# ---- outputs: the per-dataset frames, and the decimals every table is printed with ----


def write_judgment_frames(
    dataset: str,
    label_paths: Sequence[str | Path],
    cells: Sequence[Sequence[str]],
    human_path: str | Path,
    kappa_path: str | Path,
    shift_path: str | Path,
    unparsed: str = "exclude",
    kappa_weights: str = "fixed",
) -> None:
    """Per dataset: per-query κ (vs human, vs UMBRELA) and label shift counts of every judged cell."""
    labels = {tuple(cell): read_labels(path, unparsed) for cell, path in zip(cells, label_paths, strict=True)}
    write_frame(dataset_kappa(dataset, labels, read_labels(human_path), kappa_weights), kappa_path)
    write_frame(dataset_label_shift(dataset, labels), shift_path)


def write_system_frame(
    dataset: str,
    ndcg_paths: Sequence[str | Path],
    cells: Sequence[Sequence[str]],
    topics_path: str | Path,
    out_path: str | Path,
) -> None:
    """Per dataset: nDCG@10 of every run under every cell (human included), over the topics' queries."""
    tables_ = {tuple(cell): path for cell, path in zip(cells, ndcg_paths, strict=True)}
    write_frame(dataset_system_scores(dataset, tables_, list(read_topics(topics_path))), out_path)


DECIMALS = {
    "W%": 1,
    "Δ̄": 3,
    "p_sign": 4,
    "p_sign_holm": 4,
    "p_wilcoxon": 4,
    "p_wilcoxon_holm": 4,
    "mean |Δr|": 2,
    "max |Δr|": 1,
    "CI low": 2,
    "CI high": 2,
    "mean Δr": 2,
    "affected systems": 1,
    "mean |ΔnDCG@10|": 4,
    "mean ΔnDCG@10": 4,
    "|mean ΔnDCG@10|": 4,
    "W% PH": 1,
    "W% US": 1,
    "mean |Δr| PH": 2,
    "mean |Δr| US": 2,
    **{f"{s:+d}" if s else "0": 1 for s in SHIFTS},
    "stricter": 1,
    "more lenient": 1,
}
