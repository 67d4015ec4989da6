"""The CDV paper's experiments as tables: per-experiment accuracy (Table 1, Figure 2), the classifier study
(Table 7), the filter's cost experiment (Table 3), DPO (Table 5), and the run beside the published values.

Every table is also flattened to long rows (`experiment, dataset, model, column, value`), the unit the
comparison with the paper's values (`vs_paper_table`) matches on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from stressprobe.cdv import cell_of
from stressprobe.cdv.evaluate import accuracy_by_condition, paired_original_accuracy
from stressprobe.cdv.experiments import SELECTION_ROWS, experiment_qids
from stressprobe.errors import StressprobeError
from stressprobe.io import read_jsonl
from stressprobe.scorecard import why_blank
from stressprobe.scoring import UNANSWERED

ALL = "all"  # the dataset (or model) of a value pooled over datasets


def _accuracy(records: list[dict[str, Any]], condition: str) -> float | None:
    found = accuracy_by_condition(records).get(condition)
    return found["accuracy"] if found else None


def _counts(records: list[dict[str, Any]], condition: str) -> tuple[int, int]:
    """(answered records, unanswered records) of a condition: the accuracy's n and what it leaves out."""
    found = accuracy_by_condition(records).get(condition, {})
    return found.get("n", 0), found.get(UNANSWERED, 0)


def experiments_table(
    experiments: dict[str, dict[str, Any]],
    eval_paths: list[str],
    question_paths: list[str],
    seed: int,
    mitigation_paths: list[str] | None = None,
) -> pd.DataFrame:
    """Per experiment, cell and evaluated model: accuracy on the experiment's sample of originals, on the
    perturbed questions found for it, and the paper's Delta = original - perturbed; with the mitigation's
    records, Table 4 on the same sample (the perturbed questions under the focus instruction and the Diff)."""
    questions = {Path(p).stem: read_jsonl(p) for p in question_paths}
    mitigated = {(tuple(cell_of(p, 2).values()), Path(p).stem): p for p in mitigation_paths or []}
    rows = []
    for name, experiment in sorted(experiments.items()):
        cells = {(c["proxy"], c["victim"]) for c in experiment["cells"]}
        for path in sorted(eval_paths):
            cell, model = cell_of(path, 2), Path(path).stem
            if (cell["proxy"], cell["victim"]) not in cells or cell["dataset"] not in questions:
                continue
            if experiment.get("eval_models") and model not in experiment["eval_models"]:
                continue
            sample = experiment_qids(questions[cell["dataset"]], experiment["n"], seed)
            records = [r for r in read_jsonl(path) if r["qid"] in sample]
            original, perturbed = _accuracy(records, "original"), _accuracy(records, "perturbed")
            paired = paired_original_accuracy(records)
            (n_original, unanswered_original), (n_perturbed, unanswered_perturbed) = (
                _counts(records, "original"),
                _counts(records, "perturbed"),
            )
            rows.append(
                {
                    "experiment": name,
                    **cell,
                    "model": model,
                    "n_original": n_original,
                    "n_perturbed": n_perturbed,
                    f"{UNANSWERED}_original": unanswered_original,
                    f"{UNANSWERED}_perturbed": unanswered_perturbed,
                    "acc_original": original,
                    "acc_original_paired": paired,
                    "acc_perturbed": perturbed,
                    # Table 1's Delta is its Original column minus its Perturbed column (checked on the
                    # printed values); the paired one is beside it.
                    "delta": None if original is None or perturbed is None else original - perturbed,
                    "delta_paired": None if paired is None or perturbed is None else paired - perturbed,
                    # Figure 3's baselines on the same sample (absent when baselines are off)
                    "acc_elaborated": _accuracy(records, "elaborated"),
                    "acc_prompt_only": _accuracy(records, "prompt_only"),
                    **_mitigation_columns(mitigated.get((tuple(cell.values()), model)), sample, perturbed),
                }
            )
    return pd.DataFrame(rows)


def _mitigation_columns(path: str | None, sample: set[str], perturbed: float | None) -> dict[str, Any]:
    """Table 4's Enh. and Diff on an experiment's sample; nothing without the mitigation's records."""
    if path is None:
        return {}
    records = [r for r in read_jsonl(path) if r["qid"] in sample]
    enhanced = _accuracy(records, "perturbed")
    diff = None if enhanced is None or perturbed is None else enhanced - perturbed
    return {
        "acc_perturbed_mitigated": enhanced,
        "mitigation_diff": diff,
        f"{UNANSWERED}_perturbed_mitigated": _counts(records, "perturbed")[1],
    }


def classifier_study_table(metrics_path: str, lora_paths: list[str] | None = None) -> pd.DataFrame:
    """Table 7 / Figure 5: precision, recall and F0.5 of every classifier of the study, per split (the
    LoRA-fine-tuned ones, when their optional rule ran, beside the others)."""
    metrics = json.loads(Path(metrics_path).read_text(encoding="utf-8"))
    study = dict(metrics["study"])
    for path in lora_paths or []:
        lora = json.loads(Path(path).read_text(encoding="utf-8"))
        study[lora["classifier"]] = lora["study"]
    rows = [
        {
            "classifier": name,
            "split": split,
            "n": m["n"],
            "positives": m["positives"],
            "precision": m["precision"],
            "recall": m["recall"],
            "f0.5": m["f_beta"],
            UNANSWERED: m[UNANSWERED],
        }
        for name, splits in study.items()
        for split, m in splits.items()
    ]
    return pd.DataFrame(rows)


def _per(total: float, count: int) -> float | None:
    return total / count if count else None


def _summed(summaries: list[dict[str, Any]], key: str) -> int:
    return sum(s.get(key, 0) for s in summaries)


def filter_cost_table(summary_paths: list[str]) -> pd.DataFrame:
    """Table 3, per selection (with the filter, without, and the MiniLM classifier's extra row), per dataset
    and pooled: input and output tokens, perturbed questions (successful perturbations, the caption's Pert.
    Ques.), the success rate, and USD per perturbed question = the searches' total cost / perturbed
    questions (at GPT-4o-mini's prices the paper's $0.0082 and $0.0064 are exactly total / 175 and / 236).

    Already-failed originals are counted one way in every table (stressprobe.cdv.search_report.
    success_rates): `success_rate` leaves them out of both counts; `success_rate_with_originals` counts them
    as successes (Algorithm 1 puts them in L) among all questions."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in summary_paths:
        cell = cell_of(path, 1)
        dataset, _, selection = cell["dataset"].rpartition(".")
        summary = json.loads(Path(path).read_text(encoding="utf-8"))
        groups.setdefault((dataset, selection), []).append(summary)
        groups.setdefault((ALL, selection), []).append(summary)
    rows = []
    for (dataset, selection), summaries in sorted(groups.items()):
        questions, filtered = _summed(summaries, "questions"), _summed(summaries, "classifier_filtered")
        unanswered = _summed(summaries, UNANSWERED)
        searched = questions - filtered - unanswered - _summed(summaries, "flagged_original_fails")
        successes = _summed(summaries, "questions_with_success")
        perturbed = _summed(summaries, "successful_perturbations")
        cost = _summed(summaries, "cost_usd")
        tokens = {
            kind: sum(u[kind] for s in summaries for u in s["requests"].values())
            for kind in ("prompt", "completion")
        }
        rows.append(
            {
                "dataset": dataset,
                "selection": SELECTION_ROWS[selection],
                "questions": questions,
                "already_failed": _summed(summaries, "flagged_original_fails"),
                "with_success": successes,
                "success_rate": _per(successes, searched),
                "success_rate_with_originals": _per(
                    _summed(summaries, "questions_with_success_with_originals"),
                    questions - filtered - unanswered,
                ),
                UNANSWERED: unanswered,
                "input_tokens": tokens["prompt"],
                "output_tokens": tokens["completion"],
                "perturbed_questions": perturbed,
                "usd": cost,
                "tokens_per_perturbed_question": _per(tokens["prompt"] + tokens["completion"], perturbed),
                "usd_per_perturbed_question": _per(cost, perturbed),
            }
        )
    table = pd.DataFrame(rows)
    return _relative_to_random(table) if not table.empty else table


def _relative_to_random(table: pd.DataFrame) -> pd.DataFrame:
    """Table 3's arrows: each filtered row's success rate and cost relative to the random row's."""
    base = table[table["selection"] == "without_filter"].set_index("dataset")

    def relative(row: pd.Series, column: str, sign: int) -> float | None:
        if row["dataset"] not in base.index or row["selection"] == "without_filter":
            return None
        reference = base.loc[row["dataset"], column]
        if reference is None or pd.isna(reference) or not reference or pd.isna(row[column]):
            return None
        return sign * (row[column] / reference - 1)

    return table.assign(
        success_rate_relative_increase=table.apply(relative, axis=1, args=("success_rate", 1)),
        usd_per_perturbed_question_relative_decrease=table.apply(
            relative, axis=1, args=("usd_per_perturbed_question", -1)
        ),
    )


def transfer_table(path: str) -> pd.DataFrame:
    """Table 2: per victim, the search success rate without and with the filtering classifier."""
    return pd.DataFrame(json.loads(Path(path).read_text(encoding="utf-8"))["rows"])


def release_table(path: str, lora_paths: list[str] | None = None) -> pd.DataFrame:
    """Table 7 on the authors' released labels: the Baseline row, the MiniLM and prompt classifiers, and the
    LoRA classifiers trained on the released 1,080 (when their GPU rule ran)."""
    result = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = [
        {"classifier": name, "labels": result["labels"], "n_train": result["n_train"], **_metric_columns(m)}
        for name, splits in result["study"].items()
        for m in [splits["test"]]
    ]
    for lora_path in lora_paths or []:
        lora = json.loads(Path(lora_path).read_text(encoding="utf-8"))
        rows.append(
            {
                "classifier": lora["classifier"],
                "labels": lora["labels"],
                "n_train": lora["n_train"],
                **_metric_columns(lora["study"]["test"]),
            }
        )
    return pd.DataFrame(rows)


def _metric_columns(m: dict[str, Any]) -> dict[str, Any]:
    return {
        "n": m["n"],
        "positives": m["positives"],
        "precision": m["precision"],
        "recall": m["recall"],
        "f0.5": m["f_beta"],
    }


def dpo_table(result_paths: list[str], compare_paths: list[str] | None = None) -> pd.DataFrame:
    """Table 5: per trained model, the held-out split's accuracy before and after DPO, the difference, Retain
    (the caption's reading, on the perturbed questions, and on the originals) and the truncated answers;
    then the comparison models' accuracy on the same questions (`accuracy`, Orig. only)."""
    rows = []
    for path in result_paths:
        result = json.loads(Path(path).read_text(encoding="utf-8"))
        rows.append({"model": result["base_model"], **result["evaluation"]})
    for path in compare_paths or []:
        rows.append({"model": Path(path).stem, **_benchmark_columns(read_jsonl(path))})
    return pd.DataFrame(rows)


def _benchmark_columns(records: list[dict[str, Any]]) -> dict[str, Any]:
    found = accuracy_by_condition(records).get("perturbed", {"n": 0, "accuracy": None, UNANSWERED: 0})
    return {k: found.get(k) for k in ("n", "accuracy", "unparsed", "truncated", UNANSWERED)}


def benchmark_table(paths: list[str]) -> pd.DataFrame:
    """The search-free benchmark: per benchmark file and model, accuracy on its questions, per source
    dataset and pooled (`all`), with the unread and truncated answers."""
    rows = []
    for path in sorted(paths):
        records = read_jsonl(path)
        sources = sorted({r["source"] for r in records if r.get("source")})
        groups = [(ALL, records)] + [(s, [r for r in records if r.get("source") == s]) for s in sources]
        for source, part in groups:
            where = {"benchmark": Path(path).parent.name, "model": Path(path).stem, "dataset": source}
            rows.append({**where, **_benchmark_columns(part)})
    return pd.DataFrame(rows)


def long_rows(table: pd.DataFrame, experiment: str, columns: list[str], model_column: str = "model"):
    """A table's values as rows of (experiment, dataset, model, column, value); an undefined value (a rate
    over no items) is kept as None, so that the scorecard can say the run computed it."""
    if table.empty:
        return []
    rows = []
    for record in table.to_dict("records"):
        for column in columns:
            if column in record:
                value = record[column]
                rows.append(
                    {
                        "experiment": record.get("experiment", experiment),
                        "dataset": record.get("dataset", ALL),
                        "model": record.get(model_column, ALL),
                        "column": column,
                        "value": None if value is None or pd.isna(value) else float(value),
                    }
                )
    return rows


ACCURACY = ["acc_original", "acc_original_paired", "acc_perturbed", "delta", "delta_paired"]
ACCURACY += ["acc_elaborated", "acc_prompt_only", "acc_perturbed_mitigated", "mitigation_diff"]


def pooled_accuracy_rows(table: pd.DataFrame) -> list[dict[str, Any]]:
    """Means over datasets per (experiment, model) -- the paper's `all` cells, an unweighted mean of the
    datasets' accuracies -- and over the models of each (experiment, dataset) (the `average` row of
    Figure 3), with the text's drops (Original - Ours) and relative drops."""
    if table.empty:
        return []
    columns = [c for c in ACCURACY if c in table.columns]
    table = table.assign(**{c: pd.to_numeric(table[c], errors="coerce") for c in columns})
    pooled = table.groupby(["experiment", "model"])[columns].mean().reset_index().assign(dataset=ALL)
    both = pd.concat([table[["experiment", "dataset", "model", *columns]], pooled])
    averaged = both.groupby(["experiment", "dataset"])[columns].mean().reset_index().assign(model="average")
    every = pd.concat([pooled, averaged])
    original = every["acc_original"]
    every = every.assign(
        drop_perturbed=original - every["acc_perturbed"],
        relative_drop=(1 - every["acc_perturbed"] / original.where(original > 0)),
    )
    return long_rows(every, "", [*columns, "drop_perturbed", "relative_drop"])


def _with_mitigation_diff(table: pd.DataFrame) -> pd.DataFrame:
    """Table 4's Diff (Enh. - Orig. on the perturbed questions) and its mean over datasets (`all`)."""
    if "acc_perturbed_mitigated" not in table.columns or "acc_perturbed" not in table.columns:
        return table
    accuracy = [c for c in table.columns if c.startswith("acc_")]
    table = table.assign(**{c: pd.to_numeric(table[c], errors="coerce") for c in accuracy})
    table = table.assign(mitigation_diff=table["acc_perturbed_mitigated"] - table["acc_perturbed"])
    columns = [*accuracy, "mitigation_diff"]
    pooled = table.groupby(["experiment", "model"])[columns].mean().reset_index().assign(dataset=ALL)
    return pd.concat([table, pooled])


PAPER_COLUMNS = ("table", "experiment", "dataset", "model", "column", "value", "source")


def read_paper_values(path: str | Path) -> pd.DataFrame:
    """The published values file (CSV, `#` comments); a missing column is a one-line error."""
    try:
        table = pd.read_csv(path, comment="#", dtype={"value": float}, keep_default_na=False)
    except (ValueError, pd.errors.ParserError) as exc:
        raise StressprobeError(
            f"{path}: not a values file ({str(exc).splitlines()[0]}); see resources/cdv/README.md"
        ) from None
    missing = [c for c in PAPER_COLUMNS if c not in table.columns]
    if missing:
        raise StressprobeError(
            f"{path}: missing column(s) {', '.join(missing)}; the header must be {','.join(PAPER_COLUMNS)}"
        )
    return table


def vs_paper_table(paper: pd.DataFrame, run_rows: list[dict[str, Any]]) -> pd.DataFrame:
    """Every published value beside the run's value of the same (experiment, dataset, model, column) and
    run - paper; blank where the run does not cover the cell. A value given as a range `low..high` in the
    paper (`value_high` column) is covered when the run's value lies inside. A blank row says why (`why`)."""
    run: dict[tuple, float | None] = {}
    for r in run_rows:
        key = (r["experiment"], r["dataset"], r["model"], r["column"])
        if run.get(key) is None:
            run[key] = r["value"]
    experiments = {key[0] for key in run}
    rows = []
    for record in paper.to_dict("records"):
        key = (record["experiment"], record["dataset"], record["model"], record["column"])
        ours = run.get(key)
        high = record.get("value_high")
        high = None if high in (None, "") or pd.isna(high) else float(high)
        row = {
            **{c: record[c] for c in ("table", "experiment", "dataset", "model", "column")},
            "paper": record["value"],
            "paper_high": high,
            "run": ours,
            "run_minus_paper": None if ours is None or high is not None else ours - record["value"],
            "within_range": None if ours is None or high is None else record["value"] <= ours <= high,
            "why": why_blank(
                ours,
                key in run,
                key[0] in experiments,
                key[0] or "the experiments table",
                f"dataset={key[1]}, model={key[2]}, {key[3]}",
            ),
            "source": record["source"],
        }
        rows.append(row)
    return pd.DataFrame(rows)


def run_values(built: dict[str, pd.DataFrame]) -> list[dict[str, Any]]:
    """The run's values in the long form the published values file uses (see resources/cdv/README.md):
    experiments by their config name, then `classifier_study` (test split), `classifier_release`,
    `classifier_transfer`, `filter_cost`, `baselines`, `mitigation`, `dpo` and `benchmark[<file>]`."""
    rows: list[dict[str, Any]] = []
    accuracy = built.get("cdv_experiments")
    if accuracy is not None and not accuracy.empty:
        accuracy = experiment_cells(accuracy)
        rows += long_rows(accuracy, "", [c for c in ACCURACY if c in accuracy.columns])
        rows += pooled_accuracy_rows(accuracy)
    metrics = ["precision", "recall", "f0.5"]
    study = built.get("cdv_classifier_study")
    if study is not None and not study.empty:
        test = study[study["split"] == "test"].assign(dataset=ALL)
        rows += long_rows(test, "classifier_study", metrics, "classifier")
    release = built.get("cdv_classifier_release")
    if release is not None and not release.empty:
        rows += long_rows(release.assign(dataset=ALL), "classifier_release", metrics, "classifier")
    transfer = built.get("cdv_classifier_transfer")
    if transfer is not None and not transfer.empty:
        columns = ["success_rate_without_filter", "success_rate_with_filter"]
        rows += long_rows(transfer.assign(dataset=ALL), "classifier_transfer", columns, "victim")
    cost = built.get("cdv_filter_cost")
    if cost is not None and not cost.empty:
        columns = [c for c in cost.columns if c not in ("dataset", "selection")]
        rows += long_rows(cost, "filter_cost", columns, "selection")
    for name in ("baselines", "mitigation"):
        table = built.get(f"cdv_{name}")
        if table is not None and not table.empty:
            named = _with_mitigation_diff(_by_cell(table, name))
            columns = [c for c in named.columns if c.startswith("acc_") or c == "mitigation_diff"]
            rows += long_rows(named, name, columns)
    dpo = built.get("cdv_dpo")
    if dpo is not None and not dpo.empty:
        columns = [c for c in dpo.columns if c != "model"]
        rows += long_rows(dpo.assign(dataset=ALL), "dpo", columns)
    benchmark = built.get("cdv_benchmark")
    if benchmark is not None and not benchmark.empty:
        # a benchmark file's accuracies (Table 5's Orig. on the authors' own DPO test questions)
        named = benchmark.assign(experiment=[f"benchmark[{b}]" for b in benchmark["benchmark"]])
        rows += long_rows(named, "", ["accuracy"])
    ablation = built.get("cdv_value_ablation")
    if ablation is not None and not ablation.empty:
        # section 4.4 pools its questions: the mean of the cells' success rates per value function
        means = ablation.assign(success_rate=pd.to_numeric(ablation["success_rate"], errors="coerce"))
        means = means.groupby("value")["success_rate"].mean().reset_index().assign(dataset=ALL)
        rows += long_rows(means, "value_ablation", ["success_rate"], "value")
    human = built.get("cdv_human_eval")
    if human is not None and not human.empty:
        columns = ["semantic_equivalence", "answer_consistency"]
        rows += long_rows(human.assign(**{c: human[c] / 100 for c in columns}), "human_eval", columns)
    return rows


def run_row(
    experiment: str, column: str, value: float, dataset: str = ALL, model: str = ALL
) -> dict[str, Any]:
    """One run value in the long form (for values computed outside the study tables)."""
    return {"experiment": experiment, "dataset": dataset, "model": model, "column": column, "value": value}


def _by_cell(table: pd.DataFrame, name: str) -> pd.DataFrame:
    """A per-cell table's rows named `name` when each (dataset, model) has one cell, else `name[proxy/victim]`
    (the paper's baselines and mitigation tables have one row per evaluated model)."""
    single = not table.duplicated(["dataset", "model"]).any()
    experiment = [
        name if single else f"{name}[{p}/{v}]" for p, v in zip(table["proxy"], table["victim"], strict=True)
    ]
    return table.assign(experiment=experiment)


def experiment_cells(table: pd.DataFrame) -> pd.DataFrame:
    """An experiment of several search cells names each: `self_search[gpt-4o]` (proxy = victim) or
    `name[proxy/victim]`, so that Figure 2's rows (one per victim) stay apart; one cell keeps the plain name."""
    cells = table.groupby("experiment")[["proxy", "victim"]].apply(lambda t: len(t.drop_duplicates()))

    def name(row: pd.Series) -> str:
        if cells[row["experiment"]] == 1:
            return row["experiment"]
        cell = row["victim"] if row["proxy"] == row["victim"] else f"{row['proxy']}/{row['victim']}"
        return f"{row['experiment']}[{cell}]"

    return table.assign(experiment=table.apply(name, axis=1))
