"""DPO preference pairs in the JSONL format TRL's DPOTrainer reads (conversational prompt/chosen/rejected).

Two ways to choose a pair (`cdv.dpo.pairs`). `project`: for each perturbed question, chosen = a response
that answers it correctly (an evaluated model's, else one on the original question, else a short templated
answer), rejected = a wrong response to it (the victim's greedy answer from the search, else an evaluated
model's). `release` (the authors' train/dpo_data.py): chosen = the response of the first evaluator, in a
fixed order, that answered the perturbed question right, rejected = the first that answered it wrong, and
no pair without both. Pairs are split by original question so that no question is in both train and test.
"""

from __future__ import annotations

import copy
from typing import Any

from stressprobe.cdv.answers import was_read
from stressprobe.cdv.classifier import split_keys
from stressprobe.cdv.prompts import letter, parse_answer, victim_messages
from stressprobe.llm import system_turns
from stressprobe.scoring import UNANSWERED, is_unanswered


def _conversation(messages: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in messages]


def _pair(dataset: str, p: dict[str, Any], chosen: str, rejected: str) -> dict[str, Any]:
    """A pair on perturbed question `p`, prompted as the held-out questions are asked (the project's
    `victim_messages`, which the scoring reads by its 'Answer: X' line); `group` = dataset/qid for the
    split, `node_id` for the held-out questions (TRL sees neither: `trl_rows`)."""
    return {
        "group": f"{dataset}/{p['qid']}",
        "node_id": p["node_id"],
        "prompt": _conversation(victim_messages(p["question"], p["choices"])),
        "chosen": [{"role": "assistant", "content": chosen}],
        "rejected": [{"role": "assistant", "content": rejected}],
    }


def preference_pairs(
    dataset: str,
    perturbed: list[dict[str, Any]],
    evals: list[dict[str, Any]],
    wrong_answers: dict[str, str],
    answer_line: bool = True,
) -> list[dict[str, Any]]:
    """The project's pairs: one per perturbed question that has a wrong response (the search's own, by
    node id, or an evaluated model's).

    With `answer_line`, a response without an answer line (an answer to the authors' template, read by a
    second call) gets the line of the option it was read as, so every response ends as the scoring reads
    it (an unread one stays as it is)."""
    pairs = []
    for p in perturbed:
        on_node = [e for e in evals if e["node_id"] == p["node_id"] and e["condition"] == "perturbed"]
        on_original = [
            e for e in evals if e["qid"] == p["qid"] and e["condition"] == "original" and e["correct"]
        ]
        correct = [e for e in on_node if e["correct"]] + on_original
        chosen = (
            _with_line(correct[0]["raw"], letter(p["answer_index"]), len(p["choices"]), answer_line)
            if correct
            else (f"The added background is irrelevant to the question. Answer: {letter(p['answer_index'])}")
        )
        wrong = [wrong_answers[p["node_id"]]] if wrong_answers.get(p["node_id"]) else []
        wrong += [
            _with_line(e["raw"], e.get("answer"), len(p["choices"]), answer_line)
            for e in on_node
            if not e["correct"] and e["raw"]
        ]
        if wrong:
            pairs.append(_pair(dataset, p, chosen, wrong[0]))
    return pairs


def release_pairs(
    dataset: str,
    perturbed: list[dict[str, Any]],
    evals_by_evaluator: list[list[dict[str, Any]]],
    answer_line: bool = True,
) -> list[dict[str, Any]]:
    """The release's pairs (train/dpo_data.py:37-80 at 0a1acbd): per perturbed question, chosen = the
    response of the first evaluator (in the order of `evals_by_evaluator`) that answered it right, rejected
    = the first that answered it wrong; a question without both has no pair. An answer whose extraction
    reply was no JSON is not a wrong answer here: the release's eval.py:50-51 drops it from its records
    (`was_read`). `answer_line` as in `preference_pairs`."""
    pairs = []
    for p in perturbed:
        first: dict[bool, dict[str, Any]] = {}
        for records in evals_by_evaluator:
            mine = next((e for e in records if e["node_id"] == p["node_id"] and _scored(e)), None)
            if mine is not None:
                first.setdefault(bool(mine["correct"]), mine)
        if True in first and False in first:
            chosen, rejected = (
                _with_line(first[right]["raw"], first[right]["answer"], len(p["choices"]), answer_line)
                for right in (True, False)
            )
            pairs.append(_pair(dataset, p, chosen, rejected))
    return pairs


def _scored(record: dict[str, Any]) -> bool:
    """A perturbed-question evaluation the release keeps: answered, and read (`was_read`)."""
    return record["condition"] == "perturbed" and not is_unanswered(record) and was_read(record)


def _with_line(text: str, read_as: str | None, n_choices: int, answer_line: bool) -> str:
    """`text` ending with 'Answer: <read_as>' when it has no answer line of its own (and one is wanted)."""
    if not answer_line or read_as is None or parse_answer(text, n_choices) is not None:
        return text
    return f"{text.rstrip()}\nAnswer: {read_as}"


def split_pairs(
    pairs: list[dict[str, Any]], test_fraction: float, seed: int
) -> tuple[list[dict], list[dict]]:
    """Train and test pairs split by original question, as TRL reads them (`trl_rows`: 3 columns)."""
    train_groups, _ = split_keys(sorted({p["group"] for p in pairs}), test_fraction, seed)
    train_set = set(train_groups)
    train = trl_rows([p for p in pairs if p["group"] in train_set])
    return train, trl_rows([p for p in pairs if p["group"] not in train_set])


# ---- the paper's DPO experiment (A.2, Table 5): split, train, evaluate before and after ----


def split_pair_groups(
    pairs: list[dict[str, Any]], validation_fraction: float, test_fraction: float, seed: int
) -> dict[str, list[dict[str, Any]]]:
    """train / validation / test pairs split by original question (`group`); the test part is
    `split_pairs`'s, validation a share of the rest. `group` stays on the pairs (see `trl_rows`)."""
    groups = sorted({p["group"] for p in pairs})
    train, test = split_keys(groups, test_fraction, seed)
    validation: list[str] = []
    if validation_fraction > 0 and len(train) > 1:
        train, validation = split_keys(train, validation_fraction, seed + 1)
    part_of = {**dict.fromkeys(train, "train"), **dict.fromkeys(validation, "validation")}
    part_of.update(dict.fromkeys(test, "test"))
    parts: dict[str, list[dict[str, Any]]] = {"train": [], "validation": [], "test": []}
    for pair in pairs:
        parts[part_of[pair["group"]]].append(pair)
    return parts


def trl_rows(pairs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The three columns TRL's DPOTrainer reads (prompt, chosen, rejected)."""
    return [{k: p[k] for k in ("prompt", "chosen", "rejected")} for p in pairs]


def heldout_questions(
    dataset: str,
    perturbed: list[dict[str, Any]],
    groups: set[str],
    originals: dict[str, dict[str, Any]] | None = None,
    node_ids: set[str] | None = None,
) -> list[dict[str, Any]]:
    """The perturbed questions of the held-out groups (only those of `node_ids` when given: the release's
    test set is its test pairs' questions), as the trained model is asked them, with their options (a
    benchmark file: stressprobe.cdv.benchmark) and, when `originals` (qid -> question) has it, the
    original question's prompt (Retain on the originals, Table 5)."""
    rows = []
    for p in perturbed:
        if f"{dataset}/{p['qid']}" not in groups or (node_ids is not None and p["node_id"] not in node_ids):
            continue
        row = {
            "group": f"{dataset}/{p['qid']}",
            "node_id": p["node_id"],
            "question": p["question"],
            "choices": p["choices"],
            "prompt": _conversation(victim_messages(p["question"], p["choices"])),
            "n_choices": len(p["choices"]),
            "answer_index": p["answer_index"],
        }
        original = (originals or {}).get(p["qid"])
        if original is not None:
            row["original_prompt"] = _conversation(victim_messages(original["question"], original["choices"]))
        rows.append(row)
    return rows


def before_after(before: list[bool], after: list[bool]) -> dict[str, float | int | None]:
    """Table 5's columns from per-question correctness before and after training.

    retain: share of the questions answered wrong before that are still wrong after (Table 5's caption);
    it cannot exceed (1 - after) / (1 - before), which all three printed Retains do, so two other readings
    are reported beside it: kept_correct (share of those right before still right after) and
    wrong_after_was_wrong (share of the wrong answers after training that were wrong before too).
    """
    n = len(before)
    pairs = list(zip(before, after, strict=True))
    wrong_before = [a for b, a in pairs if not b]
    right_before = [a for b, a in pairs if b]
    wrong_after = [b for b, a in pairs if not a]
    acc_before = sum(before) / n if n else None
    acc_after = sum(after) / n if n else None
    return {
        "n": n,
        "accuracy_before": acc_before,
        "accuracy_after": acc_after,
        "difference": None if n == 0 else acc_after - acc_before,
        "retain": sum(not a for a in wrong_before) / len(wrong_before) if wrong_before else None,
        "kept_correct": sum(right_before) / len(right_before) if right_before else None,
        "wrong_after_was_wrong": sum(not b for b in wrong_after) / len(wrong_after) if wrong_after else None,
    }


def answer_correct(text: str, question: dict[str, Any]) -> bool:
    answer = parse_answer(text, question["n_choices"], None)
    return answer == question["answer_index"]


def generate_answers(
    model: Any,
    tokenizer: Any,
    prompts: list[list[dict[str, str]]],
    max_tokens: int,
    temperature: float,
    batch_size: int = 16,
) -> list[dict[str, Any]]:
    """Answers of a transformers causal LM to chat prompts, `batch_size` at a time on the model's device
    (left-padded, so every answer starts right after its own prompt), at the evaluation temperature (0 =
    greedy); `truncated` when the answer ended without an end-of-sequence token, i.e. used all `max_tokens`."""
    import torch

    model.eval()
    sampling = {"do_sample": True, "temperature": temperature} if temperature > 0 else {"do_sample": False}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    stop = model.generation_config.eos_token_id
    stop = {tokenizer.eos_token_id, *(stop if isinstance(stop, list) else [stop])} - {None}
    side, tokenizer.padding_side = tokenizer.padding_side, "left"
    answers = []
    try:
        for start in range(0, len(prompts), batch_size):
            batch = tokenizer.apply_chat_template(
                prompts[start : start + batch_size],
                add_generation_prompt=True,
                padding=True,
                return_tensors="pt",
                return_dict=True,
            )
            batch = {k: v.to(model.device) for k, v in batch.items()}
            with torch.no_grad():
                output = model.generate(**batch, max_new_tokens=max_tokens, pad_token_id=pad_id, **sampling)
            for row in output[:, batch["input_ids"].shape[1] :].tolist():
                ended = next((i for i, token in enumerate(row) if token in stop), None)
                new = row if ended is None else row[: ended + 1]
                text = tokenizer.decode(new, skip_special_tokens=True)
                answers.append({"text": text, "truncated": ended is None})
    finally:
        tokenizer.padding_side = side
    return answers


def as_template_takes(tokenizer: Any, *parts: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], ...]:
    """The pair and held-out rows as the model's chat template takes them: where it refuses a system turn
    (Gemma-2's), each prompt's system turn folded into its first user turn, for TRL and the answers alike;
    otherwise unchanged (stressprobe.llm.system_turns)."""
    name = str(getattr(tokenizer, "name_or_path", "") or "the DPO model")
    render = lambda m: tokenizer.apply_chat_template(m, tokenize=False, add_generation_prompt=True)  # noqa: E731
    if not system_turns.folds(name, "auto", render):
        return parts
    keys = ("prompt", "original_prompt")
    return tuple(
        [{k: system_turns.fold_system_turns(v) if k in keys else v for k, v in row.items()} for row in rows]
        for rows in parts
    )


def load_base_model(name: str, threads: int) -> tuple[Any, Any]:
    """The DPO base model and its tokenizer, on the GPU when the job has one (generation before training
    runs there too; the trainer keeps the model where it is), with `threads` CPU threads for torch."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return AutoModelForCausalLM.from_pretrained(name).to(device), AutoTokenizer.from_pretrained(name)


def dpo_config(settings: dict[str, Any], output_dir: str, seed: int, **overrides: Any) -> Any:
    """TRL's DPOConfig from `cdv.dpo` (lr, epochs, beta, loss type, batch size, length). On a host without
    a GPU it trains on the CPU (TRL's bf16 default otherwise refuses to start there)."""
    import torch
    from trl import DPOConfig

    arguments = {
        "use_cpu": not torch.cuda.is_available(),
        "output_dir": output_dir,
        "learning_rate": settings["learning_rate"],
        "num_train_epochs": settings["epochs"],
        "beta": settings["beta"],
        "loss_type": [settings["loss_type"]],  # TRL 1.x takes a list of losses
        "per_device_train_batch_size": settings["batch_size"],
        "per_device_eval_batch_size": settings["batch_size"],
        "max_length": settings["max_length"],
        "seed": seed,
        "report_to": [],
        "save_strategy": "no",
        **overrides,
    }
    return DPOConfig(**arguments)


def _answer_all(model: Any, tokenizer: Any, heldout: list[dict[str, Any]], settings: dict[str, Any]):
    """Answers to the held-out perturbed questions and, where known, to their originals: each original
    asked once (by `group`), however many of its perturbed questions are held out."""
    ask = {
        "max_tokens": settings["eval_max_tokens"],
        "temperature": settings["eval_temperature"],
        "batch_size": settings["eval_batch_size"],
    }
    perturbed = generate_answers(model, tokenizer, [q["prompt"] for q in heldout], **ask)
    original_of = {q["group"]: q["original_prompt"] for q in heldout if "original_prompt" in q}
    answers = generate_answers(model, tokenizer, list(original_of.values()), **ask)
    by_group = dict(zip(original_of, answers, strict=True))
    return perturbed, {q["node_id"]: by_group[q["group"]] for q in heldout if q["group"] in by_group}


def _evaluation(heldout, before, after, originals_before, originals_after) -> dict[str, Any]:
    """Table 5's row on the perturbed questions, Retain on the originals, and the truncation counts."""
    correct_before = [answer_correct(a["text"], q) for a, q in zip(before, heldout, strict=True)]
    correct_after = [answer_correct(a["text"], q) for a, q in zip(after, heldout, strict=True)]
    evaluation = before_after(correct_before, correct_after)
    known = [q for q in heldout if q["node_id"] in originals_before]
    on_originals = before_after(
        [answer_correct(originals_before[q["node_id"]]["text"], q) for q in known],
        [answer_correct(originals_after[q["node_id"]]["text"], q) for q in known],
    )
    evaluation["n_originals"] = on_originals["n"]
    evaluation["retain_original"] = on_originals["retain"]
    evaluation["truncated_before"] = sum(a["truncated"] for a in before)
    evaluation["truncated_after"] = sum(a["truncated"] for a in after)
    # Table 5's column beside the comparison models' (stressprobe.scoring): generating in process answers
    # every question or stops the job, so none of the trained model's answers is missing.
    evaluation[UNANSWERED] = 0
    return evaluation


def train_and_evaluate(
    model: Any,
    tokenizer: Any,
    train: list[dict[str, Any]],
    validation: list[dict[str, Any]],
    heldout: list[dict[str, Any]],
    settings: dict[str, Any],
    output_dir: str,
    seed: int,
    **overrides: Any,
) -> dict[str, Any]:
    """Answer the held-out questions, train with DPO, answer them again: Table 5's row and the trainer's log.

    `overrides` go to DPOConfig (tests: max_steps, use_cpu)."""
    from datasets import Dataset
    from trl import DPOTrainer

    train, validation, heldout = as_template_takes(tokenizer, train, validation, heldout)
    before, originals_before = _answer_all(model, tokenizer, heldout, settings)
    peft_config = None
    if settings.get("lora_rank"):
        from peft import LoraConfig

        peft_config = LoraConfig(r=settings["lora_rank"], task_type="CAUSAL_LM")
    # The frozen reference is a copy of the starting model (TRL would reload it from the model's hub id,
    # which a model built or modified in memory does not have); with LoRA the adapter-free model is it.
    ref_model = None if peft_config is not None else copy.deepcopy(model)
    trainer = DPOTrainer(
        model=model,
        ref_model=ref_model,
        args=dpo_config(settings, output_dir, seed, **overrides),
        train_dataset=Dataset.from_list(trl_rows(train)),
        eval_dataset=Dataset.from_list(trl_rows(validation)) if validation else None,
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    trainer.train()
    after, originals_after = _answer_all(trainer.model, tokenizer, heldout, settings)
    return {
        "evaluation": _evaluation(heldout, before, after, originals_before, originals_after),
        "train_pairs": len(train),
        "validation_pairs": len(validation),
        "log_history": trainer.state.log_history,
        "answers": [
            {"node_id": q["node_id"], "before": b["text"], "after": a["text"]}
            for q, b, a in zip(heldout, before, after, strict=True)
        ],
        "trainer": trainer,
    }
