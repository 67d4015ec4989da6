"""Atomic writes and line-numbered reading errors."""

import os

import pytest

from stressprobe.errors import StressprobeError
from stressprobe.io import atomic_write, output_path_problem, read_jsonl, read_tsv_lines, write_jsonl


def test_atomic_write_replaces_whole_file_and_leaves_no_temporaries(tmp_path):
    target = tmp_path / "sub" / "out.txt"
    atomic_write(target, "first")
    atomic_write(target, "second")
    assert target.read_text() == "second"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.txt"]


def test_atomic_write_into_unwritable_directory_is_a_clear_error(tmp_path):
    if os.geteuid() == 0:
        # root ignores directory permissions; a path below a regular file fails for everyone.
        blocker = tmp_path / "file"
        blocker.write_text("x")
        target = blocker / "out.txt"
    else:
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        target = locked / "out.txt"
    with pytest.raises(StressprobeError, match=r"out\.txt: cannot write"):
        atomic_write(target, "x")
    assert not target.exists()


def test_jsonl_round_trip(tmp_path):
    records = [{"qid": "1", "label": 2}, {"qid": "2", "label": None}]
    write_jsonl(tmp_path / "a.jsonl", records)
    assert read_jsonl(tmp_path / "a.jsonl") == records


def test_malformed_jsonl_names_file_and_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(StressprobeError, match=r"bad\.jsonl:2: not valid JSON"):
        read_jsonl(path)


def test_non_utf8_names_file_and_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes("1\tok\n2\tcaf\xe9\n".encode("latin-1"))
    with pytest.raises(StressprobeError, match=r"latin1\.tsv:2: not valid UTF-8"):
        list(read_tsv_lines(path))


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(StressprobeError, match="file not found"):
        list(read_tsv_lines(tmp_path / "nope.tsv"))


def test_output_path_problem_accepts_a_path_below_a_writable_directory(tmp_path):
    assert output_path_problem(tmp_path / "new" / "deeper" / "out.tsv") is None


def test_output_path_problem_names_a_file_in_the_way(tmp_path):
    (tmp_path / "judgments").write_text("x\n")
    problem = output_path_problem(tmp_path / "judgments" / "model" / "cell.jsonl")
    assert problem.startswith(f"{tmp_path / 'judgments'}: a file where") and "delete" in problem


def test_output_path_problem_names_a_broken_link(tmp_path):
    (tmp_path / "judgments").symlink_to(tmp_path / "gone", target_is_directory=True)
    problem = output_path_problem(tmp_path / "judgments" / "cell.jsonl")
    assert problem.startswith(f"{tmp_path / 'judgments'}: a broken symbolic link")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into directories without write permission")
def test_output_path_problem_names_a_directory_without_write_permission(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    try:
        assert output_path_problem(locked / "cell.jsonl").startswith(f"{locked}: not writable")
    finally:
        locked.chmod(0o700)
