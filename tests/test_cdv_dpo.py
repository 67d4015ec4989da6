"""DPO as in the paper (A.2, Table 5): pairs split by original question, TRL training, and the held-out
evaluation before and after. The training path runs on CPU with a tiny randomly initialised Llama and a
word-level tokenizer built here (no download), for a few steps."""

from __future__ import annotations

import re

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


def _names(text, question):
    """Whether an answer's last 'Answer: X' line names the right option (written here, not the parser)."""
    found = re.findall(r"Answer:\s*([A-Z])\b", text)
    return bool(found) and ord(found[-1]) - ord("A") == question["answer_index"]


def test_retain_on_the_originals_is_the_share_still_wrong_after_of_those_wrong_before():
    from stressprobe.cdv.dpo import _evaluation

    heldout = [{"node_id": f"n{i}", "n_choices": 4, "answer_index": 1} for i in range(5)]
    right, wrong, cut = (
        {"text": "Answer: B", "truncated": False},
        {"text": "Answer: C", "truncated": False},
        {"text": "So", "truncated": True},
    )
    before = [right, wrong, wrong, cut, right]
    after = [right, right, wrong, wrong, wrong]
    # Originals of n0..n3 only: before right, wrong, wrong, wrong; after wrong, right, wrong, right.
    originals_before = {"n0": right, "n1": wrong, "n2": wrong, "n3": cut}
    originals_after = {"n0": wrong, "n1": right, "n2": wrong, "n3": right}
    evaluation = _evaluation(heldout, before, after, originals_before, originals_after)
    # By hand: perturbed 2/5 right before, 2/5 after; of the 3 wrong before (n1, n2, n3) n2 and n3 stay
    # wrong (2/3); on the originals, of the 3 wrong before (n1, n2, n3) only n2 stays wrong: 1/3.
    assert (evaluation["accuracy_before"], evaluation["accuracy_after"]) == (2 / 5, 2 / 5)
    assert evaluation["n_originals"] == 4 and evaluation["retain_original"] == 1 / 3
    assert evaluation["retain"] == 2 / 3
    assert (evaluation["truncated_before"], evaluation["truncated_after"]) == (1, 0)


def toy_settings(**chosen):
    """`cdv.dpo` at toy scale: the keys `train_and_evaluate` reads, with a test's own choices."""
    return {
        "beta": 0.1,
        "loss_type": "sigmoid",
        "batch_size": 2,
        "max_length": 256,
        "eval_batch_size": 3,
        **chosen,
    }


def train_three_steps(model, tokenizer, parts, heldout, settings, tmp_path):
    """Three DPO steps on the CPU, then the held-out questions before and after."""
    from stressprobe.cdv.dpo import train_and_evaluate

    return train_and_evaluate(
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


@pytest.mark.slow
def test_dpo_trains_a_toy_model_and_evaluates_the_heldout_split_before_and_after(tmp_path):
    pytest.importorskip("trl", reason="the `dpo` extra (trl, datasets) is not installed")
    import torch

    perturbed, pairs = _pairs(10)
    parts = split_pair_groups(pairs, 0.1, 0.2, 0)
    originals = {p["qid"]: make_item(p["qid"]) for p in perturbed}
    heldout = heldout_questions("toy", perturbed, {p["group"] for p in parts["test"]}, originals)
    assert all("original_prompt" in q and q["choices"] for q in heldout)
    assert heldout and len(heldout) == len(parts["test"])
    texts = [m["content"] for p in pairs for key in ("prompt", "chosen", "rejected") for m in p[key]]
    model, tokenizer = toy_model_and_tokenizer(texts)
    weights_before = {k: v.clone() for k, v in model.state_dict().items()}
    settings = toy_settings(
        learning_rate=2e-4, epochs=5, lora_rank=None, eval_max_tokens=1, eval_temperature=0.001
    )
    result = train_three_steps(model, tokenizer, parts, heldout, settings, tmp_path)
    evaluation = result["evaluation"]
    assert evaluation["n"] == len(heldout)
    # Recomputed from the answers: the share whose last "Answer: X" line names the right letter.
    for when in ("before", "after"):
        right = [_names(a[when], q) for a, q in zip(result["answers"], heldout, strict=True)]
        assert evaluation[f"accuracy_{when}"] == sum(right) / len(heldout)
    assert evaluation["difference"] == pytest.approx(
        evaluation["accuracy_after"] - evaluation["accuracy_before"]
    )
    # Retain on the originals of the same questions, and every cut-off answer counted
    assert evaluation["n_originals"] == len(heldout)
    # At one token an answer is cut off exactly when that token is not the end of sequence, i.e. when its
    # text (special tokens skipped) is not empty.
    for when in ("before", "after"):
        assert evaluation[f"truncated_{when}"] == sum(bool(a[when]) for a in result["answers"])
    losses = [entry["loss"] for entry in result["log_history"] if "loss" in entry]
    assert len(losses) == 3 and all(loss == loss for loss in losses)  # three steps, finite losses
    trained = result["trainer"].model.state_dict()
    assert any(not torch.equal(weights_before[k], trained[k]) for k in weights_before)
    assert len(result["answers"]) == len(heldout)


@pytest.mark.slow
def test_lora_dpo_trains_only_the_adapter_of_a_toy_model(tmp_path):
    # cdv.dpo.lora_rank set (config/paper.yaml: 8): peft's LoRA adapter is trained, the base weights stay.
    pytest.importorskip("peft", reason="the `dpo` extra (peft, trl) is not installed")
    pytest.importorskip("trl", reason="the `dpo` extra (peft, trl) is not installed")
    import torch

    perturbed, pairs = _pairs(10)
    parts = split_pair_groups(pairs, 0.1, 0.2, 0)
    heldout = heldout_questions("toy", perturbed, {p["group"] for p in parts["test"]})
    texts = [m["content"] for p in pairs for key in ("prompt", "chosen", "rejected") for m in p[key]]
    model, tokenizer = toy_model_and_tokenizer(texts)
    base_before = {k: v.clone() for k, v in model.state_dict().items()}
    settings = toy_settings(
        learning_rate=1e-2, epochs=1, lora_rank=4, eval_max_tokens=4, eval_temperature=0.0
    )
    result = train_three_steps(model, tokenizer, parts, heldout, settings, tmp_path)
    trained = result["trainer"].model
    adapter = {k: v for k, v in trained.state_dict().items() if "lora_" in k}
    assert adapter and all(".lora_A.default." in k or ".lora_B.default." in k for k in adapter)
    # LoRA's B starts at zero; three steps at lr 1e-2 move it.
    assert any(v.abs().sum() > 0 for k, v in adapter.items() if "lora_B" in k)
    base_after = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v
        for k, v in trained.state_dict().items()
        if "lora_" not in k
    }
    assert set(base_after) == set(base_before)
    assert all(torch.equal(base_before[k], base_after[k]) for k in base_before)
    evaluation = result["evaluation"]
    for when in ("before", "after"):
        right = [_names(a[when], q) for a, q in zip(result["answers"], heldout, strict=True)]
        assert evaluation[f"accuracy_{when}"] == sum(right) / len(heldout)
    losses = [entry["loss"] for entry in result["log_history"] if "loss" in entry]
    assert len(losses) == 3 and all(loss == loss for loss in losses)


def test_responses_read_by_a_second_call_end_with_the_answer_line_the_scoring_reads():
    item = make_item("q1")
    right, wrong = "ABCD"[item["answer_index"]], "ABCD"[(item["answer_index"] + 1) % 4]
    p = {**item, "node_id": "q1:1", "question": "Ctx. " + item["question"]}
    evals = [
        {"node_id": "q1:1", "qid": "q1", "condition": "perturbed", "correct": True, "answer": right,
         "raw": f"So it is {item['choices'][item['answer_index']]!r}.  "},
        {"node_id": "q1:1", "qid": "q1", "condition": "perturbed", "correct": False, "answer": wrong,
         "raw": "It must be the other one."},
    ]  # fmt: skip
    (pair,) = preference_pairs("toy", [p], evals, {})
    chosen, rejected = pair["chosen"][0]["content"], pair["rejected"][0]["content"]
    assert chosen == f"So it is {item['choices'][item['answer_index']]!r}.\nAnswer: {right}"
    assert rejected == f"It must be the other one.\nAnswer: {wrong}"
    assert _names(chosen, item) and not _names(rejected, item)
    # Verbatim with the switch off; a response with its own line, or an unread one, is never changed.
    (verbatim,) = preference_pairs("toy", [p], evals, {}, answer_line=False)
    assert verbatim["chosen"][0]["content"] == evals[0]["raw"]
    own = [{**evals[0], "raw": f"Answer: {right}"}, {**evals[1], "answer": None}]
    (kept,) = preference_pairs("toy", [p], own, {})
    assert kept["chosen"][0]["content"] == f"Answer: {right}"
    assert kept["rejected"][0]["content"] == evals[1]["raw"]


def test_batched_greedy_answers_are_those_of_one_question_at_a_time():
    pytest.importorskip("transformers")
    import torch

    from stressprobe.cdv.dpo import generate_answers

    perturbed, pairs = _pairs(6)
    prompts = [p["prompt"] for p in pairs]
    # Prompts of different lengths, so every batch pads some of them.
    prompts = [
        p if i % 2 else [*p, {"role": "user", "content": "one more line " * i}] for i, p in enumerate(prompts)
    ]
    assert len({len(str(p)) for p in prompts}) > 1
    texts = [m["content"] for p in prompts for m in p] + [m["content"] for p in pairs for m in p["chosen"]]
    model, tokenizer = toy_model_and_tokenizer(texts)
    max_tokens = 6
    expected = []
    for prompt in prompts:
        ids = tokenizer.apply_chat_template(
            prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        with torch.no_grad():
            out = model.generate(
                **ids, max_new_tokens=max_tokens, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )
        new = out[0, ids["input_ids"].shape[1] :].tolist()
        expected.append(
            {
                "text": tokenizer.decode(new, skip_special_tokens=True),
                "truncated": tokenizer.eos_token_id not in new,
            }
        )
    lengths = {
        len(tokenizer.apply_chat_template(p, add_generation_prompt=True, return_dict=True)["input_ids"])
        for p in prompts
    }
    assert len(lengths) > 1  # the batches are padded
    side = tokenizer.padding_side
    batched = generate_answers(model, tokenizer, prompts, max_tokens, 0, batch_size=4)
    assert batched == expected
    assert tokenizer.padding_side == side  # the tokenizer the trainer gets is left as it was
    assert generate_answers(model, tokenizer, prompts, max_tokens, 0, batch_size=1) == expected


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


# ---- the release's pairs (cdv.dpo.pairs: release; the authors' train/dpo_data.py) ----

# Three evaluators' outcomes on four perturbed questions, as the authors' eval.py would have recorded them:
# True / False = its `result`, None = no record (a failed call, or an extraction reply that is no JSON,
# which eval.py:50-51 drops). Each entry: (the release's outcome, the project's record fields).
_OUTCOMES = {
    "q1:1": [(False, "ok"), (True, "ok"), (False, "ok")],
    "q1:2": [(True, "ok"), (True, "ok"), (True, "ok")],  # nobody wrong: no pair
    "q2:1": [(None, "no json"), (False, "ok"), (True, "ok")],  # A's reply unread and dropped
    "q3:0": [(None, "error"), (True, "ok"), (False, "off option")],  # C's JSON names no option: wrong
}


def _release_input():
    items = {"q1": make_item("q1"), "q2": make_item("q2"), "q3": make_item("q3")}
    perturbed = [
        {
            **items[node.split(":")[0]],
            "node_id": node,
            "question": f"Ctx {node}. " + items[node[:2]]["question"],
        }
        for node in _OUTCOMES
    ]
    evals = [[], [], []]
    for p in perturbed:
        for e, (result, kind) in enumerate(_OUTCOMES[p["node_id"]]):
            right = "ABCD"[p["answer_index"]]
            answer = {True: right, False: "C"}.get(result) if kind == "ok" else None
            record = {
                "qid": p["qid"],
                "node_id": p["node_id"],
                "condition": "perturbed",
                "answer": answer,
                "correct": result is True,
                "status": {"ok": "ok", "error": "error"}.get(kind, "unparsed"),
                "raw": f"evaluator {e} on {p['node_id']}",
                "extract_raw": {
                    "no json": "I cannot tell.",
                    "off option": '{"final_answer": "none of them"}',
                }.get(kind, f'{{"final_answer": "{p["choices"][0] if result else p["choices"][2]}"}}'),
            }
            evals[e].append(record)
    return perturbed, evals


def _release_pairs_by_hand(perturbed):
    """train/dpo_data.py:37-55 written out on the release's outcomes: the first evaluator whose result is
    False gives the rejected answer, the first whose result is True the chosen one."""
    expected = {}
    for p in perturbed:
        outcomes = [result for result, _ in _OUTCOMES[p["node_id"]]]
        wrong = next((e for e, result in enumerate(outcomes) if result is False), None)
        right = next((e for e, result in enumerate(outcomes) if result is True), None)
        if wrong is not None and right is not None:
            expected[p["node_id"]] = (
                f"evaluator {right} on {p['node_id']}",
                f"evaluator {wrong} on {p['node_id']}",
            )
    return expected


def test_release_pairs_are_the_first_right_and_first_wrong_evaluators_answers():
    from stressprobe.cdv.dpo import release_pairs
    from stressprobe.cdv.prompts import victim_messages

    perturbed, evals = _release_input()
    pairs = release_pairs("toy", perturbed, evals, answer_line=False)
    expected = _release_pairs_by_hand(perturbed)
    assert expected == {"q1:1": ("evaluator 1 on q1:1", "evaluator 0 on q1:1"),
                        "q2:1": ("evaluator 2 on q2:1", "evaluator 1 on q2:1"),
                        "q3:0": ("evaluator 1 on q3:0", "evaluator 2 on q3:0")}  # fmt: skip
    got = {p["node_id"]: (p["chosen"][0]["content"], p["rejected"][0]["content"]) for p in pairs}
    assert got == expected
    by_node = {p["node_id"]: p for p in perturbed}
    for pair in pairs:
        p = by_node[pair["node_id"]]
        assert pair["group"] == f"toy/{p['qid']}"
        asked = [{"role": r, "content": c} for r, c in victim_messages(p["question"], p["choices"])]
        assert pair["prompt"] == asked  # the held-out questions' prompt, read by its answer line
    # With cdv.dpo.answer_line a read answer ends with its option's line; the off-option one stays as it is.
    lined = {p["node_id"]: p for p in release_pairs("toy", perturbed, evals)}
    assert lined["q1:1"]["chosen"][0]["content"] == "evaluator 1 on q1:1\nAnswer: A"
    assert lined["q1:1"]["rejected"][0]["content"] == "evaluator 0 on q1:1\nAnswer: C"
    assert lined["q3:0"]["rejected"][0]["content"] == "evaluator 2 on q3:0"
    # The order of the evaluators decides: in the order C, B, A, q1:1's rejected answer is C's.
    reordered = {
        p["node_id"]: p for p in release_pairs("toy", perturbed, [evals[2], evals[1], evals[0]], False)
    }
    assert reordered["q1:1"]["chosen"][0]["content"] == "evaluator 1 on q1:1"
    assert reordered["q1:1"]["rejected"][0]["content"] == "evaluator 2 on q1:1"


def test_the_release_test_set_is_its_test_pairs_questions():
    from stressprobe.cdv.dpo import release_pairs

    perturbed, evals = _release_input()
    pairs = release_pairs("toy", perturbed, evals)
    groups = {"toy/q1", "toy/q2", "toy/q3"}
    every = heldout_questions("toy", perturbed, groups)
    paired = heldout_questions("toy", perturbed, groups, node_ids={p["node_id"] for p in pairs})
    assert [q["node_id"] for q in every] == ["q1:1", "q1:2", "q2:1", "q3:0"]
    assert [q["node_id"] for q in paired] == ["q1:1", "q2:1", "q3:0"]


def test_each_heldout_original_is_asked_once_however_many_perturbed_rows_it_has(monkeypatch):
    from stressprobe.cdv import dpo

    perturbed, _ = _release_input()  # q1 has two perturbed questions, q2 and q3 one each
    originals = {q: make_item(q) for q in ("q1", "q2", "q3")}
    heldout = heldout_questions("toy", perturbed, {"toy/q1", "toy/q2", "toy/q3"}, originals)
    asked = []

    def generate(model, tokenizer, prompts, **ask):
        asked.extend(prompts)
        return [{"text": p[-1]["content"][:20], "truncated": False} for p in prompts]

    monkeypatch.setattr(dpo, "generate_answers", generate)
    settings = {"eval_max_tokens": 4, "eval_temperature": 0.0, "eval_batch_size": 2}
    _, on_originals = dpo._answer_all(None, None, heldout, settings)
    original_prompts = [q["original_prompt"] for q in heldout]
    # 4 perturbed questions and 3 distinct originals: 7 prompts, not 8
    assert len(asked) == 4 + 3 and sum(p in asked for p in original_prompts) == 4
    assert [asked.count(p) for p in original_prompts] == [1, 1, 1, 1]
    assert on_originals["q1:1"] == on_originals["q1:2"] and set(on_originals) == {
        q["node_id"] for q in heldout
    }
