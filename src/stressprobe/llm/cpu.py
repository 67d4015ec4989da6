"""Whether llama.cpp's extra CPU buffer types (AMX, weight repacking) are safe to use on this machine.

pip compiles llama.cpp with native CPU detection, so on a CPU that advertises AMX (`amx_tile`, `amx_int8`)
the build puts weights in AMX buffers. Some virtual machines advertise AMX but trap its instructions: the
first matrix multiplication dies with SIGILL. Loading without extra buffer types avoids that path at some
cost in speed, so the fast path stays on where it is safe:

- `on` / `off` in the model's registry entry (`extra_buffers`) decide outright;
- `auto`: on when the CPU does not advertise AMX (no AMX code can run), else a child process runs the
  fast path once and the verdict is kept per machine: a child killed by a signal means off.

The functions here are pure or take what they need as arguments (cpuinfo text, a probe command), so the
decision is tested without the machine it is about.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from stressprobe.errors import StressprobeError
from stressprobe.io import user_cache_dir, write_json

log = logging.getLogger(__name__)

AMX_FLAGS = frozenset({"amx_tile", "amx_int8", "amx_bf16", "amx_fp16", "amx_complex"})
EXTRA_BUFFER_SETTINGS = ("auto", "on", "off")
PROBE_TIMEOUT_S = 120.0


def cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of /proc/cpuinfo's text (the union over its processors)."""
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return frozenset(flags)


def advertised_amx(flags: Iterable[str]) -> frozenset[str]:
    """The AMX features among `flags` (empty: no AMX code path can be taken)."""
    return AMX_FLAGS.intersection(flags)


def read_cpuinfo(path: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The cpuinfo text, or "" where there is none (not Linux): then nothing is advertised."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


@dataclass(frozen=True)
class ProbeResult:
    """How a probe child ended: its exit status (negative: killed by that signal) and its stderr's tail."""

    returncode: int | None
    stderr_tail: str = ""

    @property
    def signal_name(self) -> str | None:
        """The signal that killed the child (e.g. SIGILL), or None."""
        if self.returncode is None or self.returncode >= 0:
            return None
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"

    @property
    def safe(self) -> bool:
        """Only a clean exit proves the fast path; a signal, an error or a timeout keep the safe path."""
        return self.returncode == 0

    def describe(self) -> str:
        if self.returncode is None:
            return "the probe timed out"
        if self.signal_name:
            return f"the probe died from {self.signal_name}"
        if self.returncode:
            tail = self.stderr_tail.strip().splitlines()[-1:] or [""]
            return f"the probe failed with exit status {self.returncode} ({tail[0]})"
        return "the probe ran it without fault"


def run_probe(argv: list[str], timeout_s: float = PROBE_TIMEOUT_S) -> ProbeResult:
    """Run a probe command in a child process and report how it ended (never raises for its failure)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired:
        return ProbeResult(None)
    return ProbeResult(done.returncode, done.stderr[-2000:])


@dataclass(frozen=True)
class ExtraBuffers:
    """The decision and why, for the job's log."""

    enabled: bool
    reason: str


def extra_buffers_setting(value: object) -> str:
    """The registry value as auto/on/off: YAML reads an unquoted on/off as a boolean."""
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def decide_extra_buffers(setting: str, amx: frozenset[str], probe: Callable[[], ProbeResult]) -> ExtraBuffers:
    """Whether to load with extra buffer types; `probe` is called only when the answer depends on it."""
    setting = extra_buffers_setting(setting)
    if setting not in EXTRA_BUFFER_SETTINGS:
        raise StressprobeError(
            f"extra_buffers must be one of {', '.join(EXTRA_BUFFER_SETTINGS)} (got {setting!r})"
        )
    if setting == "on":
        return ExtraBuffers(True, "extra_buffers: on in the model entry")
    if setting == "off":
        return ExtraBuffers(False, "extra_buffers: off in the model entry")
    if not amx:
        return ExtraBuffers(True, "the CPU does not advertise AMX")
    result = probe()
    features = ", ".join(sorted(amx))
    if result.safe:
        return ExtraBuffers(True, f"the CPU advertises {features} and {result.describe()}")
    return ExtraBuffers(False, f"the CPU advertises {features} but {result.describe()}")


def probe_key(*parts: object) -> str:
    """A short key for one (machine, library build, model file) combination."""
    return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:24]


def cached_probe(key: str, probe: Callable[[], ProbeResult], cache_dir: Path | None = None) -> ProbeResult:
    """`probe()` once per key: the verdict is stored as a small JSON file that later jobs read.

    An unreadable or unwritable cache only costs a repeated probe, never a wrong verdict.
    """
    # Verdicts are kept per user, outside the results: they describe the host.
    path = (cache_dir or user_cache_dir("cpu-probe")) / f"{key}.json"
    try:
        stored = json.loads(path.read_text())
        return ProbeResult(stored["returncode"], stored.get("stderr_tail", ""))
    except (OSError, ValueError, KeyError, TypeError):
        pass
    result = probe()
    if result.returncode is None:
        return result  # a timeout may be a busy machine: decide safe for now, probe again next time
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, {"returncode": result.returncode, "stderr_tail": result.stderr_tail})
    except (OSError, StressprobeError) as exc:
        log.warning("could not keep the CPU probe's verdict in %s (%s); the next job probes again", path, exc)
    return result
