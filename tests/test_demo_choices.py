"""The demo's deliberate choices: CDV questions named by qid, and every named question exists."""

from __future__ import annotations

import json

import pytest
import yaml

from stressprobe.cdv.questions import prepare_questions
from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from tests.support.helpers import ROOT

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"


def write_questions(path, count=6):
    items = [
        {"question": f"Question {i}?", "choices": ["a", "b", "c"], "answer": "b", "id": f"q{i}"}
        for i in range(count)
    ]
    path.write_text(json.dumps(items))
    return path


def test_a_list_of_qids_takes_exactly_those_questions_in_file_order(tmp_path):
    path = write_questions(tmp_path / "qs.json")
    chosen = prepare_questions("t", str(path), None, None, "test", ["q4", "q1"], seed=1)
    assert [q["qid"] for q in chosen] == ["q1", "q4"]
    assert validate_config({"cdv": {"datasets": {"t": {"path": "x", "n": ["q1"]}}}}, SCHEMA)


def test_an_unknown_qid_is_a_config_error_naming_it(tmp_path):
    path = write_questions(tmp_path / "qs.json")
    with pytest.raises(StressprobeError, match=r"cdv\.datasets\.t\.n': no question with qid nope"):
        prepare_questions("t", str(path), None, None, "test", ["q1", "nope"], seed=1)


def test_every_question_the_demo_names_exists():
    demo = validate_config(yaml.safe_load((ROOT / "config" / "config.yaml").read_text()), SCHEMA)
    for name, source in demo["cdv"]["datasets"].items():
        questions = prepare_questions(
            name, str(ROOT / source["path"]), None, None, "test", source["n"], demo["seed"]
        )
        expected = len(source["n"]) if isinstance(source["n"], list) else source["n"]
        assert len(questions) == expected, name
