"""CDV prompts and the parsing of replies without a second model call."""

import pytest

from stressprobe.cdv.prompts import (
    clean_context,
    distraction_side,
    format_question,
    parse_answer,
    parse_yes_no,
    proxy_messages,
    semantic_messages,
    victim_messages,
    with_context,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Step 1... so it is B.\nAnswer: C", 2),
        ("**Answer:** (B)", 1),
        ("The answer is D", 3),
        ("Answer: A ... wait. Answer: B", 1),
        ("answer: B", 1),
        ("Let me answer a question first", None),
        ("Answer: E", None),  # only four choices
        ("I think it is B", None),
        ("", None),
        ("Answer: Apple", None),
    ],
)
def test_parse_answer(text, expected):
    assert parse_answer(text, 4) == expected


def test_a_prefilled_answer_is_parsed_with_its_prefix():
    assert parse_answer(" B", 4, prefill="Answer:") == 1
    assert parse_answer(" B", 4) is None
    messages = victim_messages("Q?", ["x", "y"], prefill="Answer:")
    assert messages[:-1] == victim_messages("Q?", ["x", "y"]) and messages[-1] == ("assistant", "Answer:")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Yes", "yes"),
        ("no.", "no"),
        ("**No**, because", "no"),
        ("Yes, but no", "yes"),
        ("I think the answer is yes.", "yes"),
        ("Maybe", None),
        ("It could be yes or no", None),
        ("", None),
        ("Nothing changes", None),
    ],
)
def test_parse_yes_no(text, expected):
    assert parse_yes_no(text) == expected


def test_clean_context_rejects_empty_and_off_format():
    assert clean_context("  ") is None
    assert clean_context("Context: Rivers are long.") == "Rivers are long."
    assert clean_context("A. one\nB. two") is None
    assert clean_context("Some text. Answer: B") is None
    assert clean_context('"Quoted background."') == "Quoted background."


def test_prompts_keep_question_and_choices():
    choices = ["red", "blue", "green"]
    victim = victim_messages("Sky colour?", choices)
    assert victim[-1][1] == format_question("Sky colour?", choices) and "Answer: <letter>" in victim[0][1]
    assert "Focus on the core question" in victim_messages("Q", choices, mitigation=True)[0][1]
    proxy = proxy_messages("Sky colour?", choices, 1, 2)[-1][1]
    assert "option C (green)" in proxy and "B (blue) is correct" in proxy
    semantic = semantic_messages("Sky colour?", "Ctx.\n\nSky colour?", choices, 1)[-1][1]
    assert (
        "Correct answer: blue" in semantic and "change its correct answer" in semantic and "Ctx." in semantic
    )


def test_with_context_keeps_original_verbatim_at_the_end():
    assert with_context(["one.", "two."], "Q?") == "one.\n\ntwo.\n\nQ?"
    assert with_context([], "Q?") == "Q?"


def test_contexts_placed_after_follow_the_question_in_the_order_they_were_added():
    sides = ["before", "after", "before", "after"]
    assert with_context(["b1.", "a1.", "b2.", "a2."], "Q?", sides) == "b1.\n\nb2.\n\nQ?\n\na1.\n\na2."


def test_random_sides_are_drawn_from_the_seed_and_the_distraction_and_stay_put():
    texts = [f"Distraction number {i}." for i in range(64)]
    drawn = [distraction_side("random", 42, "Q?", t) for t in texts]
    # Both sides, in roughly the authors' even proportion (random.sample of two).
    assert set(drawn) == {"before", "after"} and 16 <= drawn.count("after") <= 48
    assert drawn == [distraction_side("random", 42, "Q?", t) for t in texts]  # a rerun draws the same
    assert drawn != [distraction_side("random", 7, "Q?", t) for t in texts]  # the seed matters
    assert drawn != [distraction_side("random", 42, "Other?", t) for t in texts]  # and the question
    assert {distraction_side(side, 42, "Q?", t) for side in ("before", "after") for t in texts} == {
        "before",
        "after",
    }
    assert all(distraction_side("after", 42, "Q?", t) == "after" for t in texts)
