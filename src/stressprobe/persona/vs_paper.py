"""How close a run came to the persona paper: its values beside the published ones, cell by cell.

Only numbers the paper prints are compared (its Tables 3–7 and numbers of its running text); each line of
the values file names where it is printed.

The published values live in a TSV (`resources/paper/persona_values.tsv`, format in
`resources/paper/README.md`): one line per cell, keyed by table, dataset, model, condition, systems and
metric. The run's values are computed from the analysis frames with the same functions as its tables,
renamed to the file's names (`analysis.vs_paper.names`), and joined on that key. A paper cell the run's grid
does not cover keeps a blank run value; a run value the paper does not report is left out.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd

from stressprobe import tables
from stressprobe.errors import StressprobeError
from stressprobe.io import read_tsv_lines
from stressprobe.persona import judgment_tables, system_tables
from stressprobe.scorecard import why_blank

KEY = ["table", "dataset", "model", "condition", "systems", "metric"]
COLUMNS = [*KEY, "value", "ci_low", "ci_high", "source"]
#: The metrics each table may hold, and where they come from in the run's tables.
METRICS = {
    "figure1": {"kappa_umbrela": "κ vs UMBRELA", "kappa_human": "κ vs human"},
    "table3": {"win_rate": "W%", "mean_shift": "Δ̄"},
    "table4": {"tau": "τ-b", "rbo": "RBO"},
    "table5": {
        "mean_abs_rank": "mean |Δr|",
        "max_abs_rank": "max |Δr|",
        "abs_mean_ndcg": "|mean ΔnDCG@10|",
        "mean_abs_ndcg": "mean |ΔnDCG@10|",
        "mean_ndcg": "mean ΔnDCG@10",
        "affected": "affected systems",
    },
    "table6": {"mean_abs_rank": "mean |Δr|", "max_abs_rank": "max |Δr|"},
    "table7": {
        "mean_abs_rank_min": "mean |Δr| min",
        "mean_abs_rank_max": "mean |Δr| max",
        "max_abs_rank_min": "max |Δr| min",
        "max_abs_rank_max": "max |Δr| max",
    },
    # Numbers printed in the running text only (the `source` names the section).
    "text": {
        "queries": "judged queries of the dataset (§3.1)",
        "consistent_pairs": "system-condition pairs moving the same way under every model (§4.4.2)",
        "system_condition_pairs": "system-condition pairs (§4.4.2)",
        "mean_delta_rank": "mean Δr of a system under a condition over the models (§4.4.2)",
        "annotator_kappa": "Cohen's κ of the two annotators' query-domain mapping (§3.2.1; no run value)",
    },
}
#: Which key fields a table's cells use (the others stay blank).
FIELDS = {
    "figure1": ("dataset", "model", "condition"),
    "table3": ("dataset", "model", "condition"),
    "table4": ("dataset", "model", "condition"),
    "table5": ("dataset", "condition"),
    "table6": ("dataset", "model"),
    "table7": ("dataset", "systems"),
}
#: The running text's numbers use the fields of their metric.
TEXT_FIELDS = {
    "queries": ("dataset",),
    "consistent_pairs": ("dataset",),
    "system_condition_pairs": ("dataset",),
    "mean_delta_rank": ("dataset", "condition", "systems"),
    "annotator_kappa": (),
}


def fields_of(table: str, metric: str) -> tuple[str, ...]:
    """The key fields a cell of `table` and `metric` uses."""
    return TEXT_FIELDS[metric] if table == "text" else FIELDS[table]


def _number(text: str, path, lineno: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise StressprobeError(f"{path}:{lineno}: {column} '{text}' is not a number; fix the line") from None
    if not math.isfinite(value):
        raise StressprobeError(f"{path}:{lineno}: {column} '{text}' is not a finite number; fix the line")
    return value


def read_paper_values(path: str | Path) -> pd.DataFrame:
    """Read and check a published-values TSV (header line first; `#` lines are comments).

    Every bad line is an error naming the file, the line and what to fix: an unknown table or metric,
    a key field the table does not use or lacks, a value that is not a number, half a CI, a duplicate cell.
    """
    rows, seen = [], {}
    header_seen = False
    for lineno, fields in read_tsv_lines(path):
        if fields and fields[0].startswith("#"):
            continue
        if not header_seen:
            if fields != COLUMNS:
                raise StressprobeError(
                    f"{path}:{lineno}: expected the header '{chr(9).join(COLUMNS)}' (tab-separated); fix it"
                )
            header_seen = True
            continue
        if len(fields) != len(COLUMNS):
            raise StressprobeError(
                f"{path}:{lineno}: expected {len(COLUMNS)} tab-separated fields, got {len(fields)}; fix the line"
            )
        row = dict(zip(COLUMNS, (f.strip() for f in fields), strict=True))
        table, metric = row["table"], row["metric"]
        if table not in METRICS:
            raise StressprobeError(
                f"{path}:{lineno}: table '{table}' is not one of {', '.join(METRICS)}; fix it"
            )
        if metric not in METRICS[table]:
            raise StressprobeError(
                f"{path}:{lineno}: metric '{metric}' is not one of {table}'s ({', '.join(METRICS[table])})"
            )
        for name in ("dataset", "model", "condition", "systems"):
            if (name in fields_of(table, metric)) != bool(row[name]):
                need = "needs" if name in fields_of(table, metric) else "leaves blank"
                raise StressprobeError(
                    f"{path}:{lineno}: {table} {metric} {need} the '{name}' field; fix the line"
                )
        if not row["source"]:
            raise StressprobeError(f"{path}:{lineno}: no source; name where the value is printed")
        value = _number(row["value"], path, lineno, "value")
        if bool(row["ci_low"]) != bool(row["ci_high"]):
            raise StressprobeError(f"{path}:{lineno}: give both ci_low and ci_high or neither")
        low = _number(row["ci_low"], path, lineno, "ci_low") if row["ci_low"] else math.nan
        high = _number(row["ci_high"], path, lineno, "ci_high") if row["ci_high"] else math.nan
        key = tuple(row[k] for k in KEY)
        if key in seen:
            raise StressprobeError(f"{path}:{lineno}: the same cell as line {seen[key]}; remove one of them")
        seen[key] = lineno
        rows.append({**row, "value": value, "ci_low": low, "ci_high": high})
    if not header_seen:
        raise StressprobeError(f"{path}: no header line; the file needs '{chr(9).join(COLUMNS)}' first")
    return pd.DataFrame(rows, columns=COLUMNS)


def _long(frame: pd.DataFrame, table: str, ci: tuple[str, str] | None = None) -> pd.DataFrame:
    """A run table → rows of KEY + value (+ CI), for the metrics of `table` it has."""
    parts = []
    for metric, column in METRICS[table].items():
        if column not in frame:
            continue
        part = pd.DataFrame({k: frame[k].astype(str) if k in frame else "" for k in FIELDS[table]})
        part = part.assign(table=table, metric=metric, value=frame[column].astype(float).to_numpy())
        if ci and metric == "mean_abs_rank":
            part = part.assign(ci_low=frame[ci[0]].to_numpy(float), ci_high=frame[ci[1]].to_numpy(float))
        parts.append(part)
    out = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    return _keyed(out)


def _keyed(frame: pd.DataFrame) -> pd.DataFrame:
    """KEY columns as text (blank where a table does not use the field), then value and CI."""
    frame = frame.reindex(columns=[*KEY, "value", "ci_low", "ci_high"])
    return frame.astype({k: object for k in KEY}).fillna({k: "" for k in KEY})


def _rename(frame: pd.DataFrame, names: Mapping[str, str]) -> pd.DataFrame:
    """Config names → the values file's names (datasets and models; others kept)."""
    frame = frame.copy()
    for column in ("dataset", "model"):
        frame[column] = frame[column].map(lambda v: names.get(v, v))
    return frame


def text_values(kappa: pd.DataFrame, displacement: pd.DataFrame) -> pd.DataFrame:
    """The run's values of the numbers printed in the text (`text` table), but `mean_delta_rank`, which
    depends on the paper's rows (see `run_values`). Per dataset: judged queries (every query of the human
    qrels has κ rows) and, from the direction-consistency counts, the consistent and all system-condition
    pairs."""
    rows = []
    queries = kappa.groupby(kappa["dataset"].astype(str))["qid"].nunique()
    rows += [{"dataset": d, "metric": "queries", "value": float(n)} for d, n in queries.items()]
    if not displacement.empty:
        _, counts = system_tables.direction_consistency_tables(displacement)
        totals = counts.groupby(counts["dataset"].astype(str))[["consistent", "pairs"]].sum()
        for dataset, row in totals.iterrows():
            rows.append({"dataset": dataset, "metric": "consistent_pairs", "value": float(row["consistent"])})
            rows.append(
                {"dataset": dataset, "metric": "system_condition_pairs", "value": float(row["pairs"])}
            )
    return pd.DataFrame(rows, columns=["dataset", "metric", "value"]).assign(table="text")


def run_values(
    kappa: pd.DataFrame,
    systems: pd.DataFrame,
    phi: float,
    bootstrap: Mapping,
    paper_rows: pd.DataFrame,
    names: Mapping[str, str],
    undefined: str = "tie",
) -> pd.DataFrame:
    """The run's values of Figure 1, Tables 3–7 and the text's numbers in the values file's long form
    (names already mapped).

    `paper_rows` are the paper's cells: for Table 7 the run's |Δr| ranges are computed over the same
    systems (its `systems` field: run names or `prefix*` families, separated by spaces), for the text's
    `mean_delta_rank` the run's mean Δr of the same system and condition over its models.
    """
    from stressprobe.persona import pins

    displacement = system_tables.displacement_frame(systems)
    parts = [_long(judgment_tables.kappa_agreement_table(kappa), "figure1")]
    detail = judgment_tables.win_rate_significance_table(kappa, undefined)
    if not detail.empty:
        parts.append(_long(detail, "table3"))
    parts.append(_long(system_tables.ranking_agreement_table(systems, phi), "table4"))
    parts.append(_long(system_tables.displacement_by_condition_table(displacement), "table5"))
    ci = system_tables.displacement_ci_table(
        displacement, bootstrap["resamples"], bootstrap["seed"], bootstrap.get("level", 0.95)
    )
    parts.append(_long(ci, "table6", ci=("CI low", "CI high")))
    parts.append(_keyed(text_values(kappa, displacement)))
    out = _rename(pd.concat([p for p in parts if not p.empty], ignore_index=True), names)
    back = {paper: run for run, paper in names.items()}
    rows = []
    # The text's mean Δr of one system under one condition, averaged over the models.
    shifts = paper_rows[(paper_rows["table"] == "text") & (paper_rows["metric"] == "mean_delta_rank")]
    for dataset, condition, run in shifts[["dataset", "condition", "systems"]].itertuples(index=False):
        block = displacement[
            (displacement["dataset"].astype(str) == back.get(dataset, dataset))
            & (displacement["condition"].astype(str) == condition)
            & (displacement["run"].astype(str) == run)
        ]
        if not block.empty:
            rows.append(
                {"table": "text", "dataset": dataset, "condition": condition, "systems": run,
                 "metric": "mean_delta_rank", "value": float(block["delta_rank"].mean())}
            )  # fmt: skip
    # Table 7: per paper row, the run's ranges over the same systems (datasets renamed back to the run's).
    table7_rows = paper_rows[paper_rows["table"] == "table7"]
    for dataset, entries in table7_rows[["dataset", "systems"]].drop_duplicates().itertuples(index=False):
        run_dataset = back.get(dataset, dataset)
        block = displacement[displacement["dataset"].astype(str) == run_dataset]
        if block.empty:
            continue
        sensitivity = system_tables.sensitivity_frame(block, ["dataset"]).set_index("run")
        expanded = pins.expand_systems(entries.split(), list(sensitivity.index))
        runs = sorted({r for matched in expanded.values() for r in matched})
        if not runs:
            continue
        values = {
            "mean_abs_rank_min": sensitivity.loc[runs, "sensitivity"].min(),
            "mean_abs_rank_max": sensitivity.loc[runs, "sensitivity"].max(),
            "max_abs_rank_min": sensitivity.loc[runs, "max_abs_rank"].min(),
            "max_abs_rank_max": sensitivity.loc[runs, "max_abs_rank"].max(),
        }
        rows += [
            {
                "table": "table7",
                "dataset": dataset,
                "model": "",
                "condition": "",
                "systems": entries,
                "metric": metric,
                "value": value,
            }
            for metric, value in values.items()
        ]
    if rows:
        out = pd.concat([out, pd.DataFrame(rows)], ignore_index=True)
    return _keyed(out)


def _inside(value: float, low: float, high: float):
    """Whether `value` lies in [low, high]; None (a blank cell) when either side is missing."""
    if any(isinstance(x, float) and math.isnan(x) for x in (value, low, high)):
        return None
    return bool(low <= value <= high)


def vs_paper_table(paper: pd.DataFrame, run: pd.DataFrame) -> pd.DataFrame:
    """Every paper cell with the run's value beside it, the difference (run − paper) and the CI checks.

    Rows follow the values file; a cell the run does not cover has blank run columns and says why (`why`).
    """
    merged = paper.merge(
        run, on=KEY, how="left", suffixes=("", "_run"), validate="one_to_one", indicator=True
    )
    parts = set(run["table"]) if "table" in run else set()
    table = pd.DataFrame(
        {
            **{k: merged[k] for k in KEY},
            "paper": merged["value"],
            "run": merged["value_run"].astype(float),
            "difference": merged["value_run"].astype(float) - merged["value"],
            "run CI low": merged["ci_low_run"].astype(float),
            "run CI high": merged["ci_high_run"].astype(float),
            "paper in run CI": [
                _inside(p, lo, hi)
                for p, lo, hi in zip(
                    merged["value"], merged["ci_low_run"], merged["ci_high_run"], strict=True
                )
            ],
            "paper CI low": merged["ci_low"],
            "paper CI high": merged["ci_high"],
            "run in paper CI": [
                _inside(r, lo, hi)
                for r, lo, hi in zip(merged["value_run"], merged["ci_low"], merged["ci_high"], strict=True)
            ],
            "why": [
                why_blank(
                    row["value_run"],
                    row["_merge"] == "both",
                    row["table"] in parts,
                    row["table"],
                    ", ".join(f"{k}={row[k]}" for k in KEY[1:-1] if row[k] != "") + f", {row['metric']}",
                )
                for row in merged.to_dict("records")
            ],
        }
    )
    return table.astype({"paper in run CI": object, "run in paper CI": object})


#: The Table 2 check's scorecard metrics: whether the run retrieved a printed persona's text as its selected
#: persona, or among its top-k candidates (the check's `match`: `selected`, `candidate <rank>` or `no`).
TABLE2_METRICS = {
    "persona_selected": lambda match: match == "selected",
    "persona_in_top_k": lambda match: match != "no",
}


def table2_rows(check: pd.DataFrame, dataset: str, qid: str) -> pd.DataFrame:
    """Each persona Table 2 prints as scorecard rows (condition `source/role`, one row per TABLE2_METRICS):
    the paper's value is 1 (the persona is printed), the run's 1 when it retrieved that text and 0 when not;
    `source` says where the persona is printed and the digest it is compared by."""
    rows = [
        {
            "table": "table2",
            "dataset": dataset,
            "model": "",
            "condition": f"{entry['source']}/{entry['role']}",
            "systems": "",
            "metric": metric,
            "paper": 1.0,
            "run": float(found(str(entry["match"]))),
            "difference": float(found(str(entry["match"]))) - 1.0,
            "source": f"Table 2, query {qid}, {entry['source']} {entry['role']} persona "
            f"(sha256 {entry['printed sha256'][:12]}…; run: {entry['match']})",
        }
        for entry in check.to_dict("records")
        for metric, found in TABLE2_METRICS.items()
    ]
    return pd.DataFrame(rows)


def vs_paper_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per table and metric: paper cells, cells the run covers, mean and largest |difference|, how many
    paper values lie inside the run's bootstrap CI (of those with one) and, for Table 2's personas, how many
    the run retrieved (`matched`)."""
    rows = []
    for (name, metric), block in table.groupby(["table", "metric"], sort=False):
        covered = block["run"].notna()
        difference = block.loc[covered, "difference"].abs()
        checked = block["paper in run CI"].dropna()
        rows.append(
            {
                "table": name,
                "metric": metric,
                "paper cells": len(block),
                "covered": int(covered.sum()),
                "mean |difference|": difference.mean() if len(difference) else np.nan,
                "max |difference|": difference.max() if len(difference) else np.nan,
                "paper in run CI": int(sum(bool(x) for x in checked)) if len(checked) else None,
                "with run CI": len(checked),
                "matched": int((block["run"] == block["paper"]).sum()) if name == "table2" else None,
            }
        )
    return pd.DataFrame(rows).astype({"paper in run CI": "Int64", "matched": "Int64"})


_DECIMALS = {
    "paper": 3,
    "run": 3,
    "difference": 3,
    "run CI low": 2,
    "run CI high": 2,
    "paper CI low": 2,
    "paper CI high": 2,
    "mean |difference|": 3,
    "max |difference|": 3,
}


def write_vs_paper(
    values_path: str | Path,
    kappa: pd.DataFrame,
    systems: pd.DataFrame,
    phi: float,
    bootstrap: Mapping,
    names: Mapping[str, str],
    stem: str,
    summary_stem: str,
    undefined: str = "tie",
    table2: tuple[pd.DataFrame, str, str] | None = None,
) -> None:
    """The reproduction scorecard: every published cell beside the run's, and a summary per metric; with
    the Table 2 check (`table2`: its table, the run's dataset and the query), each printed persona is a
    row too (`table2_rows`), counted in the summary's `matched`."""
    paper = read_paper_values(values_path)
    run = run_values(kappa, systems, phi, bootstrap, paper, names, undefined)
    table = vs_paper_table(paper.drop(columns="source"), run)
    table.insert(len(table.columns), "source", paper["source"].to_numpy())
    if table2 is not None:
        check, dataset, qid = table2
        table = pd.concat([table, table2_rows(check, names.get(dataset, dataset), qid)], ignore_index=True)
    tables.write_table(table, stem, _DECIMALS)
    summary = vs_paper_summary(table)
    tables.write_table(summary, summary_stem, _DECIMALS)
