"""Kafka records read by a compiled reader (`_records.c`) instead of aiokafka's per-record Python.

aiokafka's fetcher turns each record of a fetch into a `ConsumerRecord` through a Python generator
and a Python function: ~3 µs a record here, most of what a raw consumer spends on a message and
a third of what the sidecar spent on a one-span message (bench/RESULTS.md, issue 40). `install()`
has the fetcher build, for a consumer with no deserializers, no CRC check and `read_uncommitted`
(the sidecar's consumers), the compiled `Reader` in place of its `PartitionRecords`, and
`getall` takes a reader's records in C: the same records, with ConsumerRecord's fields, positions
and exceptions (tests/kafka/test_records.py compares them batch by batch, and on damaged
batches), made in C. Any other consumer gets aiokafka's own. It replaces two names in
`aiokafka.consumer.fetcher` and `FetchResult.getall`, after checking they are the ones it was
written against; where they are not, it leaves aiokafka alone and says why.
"""

from __future__ import annotations

import functools
import inspect
import os
from typing import Any

from aiokafka import codec
from aiokafka.consumer import fetcher
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from monitor.plumbing.compiled import choose

# `fetcher.PartitionRecords.__init__`'s parameters, as aiokafka 0.11-0.14 define them.
_SIGNATURE = (
    "self",
    "tp",
    "records",
    "aborted_transactions",
    "fetch_offset",
    "key_deserializer",
    "value_deserializer",
    "check_crcs",
    "isolation_level",
)
_STOCK = fetcher.PartitionRecords


class _KeptRecords(MemoryRecords):  # type: ignore[misc]
    """aiokafka's record set, keeping its bytes for the reader."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        super().__init__(raw)
        self.raw = raw


def _slow(tp: TopicPartition, chunk: bytes, next_offset: int) -> tuple[list[Any], int]:
    """A batch the reader leaves to aiokafka (an older format, damaged): aiokafka's
    records of it and its position after it, or its exception."""
    stock = _STOCK(tp, MemoryRecords(chunk), None, next_offset, None, None, False, fetcher.READ_UNCOMMITTED)
    return list(stock), stock.next_fetch_offset


# aiokafka's codecs by a batch's codec bits (default_records.py decompresses with them)
_CODECS = {
    1: (codec.has_gzip, codec.gzip_decode),
    2: (codec.has_snappy, codec.snappy_decode),
    3: (codec.has_lz4, codec.lz4_decode),
    4: (codec.has_zstd, codec.zstd_decode),
}


def _decompress(codec_id: int, payload: bytes) -> bytes | None:
    """A compressed batch's records, decompressed as aiokafka decompresses them; None where aiokafka
    would fail (an unknown codec, its library missing, damaged data): it takes the batch then."""
    has, decode = _CODECS.get(codec_id, (None, None))
    if has is None or decode is None or not has():
        return None
    try:
        return bytes(decode(payload))
    except Exception:  # each codec raises its own kinds; aiokafka's code raises them again
        return None


def _partition_records(
    tp: TopicPartition,
    records: Any,
    aborted_transactions: Any,
    fetch_offset: int,
    key_deserializer: Any,
    value_deserializer: Any,
    check_crcs: bool,
    isolation_level: int,
) -> Any:
    raw = getattr(records, "raw", None)
    if (
        type(raw) is not bytes
        or check_crcs
        or isolation_level != fetcher.READ_UNCOMMITTED
        or key_deserializer is not None
        or value_deserializer is not None
    ):
        return _STOCK(
            tp,
            records,
            aborted_transactions,
            fetch_offset,
            key_deserializer,
            value_deserializer,
            check_crcs,
            isolation_level,
        )
    return READER(raw, tp.topic, tp.partition, fetch_offset, functools.partial(_slow, tp), _decompress)


_STOCK_GETALL = fetcher.FetchResult.getall


def _getall(self: Any, max_records: int | None = None) -> list[Any]:
    """`FetchResult.getall`, its loop over a compiled reader's records run in C (`Reader.take`):
    the same records, position and end as aiokafka's loop gives."""
    records = self._partition_records
    if type(records) is not READER:
        return _STOCK_GETALL(self, max_records)  # type: ignore[no-any-return]
    if not self.check_assignment(self._topic_partition) or not self.has_more():
        return []
    taken, done = records.take(max_records)
    self._update_position()
    if done:
        self._partition_records = None
    return taken  # type: ignore[no-any-return]


def _load() -> Any:
    try:
        import monitor.kafka._records as _records
    except ImportError:
        return None
    parameters = tuple(inspect.signature(_STOCK.__init__).parameters)
    if parameters != _SIGNATURE or not hasattr(fetcher, "READ_UNCOMMITTED"):
        raise RuntimeError(f"aiokafka's PartitionRecords{parameters} is not the one it was written for")
    result = fetcher.FetchResult
    if not all(
        callable(getattr(result, name, None)) for name in ("check_assignment", "has_more", "_update_position")
    ):
        raise RuntimeError("aiokafka's FetchResult is not the one it was written for")
    return _records.Reader


# RAGMON_KAFKA_READER=aiokafka: aiokafka's own records (bench/ingest.py's `aiokafka` variant; and a
# way out should a broker send what the reader has not met).
READER: Any
if os.environ.get("RAGMON_KAFKA_READER", "") == "aiokafka":
    READER, READER_KIND = None, "aiokafka's (RAGMON_KAFKA_READER=aiokafka)"
else:
    READER, READER_KIND = choose("Kafka record reader", "monitor/kafka/_records.c", _load)


def install() -> str:
    """Have aiokafka's fetcher use the compiled reader (idempotent); a word for the log."""
    if READER is not None:
        fetcher.PartitionRecords = _partition_records
        fetcher.MemoryRecords = _KeptRecords
        fetcher.FetchResult.getall = _getall
    return READER_KIND
