"""The compiled Kafka record reader (`monitor/kafka/_records.c`) against aiokafka's own
`PartitionRecords`, on the same record sets: every record's fields, the position after each one
and at the end, and the exception. Record sets are built with aiokafka's batch builders (v2
uncompressed and gzip, v0 and v1), with headers, null keys and values, log-append time, control
batches, a truncated last batch and fetch offsets inside a batch; then damaged at random."""

from __future__ import annotations

import asyncio
import os
import random
import struct
from typing import Any

import pytest
from aiokafka.consumer import fetcher
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder
from aiokafka.structs import ConsumerRecord, TopicPartition

from monitor.kafka import records

REQUIRED = os.environ.get("RAGMON_REQUIRE_COMPILED", "") not in ("", "0")
TP = TopicPartition("rag_spans", 2)
FIELDS = (
    "topic",
    "partition",
    "offset",
    "timestamp",
    "timestamp_type",
    "key",
    "value",
    "checksum",
    "serialized_key_size",
    "serialized_value_size",
    "headers",
)


@pytest.fixture(autouse=True)
def _compiled() -> None:
    if records.READER is None:
        if REQUIRED:
            pytest.fail(f"the compiled reader is required: {records.READER_KIND}")
        pytest.skip(records.READER_KIND)


def v2_batch(
    base: int,
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    *,
    codec: int = 0,
    log_append: bool = False,
    control: bool = False,
    first_delta: int = 0,
) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    for i, (key, value, headers) in enumerate(items):
        stamp = 1_700_000_000_000 + 7 * i
        builder.append(first_delta + i, timestamp=stamp, key=key, value=value, headers=headers)
    data = builder.build()
    struct.pack_into(">q", data, 0, base)
    if log_append or control:  # attributes at byte 21; the CRC is not checked by either reader
        attributes = struct.unpack_from(">h", data, 21)[0]
        struct.pack_into(">h", data, 21, attributes | (0x08 if log_append else 0) | (0x20 if control else 0))
    if log_append:
        struct.pack_into(">q", data, 35, 1_800_000_000_000)  # max timestamp: every record's
    return bytes(data)


def legacy_batch(base: int, magic: int, values: list[bytes]) -> bytes:
    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 30)
    for i, value in enumerate(values):
        builder.append(base + i, timestamp=1_700_000_000_000 if magic else None, key=b"k", value=value)
    return bytes(builder.build())


def read(make: Any, buffer: bytes, fetch_offset: int, take: int | None = None) -> dict[str, Any]:
    """Iterate as `FetchResult.getall` does (in runs of `take`): each record's fields and the
    position after it, the position at the end, and the exception's type and text."""
    got: list[tuple[Any, ...]] = []
    source = make(buffer, fetch_offset)
    error = None
    try:
        while True:
            for run, record in enumerate(source, 1):
                got.append((*(getattr(record, f) for f in FIELDS), source.next_fetch_offset))
                if take is not None and run >= take:
                    break
            else:
                break
    except Exception as exc:
        error = (type(exc).__name__, str(exc))
    return {"records": got, "end": source.next_fetch_offset, "error": error}


def stock(buffer: bytes, fetch_offset: int) -> Any:
    # aiokafka's own (`install()` replaces the fetcher's names, so not through them)
    return records._STOCK(
        TP, records.MemoryRecords(buffer), None, fetch_offset, None, None, False, fetcher.READ_UNCOMMITTED
    )


def compiled(buffer: bytes, fetch_offset: int) -> Any:
    reader = records._partition_records(
        TP, records._KeptRecords(buffer), None, fetch_offset, None, None, False, fetcher.READ_UNCOMMITTED
    )
    assert type(reader) is records.READER
    return reader


def record_set(rng: random.Random) -> tuple[bytes, list[int]]:
    """Batches of every kind, consecutive offsets; and the offsets a fetch may start at."""
    parts: list[bytes] = []
    offset = 100
    # One format a record set: aiokafka's compiled record set misreads a v2 batch after v0/v1
    # messages and a v0/v1 message after a v2 batch (reading one's fields at the other's places),
    # where the reader hands each older message to it alone and reads it right.
    legacy = rng.random() < 0.15
    for _ in range(rng.randint(1, 6)):
        kinds = ["v0", "v1"] if legacy else ["plain", "plain", "plain", "gzip", "log_append", "control"]
        kind = rng.choice(kinds)
        n = rng.randint(1, 12)
        if kind in ("v0", "v1"):
            values = [os.urandom(rng.randint(0, 300)) for _ in range(n)]
            parts.append(legacy_batch(offset, int(kind[1]), values))
            offset += n
            continue
        items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = []
        for _ in range(n):
            key = rng.choice([None, b"", os.urandom(16)])
            value = rng.choice([None, b"", os.urandom(rng.randint(1, 2000))])
            headers = rng.choice([[], [], [("traceparent", b"00-ab"), ("ünïcode", None), ("e", b"")]])
            items.append((key, value, headers))
        parts.append(
            v2_batch(
                offset,
                items,
                codec=1 if kind == "gzip" else 0,
                log_append=kind == "log_append",
                control=kind == "control",
            )
        )
        offset += n
    buffer = b"".join(parts)
    if rng.random() < 0.3:  # a fetch ends inside its last batch
        buffer += parts[-1][: rng.randint(1, len(parts[-1]) - 1)]
    return buffer, list(range(100, offset + 1))


def test_every_kind_of_batch_reads_as_aiokafka_reads_it() -> None:
    rng = random.Random(40)
    for _ in range(400):
        buffer, offsets = record_set(rng)
        fetch_offset = rng.choice(offsets)
        take = rng.choice([None, 1, 3])
        want = read(stock, buffer, fetch_offset, take)
        assert want["error"] is None
        assert read(compiled, buffer, fetch_offset, take) == want


def test_a_record_has_the_consumer_record_fields() -> None:
    buffer = v2_batch(5, [(b"trace-1", b"spans", [("h", b"v")]), (None, None, [])])
    first, second = list(compiled(buffer, 0))
    assert (first.topic, first.partition, first.offset, first.key, first.value) == (
        "rag_spans",
        2,
        5,
        b"trace-1",
        b"spans",
    )
    assert first.headers == (("h", b"v"),) and first.checksum is None
    sizes = (second.serialized_key_size, second.serialized_value_size)
    assert (second.key, second.value, sizes) == (None, None, (-1, -1))
    assert set(ConsumerRecord.__dataclass_fields__) == set(FIELDS)  # the fields compared are all of them


def formats(buffer: bytes) -> set[int]:
    """The magic bytes of a record set's batches (as far as their lengths can be followed)."""
    seen: set[int] = set()
    at = 0
    while at + 17 <= len(buffer):
        length = struct.unpack_from(">i", buffer, at + 8)[0]
        seen.add(buffer[at + 16])
        if length < 0:
            break
        at += 12 + length
    return seen


def test_damaged_record_sets_fail_as_aiokafka_fails_them() -> None:
    """Bytes flipped, cut or inserted. Where aiokafka reads the damaged set to its end, the reader
    reads the same; where aiokafka raises, the reader raises the same exception, having yielded
    what aiokafka yielded before (up to the damaged batch, of which aiokafka may yield a part
    before it raises: the reader leaves that batch to aiokafka whole). Except where the damage
    mixed formats in one set, which aiokafka misreads (above): there the two may differ."""
    rng = random.Random(41)
    read_alike = failed_alike = mixed = 0
    for _ in range(3000):
        buffer, offsets = record_set(rng)
        data = bytearray(buffer)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            what = rng.random()
            if what < 0.6:
                data[at] = rng.randrange(256)
            elif what < 0.8:
                del data[at : at + rng.randint(1, 8)]
            else:
                data[at:at] = os.urandom(rng.randint(1, 8))
        fetch_offset = rng.choice(offsets)
        want = read(stock, bytes(data), fetch_offset)
        got = read(compiled, bytes(data), fetch_offset)
        if len(formats(bytes(data))) > 1:
            mixed += 1  # read or raised, never a crash
        elif want["error"] is None:
            assert got == want
            read_alike += 1
        else:
            assert got["error"] is not None, want["error"]
            assert got["error"][0] == want["error"][0], (got["error"], want["error"])
            assert want["records"][: len(got["records"])] == got["records"]
            failed_alike += 1
    assert min(read_alike, failed_alike) > 300, (read_alike, failed_alike, mixed)


def test_install_leaves_other_consumers_to_aiokafka() -> None:
    """Deserializers, a CRC check or read_committed: aiokafka's own PartitionRecords."""
    buffer = v2_batch(0, [(b"k", b"v", [])])
    kept = records._KeptRecords(buffer)
    args: list[tuple[Any, ...]] = [
        (str, None, False, fetcher.READ_UNCOMMITTED),
        (None, bytes, False, fetcher.READ_UNCOMMITTED),
        (None, None, True, fetcher.READ_UNCOMMITTED),
        (None, None, False, fetcher.READ_COMMITTED),
    ]
    for key_d, value_d, crcs, isolation in args:
        made = records._partition_records(TP, kept, None, 0, key_d, value_d, crcs, isolation)
        assert type(made) is records._STOCK


def test_getall_takes_what_aiokafka_takes_in_runs_of_max_records() -> None:
    """`FetchResult.getall` with the reader (its loop in C) against aiokafka's own, on real
    subscription state: the runs of records, the consumer's position after each, and when the
    fetch result is spent."""
    from aiokafka.consumer.subscription_state import SubscriptionState

    async def takes(buffer: bytes, fetch_offset: int, max_records: int | None, ours: bool) -> list[Any]:
        subscription = SubscriptionState()
        subscription.assign_from_user({TP})
        assignment = subscription.subscription.assignment
        assignment.state_value(TP).seek(fetch_offset)
        made = compiled(buffer, fetch_offset) if ours else stock(buffer, fetch_offset)
        result = fetcher.FetchResult(TP, assignment=assignment, partition_records=made, backoff=0)
        getall = records._getall if ours else records._STOCK_GETALL
        runs: list[Any] = []
        while result.has_more():
            run = getall(result, max_records)
            runs.append(([r.offset for r in run], assignment.state_value(TP).position, result.has_more()))
        return runs

    rng = random.Random(42)
    for _ in range(200):
        buffer, offsets = record_set(rng)
        fetch_offset = rng.choice(offsets)
        max_records = rng.choice([None, 1, 2, 5, 50])
        want = asyncio.run(takes(buffer, fetch_offset, max_records, ours=False))
        assert asyncio.run(takes(buffer, fetch_offset, max_records, ours=True)) == want


def test_compressed_batches_are_read_here_not_handed_to_aiokafka() -> None:
    """Production topics are often compressed: each codec aiokafka can read here (gzip always;
    snappy, lz4 and zstd with their libraries) is decompressed with aiokafka's codec and its
    records read by the reader, never by aiokafka's per-record code."""
    from aiokafka import codec

    available = {1: codec.has_gzip(), 2: codec.has_snappy(), 3: codec.has_lz4(), 4: codec.has_zstd()}
    items: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
        (b"trace-%d" % i, b"spans " * 200, [("h", b"v")] if i % 3 == 0 else []) for i in range(40)
    ]

    def refuse(chunk: bytes, next_offset: int) -> tuple[list[Any], int]:
        raise AssertionError("handed to aiokafka")

    read_here = 0
    for codec_id, present in available.items():
        if not present:
            continue
        buffer = v2_batch(10, items, codec=codec_id)
        assert buffer[22] & 0x07 == codec_id  # compressed, not written plain for want of gain
        reader = records.READER(buffer, TP.topic, TP.partition, 12, refuse, records._decompress)
        want = read(stock, buffer, 12)
        assert [(r.offset, r.key, r.value, r.headers) for r in reader] == [
            (w[2], w[5], w[6], w[10]) for w in want["records"]
        ]
        assert reader.next_fetch_offset == want["end"] == 50
        read_here += 1
    assert read_here >= 1
