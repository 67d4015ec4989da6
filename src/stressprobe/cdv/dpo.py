"""DPO preference pairs in the JSONL format TRL's DPOTrainer reads (conversational prompt/chosen/rejected).

For each perturbed question: prompt = the victim prompt of the perturbed question; chosen = a response that
answers it correctly (an evaluated model's, else one on the original question, else a short templated
answer); rejected = a wrong response to it (the victim's greedy answer from the search, else an evaluated
model's). Pairs are split by original question so that no question is in both train and test.
"""

from __future__ import annotations

from typing import Any

from stressprobe.cdv.classifier import split_keys
from stressprobe.cdv.prompts import letter, victim_messages


def _conversation(messages: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    return [{"role": role, "content": content} for role, content in messages]


def preference_pairs(
    dataset: str, perturbed: list[dict[str, Any]], evals: list[dict[str, Any]], greedy_raw: dict[str, str]
) -> list[dict[str, Any]]:
    """One pair per perturbed question that has a wrong response; `group` = dataset/qid for the split."""
    pairs = []
    for p in perturbed:
        on_node = [e for e in evals if e["node_id"] == p["node_id"] and e["condition"] == "perturbed"]
        on_original = [
            e for e in evals if e["qid"] == p["qid"] and e["condition"] == "original" and e["correct"]
        ]
        correct = [e["raw"] for e in on_node if e["correct"]] + [e["raw"] for e in on_original]
        chosen = (
            correct[0]
            if correct
            else (f"The added background is irrelevant to the question. Answer: {letter(p['answer_index'])}")
        )
        wrong = [greedy_raw[p["node_id"]]] if greedy_raw.get(p["node_id"]) else []
        wrong += [e["raw"] for e in on_node if not e["correct"] and e["raw"]]
        if not wrong:
            continue
        pairs.append(
            {
                "group": f"{dataset}/{p['qid']}",
                "prompt": _conversation(victim_messages(p["question"], p["choices"])),
                "chosen": [{"role": "assistant", "content": chosen}],
                "rejected": [{"role": "assistant", "content": wrong[0]}],
            }
        )
    return pairs


def split_pairs(
    pairs: list[dict[str, Any]], test_fraction: float, seed: int
) -> tuple[list[dict], list[dict]]:
    """Train and test pairs split by original question; the `group` key is dropped (TRL sees 3 columns)."""
    train_groups, _ = split_keys(sorted({p["group"] for p in pairs}), test_fraction, seed)
    train_set = set(train_groups)
    strip = [({k: v for k, v in p.items() if k != "group"}, p["group"] in train_set) for p in pairs]
    return [p for p, is_train in strip if is_train], [p for p, is_train in strip if not is_train]
