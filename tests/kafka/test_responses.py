"""Kafka responses read as chunks (`monitor/kafka/responses.py`): the bytes asyncio's own reader
gives, at every split of the stream into socket reads, ends and errors included; and over a real
loopback connection through aiokafka's protocol, with the socket paused and resumed."""

from __future__ import annotations

import asyncio
import os
import random
import struct

import pytest
from aiokafka import conn

from monitor.kafka import responses


def _frames(rng: random.Random, n: int) -> bytes:
    """Size-prefixed frames as a broker writes them: empty, tiny and multi-megabyte ones."""
    out = []
    for _ in range(n):
        size = rng.choice([0, 1, 3, 4, 17, 4096, rng.randrange(1, 300_000), rng.randrange(1, 3_000_000)])
        out.append(struct.pack(">i", size) + rng.randbytes(size))
    return b"".join(out)


def _split(rng: random.Random, data: bytes) -> list[bytes]:
    """The stream as socket reads would deliver it: 1 byte to 256 KiB a read."""
    pieces, i = [], 0
    while i < len(data):
        n = rng.choice([1, 2, 5, 64, 65536, 262144, rng.randrange(1, 262145)])
        pieces.append(data[i : i + n])
        i += n
    return pieces


async def _read_all(reader: asyncio.StreamReader, pieces: list[bytes], eof: bool) -> list[object]:
    """Feed `pieces` while reading frames; what each read gave, or the error that ended it."""
    got: list[object] = []

    async def feed() -> None:
        for piece in pieces:
            reader.feed_data(piece)
            await asyncio.sleep(0)
        if eof:
            reader.feed_eof()
        else:
            reader.set_exception(ConnectionResetError("gone"))

    feeder = asyncio.create_task(feed())
    try:
        while True:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            got.append(await reader.readexactly(size))
    except asyncio.IncompleteReadError as exc:
        got.append(("incomplete", exc.partial, exc.expected))
    except ConnectionResetError as exc:
        got.append(("error", str(exc)))
    await feeder
    got.append(("at_eof", reader.at_eof()))
    return got


@pytest.mark.parametrize("seed", range(12))
async def test_the_chunked_reader_gives_what_asyncios_reader_gives(seed: int) -> None:
    rng = random.Random(seed)
    data = _frames(rng, 12)
    if seed % 3 == 0:
        data = data[: rng.randrange(len(data))]  # the stream ends inside a frame
    pieces = _split(rng, data)
    eof = seed % 4 != 1
    loop = asyncio.get_running_loop()
    stock = asyncio.StreamReader(limit=2**16, loop=loop)
    chunked = asyncio.StreamReader(limit=2**16, loop=loop)
    responses._ChunkedReader.adopt(chunked)
    assert type(chunked).__name__ == "_ChunkedReader"
    expected = await _read_all(stock, pieces, eof)
    assert await _read_all(chunked, pieces, eof) == expected
    assert len(expected) > 2


async def test_frames_over_a_real_connection_through_aiokafkas_protocol() -> None:
    """A loopback server writes 3 MB frames faster than they are read: the socket is paused past
    twice the limit and resumed as frames are taken, and every frame arrives whole, in order."""
    frames = [os.urandom(size) for size in (3_000_000, 5, 2_500_000, 0, 3_000_000, 70_000)]
    stream = b"".join(struct.pack(">i", len(f)) + f for f in frames)

    async def serve(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(stream)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    loop = asyncio.get_running_loop()
    responses.install()
    assert conn.READER_LIMIT == 4 * 1024 * 1024
    reader = asyncio.StreamReader(limit=1024 * 1024, loop=loop)  # pauses past 2 MiB
    protocol = conn.AIOKafkaProtocol(loop.create_future(), reader, loop=loop)
    pauses = 0
    transport, _ = await loop.create_connection(lambda: protocol, "127.0.0.1", port)
    real_pause = transport.pause_reading

    def counted_pause() -> None:
        nonlocal pauses
        pauses += 1
        real_pause()

    transport.pause_reading = counted_pause  # type: ignore[method-assign]
    try:
        got = []
        for _ in frames:
            (size,) = struct.unpack(">i", await reader.readexactly(4))
            got.append(await reader.readexactly(size))
        assert got == frames
        with pytest.raises(asyncio.IncompleteReadError):
            await reader.readexactly(4)
        assert reader.at_eof()
        assert pauses >= 1  # the flow control is the reader's, not a buffer without bound
    finally:
        transport.close()
        server.close()
        await server.wait_closed()


def test_the_way_back_leaves_aiokafkas_connections_as_they_are(monkeypatch: pytest.MonkeyPatch) -> None:
    """`RAGMON_KAFKA_RESPONSES=aiokafka`: asyncio's reader and aiokafka's limit stay."""
    stock_protocol = responses._Protocol.__mro__[1]
    monkeypatch.setattr(conn, "AIOKafkaProtocol", stock_protocol)
    monkeypatch.setattr(conn, "READER_LIMIT", 2**16)
    monkeypatch.setenv("RAGMON_KAFKA_RESPONSES", "aiokafka")
    responses.install()
    assert (conn.AIOKafkaProtocol, conn.READER_LIMIT) == (stock_protocol, 2**16)
    monkeypatch.delenv("RAGMON_KAFKA_RESPONSES")
    responses.install()
    assert (conn.AIOKafkaProtocol, conn.READER_LIMIT) == (responses._Protocol, 4 * 1024 * 1024)
