from pathlib import Path

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.persona.prompts import (
    judge_prompt,
    load_summary_template,
    load_template,
    parse_label,
    persona_phrase,
    render,
)

ROOT = Path(__file__).resolve().parents[1]
UMBRELA = ROOT / "resources" / "prompts" / "umbrela.txt"
SUMMARY = ROOT / "resources" / "prompts" / "summary.txt"


@pytest.mark.parametrize(
    ("text", "label"),
    [
        ("##final score: 2", 2),
        ("##final score:3", 3),
        ("## Final Score: 0", 0),
        ("FINAL SCORE: 1", 1),
        ("**Final score:** 2", 2),
        ("##final score: **3**", 3),
        ("Final score = 1", 1),
        ("final score is 2.", 2),
        ("The final score is: 3", 3),
        ("Final score (O): 2", 2),
        ("Final score - 0", 0),
        ("final_score: 1", 1),
        ("M: 2\nT: 1\n##final score: 2", 2),
        ("##final score: 2\n##final score: 2", 2),  # repeated but consistent
        ("Final score: 2/3", 2),
        ("2", 2),
        (" **3** ", 3),
        ("1.", 1),
        ("0\n\nThe passage has nothing to do with the query.", 0),
        ("The final score of 3 is an integer value only.", 3),
    ],
)
def test_parse_label_accepts_the_format_and_its_variants(text, label):
    assert parse_label(text) == label


@pytest.mark.parametrize(
    "text",
    [
        "",
        "The passage is relevant.",
        "##final score: 4",  # outside the scale
        "final score: 10",
        "final score: 2.5",
        "final score: -1",
        "##final score: <0-3>",  # the format echoed back
        "##final score: 1\n##final score: 3",  # contradicting itself
        "score: 2",  # may be the M or T aspect score
        "I would say 2 because it mentions the topic",  # a digit inside prose
        "Relevance:\n2\nReasoning follows",
        "The final score of 0-3 is not possible, as the passage does",  # the scale, not a grade
        "final score: 0 to 3",
        "0 = the passage has nothing to do with the query, 1 = the",
        "1. The passage has nothing to do with the query.\n2. The",
        "1.\n2.\n",
    ],
)
def test_parse_label_refuses_anything_else_and_never_defaults_to_zero(text):
    assert parse_label(text) is None


def test_bundled_templates_have_their_placeholders_and_the_output_format():
    umbrela = load_template(UMBRELA, required=("query", "passage"))
    assert "##final score:" in umbrela
    for grade in "0123":
        assert f"\n{grade} = " in umbrela  # the scale's definitions
    assert "(M)" in umbrela and "(T)" in umbrela and "(O)" in umbrela
    load_template(SUMMARY, required=("passage",))


def test_load_template_names_the_missing_placeholder(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text("Query: {query}\n", encoding="utf-8")
    with pytest.raises(StressprobeError, match=r"t\.txt.*\{passage\}"):
        load_template(path, required=("query", "passage"))
    with pytest.raises(StressprobeError, match="not found"):
        load_template(tmp_path / "missing.txt", required=())


def test_render_fills_each_placeholder_once_and_leaves_other_braces():
    template = "Q: {query} P: {passage} {other} {{x}}"
    out = render(template, query="what is {passage}?", passage="text with {query}")
    assert out == "Q: what is {passage}? P: text with {query} {other} {{x}}"


def test_persona_prefix_is_the_only_difference_between_conditions():
    template = UMBRELA.read_text(encoding="utf-8")
    plain = judge_prompt(template, "q", "p")
    assert "You are acting as" not in plain
    persona = "A professional search quality rater following web search guidelines."
    with_persona = judge_prompt(template, "q", "p", persona)
    prefix = "You are acting as a professional search quality rater following web search guidelines.\n"
    assert with_persona == prefix + plain


@pytest.mark.parametrize(
    ("persona", "phrase"),
    [
        ("An assessor who checks facts.", "an assessor who checks facts"),
        ("The curator of a museum", "the curator of a museum"),
        ("NASA engineer", "NASA engineer"),
        ("  A chemist  ", "a chemist"),
        ("Apple grower", "Apple grower"),
    ],
)
def test_persona_phrase_reads_after_you_are_acting_as(persona, phrase):
    assert persona_phrase(persona) == phrase


def test_a_released_style_summary_template_is_filled_where_it_says_doc(tmp_path):
    # A stand-in of the released template's structure (the test's own words): the document goes at {DOC}.
    released = tmp_path / "summary_stand_in.txt"
    released.write_text("Summarize this {kind} of text in 80 tokens.\nDocument:\n{DOC}", encoding="utf-8")
    template = load_summary_template(released)
    passage = "A passage that mentions {query} and {DOC} literally."
    expected = released.read_text(encoding="utf-8").replace("{DOC}", passage)  # as the released code fills it
    assert render(template, query="ignored", passage=passage) == expected
    own = tmp_path / "own.txt"
    own.write_text("Summarize: {passage}", encoding="utf-8")
    assert load_summary_template(own) == "Summarize: {passage}"
    both = tmp_path / "both.txt"
    both.write_text("{DOC} for {query}", encoding="utf-8")
    with pytest.raises(StressprobeError, match="both .DOC. and"):
        load_summary_template(both)
    neither = tmp_path / "neither.txt"
    neither.write_text("Summarize.", encoding="utf-8")
    with pytest.raises(StressprobeError, match="lacks the placeholder"):
        load_summary_template(neither)
