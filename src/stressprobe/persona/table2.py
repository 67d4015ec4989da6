"""The Table 2 check: the personas a run retrieves for one RAG24 query beside the six the paper prints.

The paper's Table 2 prints, for RAG24 query 2024-121840, the Query, Domain and Orthogonal persona of both
pools: a check of the pool's version, the persona text's format and the orthogonal rule at no cost. The
printed texts are not stored (published text is never copied into the repository): the values file
(`resources/paper/table2_personas.tsv`) keeps, per pool and role, the sha256 of the text as printed and
of its normalised form (`normalise`). A run's persona matches when its text hashes the same, as the
selected persona or as one of its top-k candidates.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from stressprobe.errors import StressprobeError
from stressprobe.io import read_tsv_lines

COLUMNS = ["source", "role", "printed_sha256", "normalised_sha256"]
#: The check's table: per printed persona, the run's match and what it retrieved.
CHECK_COLUMNS = ["source", "role", "match", "text match", "run pid", "run persona", "printed sha256"]
# Typographic quotes and dashes as a PDF prints them, mapped to what a dataset's text usually holds.
TYPOGRAPHY = str.maketrans(
    {"\u2019": "'", "\u2018": "'", "\u201c": '"', "\u201d": '"', "\u2013": "-", "\u2014": "-"}
)


def normalise(text: str) -> str:
    """NFKC, plain quotes and dashes, one space between words, case folded, no final period."""
    text = unicodedata.normalize("NFKC", text).translate(TYPOGRAPHY)
    return re.sub(r"\s+", " ", text).strip().casefold().removesuffix(".")


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_expected(path: str | Path) -> list[dict[str, str]]:
    """The values file: `#` comments, a header, then `source role printed_sha256 normalised_sha256`."""
    rows = []
    header_seen = False
    for lineno, fields in read_tsv_lines(path):
        if fields[0].startswith("#"):
            continue
        if not header_seen:
            if fields != COLUMNS:
                raise StressprobeError(
                    f"{path}:{lineno}: expected the header {' '.join(COLUMNS)}; fix the file"
                )
            header_seen = True
            continue
        if len(fields) != len(COLUMNS) or not all(re.fullmatch(r"[0-9a-f]{64}", f) for f in fields[2:]):
            raise StressprobeError(f"{path}:{lineno}: expected 'source role sha256 sha256'; fix the line")
        rows.append(dict(zip(COLUMNS, fields, strict=True)))
    if not rows:
        raise StressprobeError(f"{path}: no rows; expected one per pool and role")
    return rows


def table2_check(
    selections: Mapping[str, Sequence[Mapping[str, Any]]], qid: str, expected: Sequence[Mapping[str, str]]
) -> pd.DataFrame:
    """Per printed persona: what the run retrieved for `qid` in that pool and role, and whether it matches
    (`selected`, `candidate <rank>` or `no`; `exact` when the printed text matches to the character,
    `normalised` when only after `normalise`)."""
    rows = []
    for entry in expected:
        source, role = entry["source"], entry["role"]
        if source not in selections:
            raise StressprobeError(f"Table 2 check: the run has no '{source}' pool; add it or drop its rows")
        found = [r for r in selections[source] if r["qid"] == qid and r["role"] == role]
        if not found:
            raise StressprobeError(
                f"Table 2 check: query '{qid}' has no '{role}' persona in the '{source}' pool; select the query "
                "(judging.datasets.<name>.queries) or fix analysis.table2_check.qid"
            )
        match, how = "no", ""
        for rank, candidate in enumerate(found[0]["candidates"], start=1):
            text = candidate["text"]
            if sha256(text) == entry["printed_sha256"]:
                how = "exact"
            elif sha256(normalise(text)) == entry["normalised_sha256"]:
                how = "normalised"
            else:
                continue
            match = "selected" if rank == 1 else f"candidate {rank}"
            break
        rows.append(
            {
                "source": source,
                "role": role,
                "match": match,
                "text match": how,
                "run pid": found[0]["pid"],
                "run persona": found[0]["persona"],
                "printed sha256": entry["printed_sha256"],
            }
        )
    return pd.DataFrame(rows, columns=CHECK_COLUMNS)
