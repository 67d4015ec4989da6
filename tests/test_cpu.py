"""Whether llama.cpp's extra buffer types are used: cpuinfo parsing, the decision, and a real probe child."""

from __future__ import annotations

import signal
import sys

import pytest
import yaml

from stressprobe.config import validate_config
from stressprobe.errors import StressprobeError
from stressprobe.llm.cpu import (
    ProbeResult,
    advertised_amx,
    cached_probe,
    cpu_flags,
    decide_extra_buffers,
    run_probe,
)
from tests.support.helpers import ROOT, TINY_CONFIG

SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"

# Two processors as /proc/cpuinfo lists them (trimmed): one line of flags each.
CPUINFO_AMX = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu vme sse sse2 avx avx2 avx512f amx_bf16 avx512_fp16 amx_tile amx_int8

processor\t: 1
flags\t\t: fpu vme sse sse2 avx avx2 avx512f amx_bf16 avx512_fp16 amx_tile amx_int8
"""
CPUINFO_PLAIN = """processor\t: 0
model name\t: AMD EPYC 7B13
flags\t\t: fpu vme sse sse2 avx avx2 fma
"""

# A child that dies from SIGILL as llama.cpp's AMX kernel does on a VM that traps AMX instructions.
SIGILL_CHILD = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
CLEAN_CHILD = [sys.executable, "-c", "pass"]


def never_probe() -> ProbeResult:
    raise AssertionError("the probe must not run here")


def test_cpu_flags_parse_every_processor_line():
    flags = cpu_flags(CPUINFO_AMX)
    assert {"avx2", "amx_tile", "amx_int8", "amx_bf16"} <= flags
    assert "GenuineIntel" not in flags
    assert advertised_amx(flags) == {"amx_tile", "amx_int8", "amx_bf16"}
    assert advertised_amx(cpu_flags(CPUINFO_PLAIN)) == frozenset()
    assert cpu_flags("") == frozenset()


def test_auto_keeps_extra_buffers_without_amx_and_never_probes():
    decision = decide_extra_buffers("auto", advertised_amx(cpu_flags(CPUINFO_PLAIN)), never_probe)
    assert decision.enabled
    assert "does not advertise AMX" in decision.reason


@pytest.mark.parametrize(("setting", "enabled"), [("on", True), ("off", False), (True, True), (False, False)])
def test_explicit_setting_decides_without_probe(setting, enabled):
    # YAML reads an unquoted on/off as true/false: both spellings mean the same.
    amx = advertised_amx(cpu_flags(CPUINFO_AMX))
    assert decide_extra_buffers(setting, amx, never_probe).enabled is enabled


def test_unknown_setting_is_an_error():
    with pytest.raises(StressprobeError, match="extra_buffers must be one of auto, on, off"):
        decide_extra_buffers("fast", frozenset(), never_probe)


def test_probe_child_killed_by_sigill_turns_extra_buffers_off():
    result = run_probe(SIGILL_CHILD)
    assert result.returncode == -signal.SIGILL
    assert result.signal_name == "SIGILL" and not result.safe
    decision = decide_extra_buffers("auto", advertised_amx(cpu_flags(CPUINFO_AMX)), lambda: result)
    assert not decision.enabled
    assert "amx_int8" in decision.reason and "died from SIGILL" in decision.reason


def test_probe_child_that_exits_cleanly_keeps_extra_buffers_on():
    result = run_probe(CLEAN_CHILD)
    assert result.safe and result.signal_name is None
    assert decide_extra_buffers("auto", frozenset({"amx_tile"}), lambda: result).enabled


def test_probe_child_that_fails_or_hangs_keeps_the_safe_path():
    failed = run_probe([sys.executable, "-c", "raise SystemExit('no model')"])
    assert failed.returncode == 1 and not failed.safe
    assert "exit status 1 (no model)" in failed.describe()
    hung = run_probe([sys.executable, "-c", "import time; time.sleep(30)"], timeout_s=0.5)
    assert hung.returncode is None and not hung.safe


def test_verdict_is_probed_once_per_key_and_kept_on_disk(tmp_path):
    runs = []

    def probe() -> ProbeResult:
        runs.append(1)
        return run_probe(SIGILL_CHILD)

    first = cached_probe("k1", probe, tmp_path)
    again = cached_probe("k1", probe, tmp_path)  # as a later job would: read from the file
    assert len(runs) == 1
    assert first.returncode == again.returncode == -signal.SIGILL
    cached_probe("k2", probe, tmp_path)  # another machine, build or model file
    assert len(runs) == 2


def test_timeout_is_not_kept(tmp_path):
    runs = []

    def probe() -> ProbeResult:
        runs.append(1)
        return ProbeResult(None)

    cached_probe("k", probe, tmp_path)
    cached_probe("k", probe, tmp_path)
    assert len(runs) == 2


def test_unwritable_cache_only_costs_a_repeated_probe(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    result = cached_probe("k", lambda: ProbeResult(0), blocker / "sub")
    assert result.safe


@pytest.mark.parametrize(
    ("text", "stored", "enabled"),
    [
        (None, "auto", True),
        ("auto", "auto", True),
        ("off", False, False),
        ("'off'", "off", False),
        ("on", True, True),
    ],
)
def test_schema_fills_auto_and_takes_on_off_as_yaml_writes_them(text, stored, enabled):
    config = yaml.safe_load(TINY_CONFIG.read_text(encoding="utf-8"))
    if text is not None:
        config["models"]["smollm2-135m"]["extra_buffers"] = yaml.safe_load(f"value: {text}")["value"]
    entry = validate_config(config, SCHEMA)["models"]["smollm2-135m"]
    assert entry["extra_buffers"] == stored
    # On a CPU that does not advertise AMX, auto means on without a probe.
    assert decide_extra_buffers(entry["extra_buffers"], frozenset(), never_probe).enabled is enabled


def test_schema_rejects_other_values():
    config = yaml.safe_load(TINY_CONFIG.read_text(encoding="utf-8"))
    config["models"]["smollm2-135m"]["extra_buffers"] = "fast"
    with pytest.raises(StressprobeError, match="models.smollm2-135m.extra_buffers"):
        validate_config(config, SCHEMA)
