"""The cluster install the README gives (pyproject's `cluster` extra) holds every package a job imports:
the SLURM plugin, the downloads, vllm (GPU jobs) and trl/peft (LoRA classifiers, DPO)."""

from __future__ import annotations

import re
import tomllib

from tests.support.helpers import ROOT


def _name(requirement: str) -> str:
    return re.split(r"[<>=\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_cluster_extra_covers_every_job_and_the_readme_installs_it():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    cluster = {_name(r) for r in extras["cluster"]}
    for extra in ("slurm", "download", "vllm", "dpo"):
        assert {_name(r) for r in extras[extra]} <= cluster, extra
    # Rules whose conda env is the GPU or DPO one import these; the rule files say which env they use.
    rules = "".join(p.read_text(encoding="utf-8") for p in (ROOT / "workflow" / "rules").glob("*.smk"))
    assert "envs/dpo.yaml" in rules and "llm-gpu" in (ROOT / "workflow" / "rules" / "common.smk").read_text()
    for env, packages in (("llm-gpu.yaml", {"vllm"}), ("dpo.yaml", {"trl", "peft", "accelerate"})):
        text = (ROOT / "envs" / env).read_text(encoding="utf-8")
        assert all(re.search(rf"^\s+- {p}==", text, re.M) for p in packages), env
        assert packages <= cluster, env
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## On a cluster") : readme.index("## The response cache on a cluster")]
    assert 'pip install -c constraints.txt -e ".[cluster]"' in section
    assert "is enough for every job" not in (ROOT / "profiles" / "slurm" / "config.yaml").read_text()
