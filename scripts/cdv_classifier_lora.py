"""Optional: one LoRA-fine-tuned LLM classifier on the classifier study's splits (GPU; envs/dpo.yaml)."""

from pathlib import Path

from stressprobe.cdv.lora_classifier import lora_metrics, train_lora_classifier
from stressprobe.io import read_jsonl, write_json, write_jsonl
from stressprobe.snakemake_io import run_script


def main(smk):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    settings, base_model = smk.params.settings, smk.params.base_model
    rows = read_jsonl(smk.input.predictions)
    questions = {q["qid"]: q for path in smk.input.questions for q in read_jsonl(path)}
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForSequenceClassification.from_pretrained(base_model, num_labels=2)
    pool = read_jsonl(smk.input.pool)
    work = str(Path(smk.output.scores).parent / "work")
    scores = train_lora_classifier(
        model, tokenizer, rows, questions, settings, work, smk.params.seed, [r["qid"] for r in pool]
    )
    labelled = {r["qid"] for r in rows}
    write_jsonl(smk.output.pool, [{**r, "p": scores[r["qid"]]} for r in pool])
    write_json(
        smk.output.scores,
        {
            "classifier": f"lora:{base_model}",
            "scores": {q: p for q, p in scores.items() if q in labelled},
            "study": lora_metrics(rows, scores, smk.params.threshold),
        },
    )


run_script(main, snakemake)  # noqa: F821
