"""The cache's shard files: torn and damaged records, lost index entries, lookups, and the old single-file cache."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys

import numpy as np
import pytest

from stressprobe.errors import StressprobeError
from stressprobe.llm import Request
from stressprobe.llm.cache import Claim, ResponseCache, cache_key, iter_records
from stressprobe.llm.client import Client
from stressprobe.llm.shards import ENTRY_DTYPE, ShardIndex, decode_line, encode_line, record_body
from tests.test_llm_cache import IDENTITY, CountingBackend


def key(i: int) -> str:
    return f"{i:064x}"


def fill(path, keys, model="m") -> None:
    cache = ResponseCache(path)
    for k in keys:
        cache.put(k, model, {"k": k}, {"texts": [f"t-{k[-6:]}"]})
    cache.close()


def only_shard(directory):
    (data,) = [p for p in directory.glob("*.jsonl") if not p.name.startswith("legacy-")]
    return data, data.with_suffix(".idx")


def test_crash_truncated_last_record_is_ignored_and_the_rest_is_found(tmp_path):
    path = tmp_path / "llm"
    fill(path, [key(i) for i in range(10)])
    data, index = only_shard(path)
    # A writer killed in the middle of its 11th record: half a data line, half an index entry.
    line = encode_line(key(10), record_body(key(10), "m", {}, {"texts": ["t"]}, 1.0))
    with open(data, "ab") as fh:
        fh.write(line[: len(line) // 2])
    with open(index, "ab") as fh:  # a hole (another host's unflushed page), then a torn entry
        fh.write(bytes(ENTRY_DTYPE.itemsize) + b"\x01" * (ENTRY_DTYPE.itemsize // 2))
    cache = ResponseCache(path)
    assert cache.count() == 10
    assert cache.get(key(10)) is None and cache.get(key(3)) == {"texts": ["t-000003"]}
    assert cache.claim(key(10)) is Claim.MINE  # the torn call is simply asked again
    cache.put(key(10), "m", {}, {"texts": ["again"]})
    cache.close()
    assert ResponseCache(path, read_only=True).get(key(10)) == {"texts": ["again"]}
    assert len(iter_records(path)) == 11


def test_record_without_index_entry_is_found_by_scanning_the_data(tmp_path):
    # A writer killed between its data write and its index write.
    path = tmp_path / "llm"
    fill(path, [key(i) for i in range(3)])
    data, _ = only_shard(path)
    with open(data, "ab") as fh:
        fh.write(encode_line(key(3), record_body(key(3), "m", {}, {"texts": ["late"]}, 1.0)))
    assert ResponseCache(path, read_only=True).get_many([key(3), key(0)]) == {
        key(3): {"texts": ["late"]},
        key(0): {"texts": ["t-000000"]},
    }


def test_a_damaged_record_is_a_miss_not_a_wrong_answer(tmp_path):
    path = tmp_path / "llm"
    fill(path, [key(i) for i in range(3)])
    data, _ = only_shard(path)
    raw = bytearray(data.read_bytes())
    first_end = raw.index(b"\n")
    raw[first_end - 5] ^= 0x01  # one bit flipped inside the first record's JSON
    data.write_bytes(bytes(raw))
    found = ResponseCache(path, read_only=True).get_many([key(i) for i in range(3)])
    assert set(found) == {key(1), key(2)}
    assert decode_line(bytes(raw[: first_end + 1])) is None
    cache = ResponseCache(path)
    assert cache.claim(key(0)) is Claim.MINE  # asked again, not answered from the damaged record
    cache.close()


def test_index_finds_keys_sharing_a_prefix_and_keys_in_several_shards(tmp_path):
    path = tmp_path / "llm"
    twins = ["ab" * 8 + f"{i:048x}" for i in range(5)]  # same first 8 bytes (the search prefix)
    fill(path, twins[:3])
    fill(path, twins[2:])  # twins[2] is in both shards
    index = ShardIndex(path)
    index.refresh()
    assert set(index.find(twins)) == set(twins) and len(index.shards) == 2
    assert index.find(["ab" * 8 + "f" * 48]) == {}
    assert ResponseCache(path, read_only=True).count() == 5


def interval_passed(cache: ResponseCache) -> None:
    """As if the refresh interval (which adapts to how long a refresh takes) had passed since the last one."""
    cache.index.last_refresh = 0.0


def test_a_reader_sees_another_writers_new_answers_after_a_refresh(tmp_path):
    path = tmp_path / "llm"
    fill(path, [key(0)])
    reader = ResponseCache(path, read_only=True)
    writer = ResponseCache(path)
    writer.put(key(1), "m", {}, {"texts": ["new"]})
    interval_passed(reader)
    assert reader.get(key(1)) == {"texts": ["new"]}  # new entry of a new shard
    for i in range(2, 40):
        writer.put(key(i), "m", {}, {"texts": [str(i)]})
    interval_passed(reader)
    assert reader.contains_many([key(i) for i in range(40)]) == {key(i) for i in range(40)}
    writer.close()


def test_large_index_merges_and_lookups_are_exact(tmp_path, monkeypatch):
    import stressprobe.llm.shards as shards

    monkeypatch.setattr(shards, "MERGE_AT", 50)
    path = tmp_path / "llm"
    rng = np.random.default_rng(0)
    keys = [bytes(rng.integers(0, 256, 32, dtype=np.uint8)).hex() for _ in range(300)]
    fill(path, keys[:100])
    reader = ResponseCache(path, read_only=True)
    fill(path, keys[100:300])  # more than MERGE_AT new entries: merged into the sorted arrays
    absent = [bytes(rng.integers(0, 256, 32, dtype=np.uint8)).hex() for _ in range(50)]
    interval_passed(reader)
    assert reader.contains_many(keys + absent) == set(keys)
    assert reader.get(keys[250]) == {"texts": [f"t-{keys[250][-6:]}"]}


# The schema of the cache before shards (one SQLite file in WAL mode shared by every job).
OLD_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY, model TEXT NOT NULL, request TEXT NOT NULL, response TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY, owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, claimed REAL NOT NULL
);
"""


def old_cache(path, requests) -> list[str]:
    """An `llm.sqlite` as the old code wrote it, holding answers to `requests` (the prompt reversed)."""
    import json

    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.executescript(OLD_SCHEMA)
    keys = []
    for r in requests:
        k = cache_key(IDENTITY, r)
        payload = {"texts": [r.messages[-1][1][::-1]], "prompt_tokens": 3, "completion_tokens": 2}
        record = {"model": IDENTITY, "messages": [list(m) for m in r.messages], "decoding": r.decoding()}
        db.execute(
            "INSERT INTO responses VALUES (?, ?, ?, ?, ?)",
            (k, "fake", json.dumps(record), json.dumps(payload), 1.0),
        )
        keys.append(k)
    db.commit()
    db.close()
    return keys


@pytest.mark.parametrize("configured", ["llm.sqlite", "llm"])
def test_old_single_file_cache_is_converted_once_and_its_answers_are_free(tmp_path, configured):
    requests = [Request.chat(user=f"old {i}") for i in range(20)]
    legacy = tmp_path / "llm.sqlite"
    old_cache(legacy, requests)
    before = legacy.read_bytes()
    backend = CountingBackend()
    with Client("fake", backend, ResponseCache(tmp_path / configured), price=None) as client:
        responses = client.generate(requests + [Request.chat(user="new")])
    assert len(backend.calls) == 1 and all(r.cached for r in responses[:20])
    assert [r.text for r in responses[:20]] == [f"old {i}"[::-1] for i in range(20)]
    assert legacy.read_bytes() == before  # the old file is only read
    # Converted once: reopening (either name) adds no second copy.
    ResponseCache(tmp_path / "llm").close()
    ResponseCache(tmp_path / "llm.sqlite", read_only=True).close()
    assert len(list((tmp_path / "llm").glob("legacy-*.jsonl"))) == 1
    assert len(iter_records(tmp_path / "llm")) == 21


def test_cost_view_reads_an_unconverted_old_cache(tmp_path):
    from stressprobe.cost import CacheView

    requests = [Request.chat(user=f"old {i}") for i in range(3)]
    keys = old_cache(tmp_path / "llm.sqlite", requests)
    view = CacheView(tmp_path / "llm")
    assert view.cached(keys + [key(1)]) == set(keys)
    view.close()


def test_read_only_view_of_a_missing_cache_creates_nothing(tmp_path):
    cache = ResponseCache(tmp_path / "absent", read_only=True)
    assert cache.get_many([key(1)]) == {} and cache.count() == 0
    cache.close()
    assert list(tmp_path.iterdir()) == []


def test_a_file_where_the_directory_should_be_is_a_one_line_error(tmp_path):
    (tmp_path / "llm").write_text("not a directory")
    with pytest.raises(StressprobeError, match="cache.path") as info:
        ResponseCache(tmp_path / "llm.sqlite")
    assert "\n" not in str(info.value)


def test_compact_merges_shards_keeping_one_record_per_key(tmp_path):
    path = tmp_path / "llm"
    fill(path, [key(i) for i in range(5)])
    fill(path, [key(i) for i in range(3, 9)])  # 3 and 4 twice
    data = sorted(path.glob("*.jsonl"))[0]
    with open(data, "ab") as fh:
        fh.write(b"0000 torn")
    subprocess.run(
        [sys.executable, "-m", "stressprobe.llm.cache", "compact", str(path)], check=True, capture_output=True
    )
    (merged,) = path.glob("*.jsonl")
    assert merged.name.startswith("compact-") and len(list(path.iterdir())) == 2
    assert len(merged.read_bytes().splitlines()) == 9
    cache = ResponseCache(path, read_only=True)
    assert cache.get_many([key(i) for i in range(9)]) == {
        key(i): {"texts": [f"t-{key(i)[-6:]}"]} for i in range(9)
    }


def test_old_cache_of_a_crashed_job_keeps_the_answers_in_its_wal_file(tmp_path):
    # Committed answers that only the -wal file holds (the old job died before a checkpoint).
    requests = [Request.chat(user=f"wal {i}") for i in range(5)]
    live = tmp_path / "live.sqlite"
    keys = old_cache(live, requests[:2])
    db = sqlite3.connect(live)
    db.execute("PRAGMA wal_autocheckpoint=0")
    for r in requests[2:]:
        k = cache_key(IDENTITY, r)
        db.execute("INSERT INTO responses VALUES (?, 'fake', '{}', ?, 1.0)", (k, '{"texts": ["w"]}'))
        keys.append(k)
    db.commit()
    crashed = tmp_path / "crashed" / "llm.sqlite"
    crashed.parent.mkdir()
    for suffix in ("", "-wal"):
        shutil.copyfile(f"{live}{suffix}", f"{crashed}{suffix}")
    db.close()
    assert ResponseCache(crashed, read_only=True).contains_many(keys) == set(keys)
