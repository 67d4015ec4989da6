"""Which records a table scores. Both studies' records say why a model gave no answer with status `error`
(the call failed for good: the backend's one failure policy leaves such records only where a single request
failed); a table never scores one. It leaves it out of the denominator and counts it in its own column,
`unanswered`, so that a failed call can neither pass for a wrong answer (CDV accuracy) nor for grade 0
(persona judgments). An answer the model gave that the reader cannot parse is something else: each study
keeps its own documented switch for those (`judging.unparsed`; CDV: unparsed answers are wrong).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

#: The column every scoring table counts unanswered records in.
UNANSWERED = "unanswered"
#: The record status of a request that got no answer.
ERROR = "error"

Record = TypeVar("Record", bound=Mapping[str, Any])


def is_unanswered(record: Mapping[str, Any]) -> bool:
    """Whether `record` holds no model answer (its call failed)."""
    return record.get("status") == ERROR


def answered(records: Iterable[Record]) -> tuple[list[Record], int]:
    """(the records that hold an answer, in order; how many were left out as unanswered)."""
    kept, left_out = [], 0
    for record in records:
        if is_unanswered(record):
            left_out += 1
        else:
            kept.append(record)
    return kept, left_out
