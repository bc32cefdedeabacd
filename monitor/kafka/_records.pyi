"""Types of the compiled Kafka record reader (`_records.c`); see `monitor.kafka.records`."""

from collections.abc import Callable
from typing import Any

class Record:
    """One Kafka record, with aiokafka ConsumerRecord's fields."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    checksum: None
    serialized_key_size: int
    serialized_value_size: int
    headers: tuple[tuple[str, bytes | None], ...]

class Reader:
    """The records of one partition's fetched record set, as aiokafka's PartitionRecords yields them."""

    next_fetch_offset: int
    def __init__(
        self,
        buffer: bytes,
        topic: str,
        partition: int,
        fetch_offset: int,
        slow: Callable[[bytes, int], tuple[list[Any], int]],
    ) -> None: ...
    def __iter__(self) -> Reader: ...
    def __next__(self) -> Record: ...
    def take(self, max_records: int | None, /) -> tuple[list[Record], bool]: ...
