"""Short jobs import only what they use: the heavy libraries load inside the functions that need them.

A Snakemake script job is a fresh Python process, so every module-level import is paid once per job; the
demo runs ~100 such jobs (bench/bench_demo.py measures the whole).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support.helpers import ROOT

HEAVY = ("torch", "sentence_transformers", "matplotlib", "scipy", "statsmodels", "llama_cpp", "sklearn")


def imported_after(statement: str) -> set[str]:
    """The heavy top-level packages loaded by running `statement` in a fresh interpreter."""
    code = (
        f"import json, sys\n{statement}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    )
    env_path = str(ROOT / "src")
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": env_path}
    )
    return set(json.loads(proc.stdout.splitlines()[-1])) & set(HEAVY)


@pytest.mark.parametrize(
    ("statement", "allowed"),
    [
        # the per-cell qrels and nDCG jobs, the judge and summary jobs (llama_cpp loads when a model does)
        (
            "import stressprobe.persona.judging, stressprobe.persona.evaluation, stressprobe.persona.calibration",
            set(),
        ),
        ("import stressprobe.llm", set()),
        # tables of the persona study: no plotting, no statistics libraries until a table needs them
        (
            "import stressprobe.persona.analysis, stressprobe.persona.judgment_tables, "
            "stressprobe.persona.system_tables, stressprobe.tables",
            set(),
        ),
        ("import stressprobe.cdv.report", set()),
        ("import stressprobe.persona.pools, stressprobe.persona.data, stressprobe.embedding", set()),
    ],
)
def test_modules_import_no_heavy_library_at_module_level(statement, allowed):
    assert imported_after(statement) <= allowed


def test_figures_and_statistics_still_get_their_libraries():
    loaded = imported_after(
        "from stressprobe.persona import metrics\nmetrics.kendall_tau_b([1, 2, 3], [1, 3, 2])\n"
        "from stressprobe.plots import plt"
    )
    assert {"scipy", "matplotlib"} <= loaded
