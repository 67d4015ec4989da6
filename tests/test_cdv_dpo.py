"""DPO as in the paper (A.2, Table 5): pairs split by original question, TRL training, and the held-out
evaluation before and after. The training path runs on CPU with a tiny randomly initialised Llama and a
word-level tokenizer built here (no download), for a few steps."""

from __future__ import annotations

import pytest

from stressprobe.cdv.dpo import (
    before_after,
    heldout_questions,
    preference_pairs,
    split_pair_groups,
    trl_rows,
)
from stressprobe.cdv.search import (
    SearchSettings,
    perturbed_records,
    run_search,
    search_records,
    wrong_answer,
)
from tests.support.cdv_scripted import ScriptedModel, make_item
from tests.support.toy_hf import toy_model_and_tokenizer

SETTINGS = SearchSettings(samples=3, max_expansions=2, max_candidates=None)


def _pairs(n_questions):
    model = ScriptedModel(correct=lambda contexts, q: 0 if contexts else 3)
    items = [make_item(f"q{i:02d}") for i in range(n_questions)]
    states = run_search(items, {"proxy": model, "semantic": model, "victim": model}, SETTINGS)
    records = search_records(states)
    perturbed = perturbed_records(states)
    # A success's wrong answer, as the DPO export takes it (a sampled one: the greedy audit is off).
    greedy = {r["node_id"]: wrong_answer(r) for r in records if r["status"] == "success"}
    return perturbed, preference_pairs("toy", perturbed, [], greedy)


def test_pairs_split_80_10_20_by_original_question():
    _, pairs = _pairs(50)
    parts = split_pair_groups(pairs, 0.1, 0.2, 0)
    groups = {name: {p["group"] for p in part} for name, part in parts.items()}
    assert (len(groups["train"]), len(groups["validation"]), len(groups["test"])) == (36, 4, 10)
    assert not groups["train"] & groups["test"] and not groups["validation"] & (
        groups["train"] | groups["test"]
    )
    assert sum(map(len, parts.values())) == len(pairs)
    assert all(set(row) == {"prompt", "chosen", "rejected"} for row in trl_rows(parts["train"]))


def test_before_after_difference_and_retain():
    before = [True, True, False, False, False]
    after = [True, False, True, False, False]
    result = before_after(before, after)
    assert result["accuracy_before"] == pytest.approx(0.4) and result["accuracy_after"] == pytest.approx(0.4)
    assert result["difference"] == pytest.approx(0.0)
    assert result["retain"] == pytest.approx(2 / 3)  # of 3 wrong before, 2 still wrong
    assert result["kept_correct"] == pytest.approx(0.5)
    assert result["wrong_after_was_wrong"] == pytest.approx(2 / 3)  # of 3 wrong after, 2 were wrong before
    assert before_after([], [])["accuracy_before"] is None


@pytest.mark.slow
def test_dpo_trains_a_toy_model_and_evaluates_the_heldout_split_before_and_after(tmp_path):
    pytest.importorskip("trl", reason="the `dpo` extra (trl, datasets) is not installed")
    import torch

    from stressprobe.cdv.dpo import train_and_evaluate

    perturbed, pairs = _pairs(10)
    parts = split_pair_groups(pairs, 0.1, 0.2, 0)
    originals = {p["qid"]: make_item(p["qid"]) for p in perturbed}
    heldout = heldout_questions("toy", perturbed, {p["group"] for p in parts["test"]}, originals)
    assert all("original_prompt" in q and q["choices"] for q in heldout)
    assert heldout and len(heldout) == len(parts["test"])
    texts = [m["content"] for p in pairs for key in ("prompt", "chosen", "rejected") for m in p[key]]
    model, tokenizer = toy_model_and_tokenizer(texts)
    weights_before = {k: v.clone() for k, v in model.state_dict().items()}
    settings = {
        "learning_rate": 2e-4,
        "epochs": 5,
        "beta": 0.1,
        "loss_type": "sigmoid",
        "batch_size": 2,
        "max_length": 256,
        "lora_rank": None,
        "eval_max_tokens": 4,
        "eval_temperature": 0.001,
    }
    result = train_and_evaluate(
        model,
        tokenizer,
        parts["train"],
        parts["validation"],
        heldout,
        settings,
        str(tmp_path / "out"),
        0,
        max_steps=3,
        use_cpu=True,
        logging_steps=1,
    )
    evaluation = result["evaluation"]
    assert evaluation["n"] == len(heldout)
    assert 0 <= evaluation["accuracy_before"] <= 1 and 0 <= evaluation["accuracy_after"] <= 1
    assert evaluation["difference"] == pytest.approx(
        evaluation["accuracy_after"] - evaluation["accuracy_before"]
    )
    # Retain on the originals of the same questions, and every cut-off answer counted
    assert evaluation["n_originals"] == len(heldout)
    assert evaluation["truncated_before"] + evaluation["truncated_after"] > 0  # 4 tokens cut most answers
    losses = [entry["loss"] for entry in result["log_history"] if "loss" in entry]
    assert len(losses) == 3 and all(loss == loss for loss in losses)  # three steps, finite losses
    trained = result["trainer"].model.state_dict()
    assert any(not torch.equal(weights_before[k], trained[k]) for k in weights_before)
    assert len(result["answers"]) == len(heldout)


def test_the_papers_dpo_settings_make_a_trainer_config_on_a_host_without_a_gpu(tmp_path):
    """config/paper.yaml's cdv.dpo as the job gets it: TRL's bf16 default refused to start without a GPU
    (found by the rehearsal, tests/test_rehearsal.py)."""
    import torch
    import yaml

    from stressprobe.cdv.dpo import dpo_config
    from stressprobe.config import validate_config
    from tests.support.helpers import ROOT

    config = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text(encoding="utf-8"))
    settings = validate_config(config, ROOT / "workflow" / "schemas" / "config.schema.yaml")["cdv"]["dpo"]
    args = dpo_config(settings, str(tmp_path), 42)
    assert args.use_cpu is (not torch.cuda.is_available())
    assert args.learning_rate == 2.0e-4 and args.num_train_epochs == 5 and args.loss_type == ["sigmoid"]
