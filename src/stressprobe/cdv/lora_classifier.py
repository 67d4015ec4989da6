"""The paper's fine-tuned LLM classifiers (§3.5, A.2): LoRA on an open LLM with a classification head, trained
on the classifier study's training split (lr 1e-4, 5 epochs), scored on the same splits as the others.

Optional and off the default path (a GPU rule in envs/dpo.yaml); written against transformers'
AutoModelForSequenceClassification / Trainer and peft's LoraConfig(task_type="SEQ_CLS").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stressprobe.cdv.classifier import classifier_metrics


def lora_examples(
    rows: list[dict[str, Any]], questions: dict[str, dict[str, Any]], split: str
) -> list[dict[str, Any]]:
    """(text, label) of one split's labelled rows, one per (cell, question) as the other classifiers see them."""
    return [
        {"text": questions[r["qid"]]["question"], "label": r["label"]} for r in rows if r["split"] == split
    ]


def train_lora_classifier(
    model: Any,
    tokenizer: Any,
    rows: list[dict[str, Any]],
    questions: dict[str, dict[str, Any]],
    settings: dict[str, Any],
    output_dir: str,
    seed: int,
    extra_qids: Sequence[str] = (),
    **overrides: Any,
) -> dict[str, float]:
    """Fine-tune `model` (a sequence-classification model with 2 labels) with LoRA on the training split and
    return p(perturbable) for every labelled question and every one of `extra_qids` (the cost experiment's pool).
    `overrides` go to TrainingArguments (tests)."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, get_peft_model
    from transformers import DataCollatorWithPadding, Trainer, TrainingArguments

    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.config.pad_token_id = tokenizer.pad_token_id
    model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=settings["rank"]))

    def tokenized(split: str) -> Any:
        data = Dataset.from_list(lora_examples(rows, questions, split))
        return data.map(lambda batch: tokenizer(batch["text"], truncation=True), batched=True)

    validation = [r for r in rows if r["split"] == "validation"]
    arguments = TrainingArguments(
        output_dir=output_dir,
        learning_rate=settings["learning_rate"],
        num_train_epochs=settings["epochs"],
        per_device_train_batch_size=8,
        seed=seed,
        report_to=[],
        save_strategy="no",
        eval_strategy="epoch" if validation else "no",
        **overrides,
    )
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=tokenized("train"),
        eval_dataset=tokenized("validation") if validation else None,
        data_collator=DataCollatorWithPadding(tokenizer),
    )
    trainer.train()
    model.eval()
    scores = {}
    for qid in sorted({r["qid"] for r in rows} | set(extra_qids)):
        inputs = tokenizer(questions[qid]["question"], return_tensors="pt", truncation=True)
        inputs = {k: v.to(model.device) for k, v in inputs.items()}
        with torch.no_grad():
            logits = model(**inputs).logits[0]
        scores[qid] = float(torch.softmax(logits.float(), dim=-1)[1])
    return scores


def lora_metrics(rows: list[dict[str, Any]], scores: dict[str, float], threshold: float) -> dict[str, Any]:
    """The study's metrics (per split) of a LoRA classifier's scores."""
    return classifier_metrics(rows, scores, threshold)
