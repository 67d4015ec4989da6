"""Turning top-k log-probabilities into a distribution over answer labels (e.g. relevance grades 0-3)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def label_distribution(
    top_logprobs: Sequence[dict[str, float]] | None, labels: Sequence[str] = ("0", "1", "2", "3")
) -> dict[str, float] | None:
    """Probability of each label at the first generated position whose top-k contains a label.

    Tokens are compared without surrounding whitespace (" 2" counts as "2"); several tokens that strip to the
    same label add up. The probabilities are renormalised over the labels, so they sum to 1; labels outside
    the top-k get 0. Returns None when there are no log-probabilities or no position mentions a label.
    """
    if not top_logprobs:
        return None
    wanted = set(labels)
    for position in top_logprobs:
        mass = dict.fromkeys(labels, 0.0)
        for token, logprob in position.items():
            label = token.strip()
            if label in wanted:
                mass[label] += math.exp(logprob)
        total = sum(mass.values())
        if total > 0:
            return {label: p / total for label, p in mass.items()}
    return None
