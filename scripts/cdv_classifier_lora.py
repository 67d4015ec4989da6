"""Optional: one LoRA-fine-tuned LLM classifier on the classifier study's splits (GPU; envs/dpo.yaml)."""

from pathlib import Path

from stressprobe.cdv.lora_classifier import lora_metrics, train_lora_classifier
from stressprobe.io import read_jsonl, write_json
from stressprobe.snakemake_io import run_script


def main(smk):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    settings, base_model = smk.params.settings, smk.params.base_model
    rows = read_jsonl(smk.input.predictions)
    questions = {q["qid"]: q for path in smk.input.questions for q in read_jsonl(path)}
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForSequenceClassification.from_pretrained(base_model, num_labels=2)
    scores = train_lora_classifier(
        model, tokenizer, rows, questions, settings, str(Path(smk.output[0]).parent / "work"), smk.params.seed
    )
    write_json(
        smk.output[0],
        {
            "classifier": f"lora:{base_model}",
            "scores": scores,
            "study": lora_metrics(rows, scores, smk.params.threshold),
        },
    )


run_script(main, snakemake)  # noqa: F821
