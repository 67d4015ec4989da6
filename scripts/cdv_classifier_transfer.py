"""Table 2: the filtering classifier's effect on the search success rate of other victims' searches."""

import json
from pathlib import Path

from stressprobe.cdv import cell_of
from stressprobe.cdv.classifier import transfer_effect
from stressprobe.io import read_jsonl, write_json
from stressprobe.snakemake_io import run_script


def scores_of(path: str) -> dict[str, float]:
    """qid -> p from the MiniLM classifier's predictions (JSONL rows) or a LoRA classifier's result."""
    if path.endswith(".jsonl"):
        return {row["qid"]: row["p"] for row in read_jsonl(path)}
    return json.loads(Path(path).read_text(encoding="utf-8"))["scores"]


def main(smk):
    searches = [(cell_of(path, 1), read_jsonl(path)) for path in smk.input.searches]
    # unseen: only the questions the classifier neither trained nor validated on (its test split).
    seen = set()
    if smk.params.questions == "unseen":
        seen = {row["qid"] for row in read_jsonl(smk.input.labels) if row["split"] != "test"}
    rows = transfer_effect(searches, scores_of(smk.input.scores), smk.params.threshold, seen)
    write_json(
        smk.output[0], {"threshold": smk.params.threshold, "questions": smk.params.questions, "rows": rows}
    )


run_script(main, snakemake)  # noqa: F821
