"""Optional: one LoRA-fine-tuned LLM classifier trained on the authors' 1,080 released labels and scored on
their 120 (Table 7 like for like; GPU; envs/dpo.yaml)."""

from pathlib import Path

from stressprobe.cdv.lora_classifier import lora_metrics, train_lora_classifier
from stressprobe.cdv.release import read_release_labels, release_rows
from stressprobe.io import write_json
from stressprobe.snakemake_io import run_script


def main(smk):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    settings, base_model = smk.params.settings, smk.params.base_model
    train, test = read_release_labels(smk.input.train), read_release_labels(smk.input.test)
    rows, questions = release_rows(train, test)
    tokenizer = AutoTokenizer.from_pretrained(base_model)
    model = AutoModelForSequenceClassification.from_pretrained(base_model, num_labels=2)
    work = str(Path(smk.output[0]).parent / "work")
    scores = train_lora_classifier(model, tokenizer, rows, questions, settings, work, smk.params.seed)
    write_json(
        smk.output[0],
        {
            "classifier": f"lora:{base_model}",
            "labels": "release",
            "n_train": len(train),
            "study": {"test": lora_metrics(rows, scores, smk.params.threshold)["test"]},
        },
    )


run_script(main, snakemake)  # noqa: F821
