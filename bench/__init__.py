"""Benchmarks (`python -m bench.<name>`); their measured results are in bench/RESULTS.md."""

from __future__ import annotations

from collections.abc import Sequence


def abba(sides: Sequence[str], rounds: int) -> list[str]:
    """The sides in ABBA order over `rounds` rounds (A B, B A, A B, ...): each side runs first in every other
    round, so a machine whose speed drifts during the runs favours neither."""
    return [side for i in range(rounds) for side in (sides if i % 2 == 0 else sides[::-1])]
