"""The paths of a grouped CDV evaluation (stressprobe.cdv.jobs), shared by rules cdv_eval_vllm and
cdv_vllm_served."""

from __future__ import annotations

from stressprobe.cdv.jobs import EvalCell, group_cells


def test_group_cells_pairs_each_cells_inputs_with_its_outputs_and_no_mitigation_when_off():
    cells = [("p1", "v1"), ("p2", "v2")]
    built = group_cells(cells, ["q1", "q2"], ["x1", "x2"], ["", "b2"], ["r1", "r2"], ["u1", "u2"])
    assert built == [
        EvalCell("p1/v1", "q1", "x1", "", "r1", "u1", "", ""),
        EvalCell("p2/v2", "q2", "x2", "b2", "r2", "u2", "", ""),
    ]
    with_mitigation = group_cells(
        cells, ["q1", "q2"], ["x1", "x2"], ["", ""], ["r1", "r2"], ["u1", "u2"], ["m1", "m2"], ["n1", "n2"]
    )
    assert [(c.mitigation, c.mitigation_usage) for c in with_mitigation] == [("m1", "n1"), ("m2", "n2")]
