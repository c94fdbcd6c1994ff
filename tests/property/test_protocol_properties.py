"""Property tests of framing and request decoding on arbitrary input."""

from __future__ import annotations

import contextlib
import os
import signal
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from oncelog.protocol import framing
from oncelog.protocol.codec import DecodeError, decode_request, is_flexible, request_class
from oncelog.protocol.framing import SCRATCH_BYTES, FrameDecoder, FrameError, frame
from oncelog.protocol.registry import SUPPORTED_VERSIONS

FAST = settings(deadline=None, max_examples=150, suppress_health_check=[HealthCheck.too_slow])


# -- framing --------------------------------------------------------------------------------


@FAST
@given(st.lists(st.binary(max_size=300), max_size=8), st.data())
def test_frame_decoder_with_arbitrary_chunking(payloads: list[bytes], data: st.DataObject) -> None:
    stream = b"".join(frame(p) for p in payloads)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=20)))
    decoder = FrameDecoder(300)
    got: list[bytes] = []
    start = 0
    for cut in [*cuts, len(stream)]:
        got += decoder.feed(stream[start:cut])
        start = cut
    assert got == payloads
    assert decoder.buffered == 0 and not decoder.in_frame


@FAST
@given(st.lists(st.binary(max_size=50), min_size=1, max_size=5), st.integers(1, 7))
def test_frame_decoder_byte_by_byte(payloads: list[bytes], step: int) -> None:
    stream = b"".join(frame(p) for p in payloads)
    decoder = FrameDecoder(50)
    got: list[bytes] = []
    for i in range(0, len(stream), step):
        got += decoder.feed(stream[i : i + step])
        assert decoder.buffered <= i + step
    assert got == payloads


_AROUND_LIMITS = [
    0,
    1,
    3,
    65_535,
    65_536,
    100_000,
    262_140,
    262_141,
    300_000,
    1 << 20,
    (1 << 20) + 7,
]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(_AROUND_LIMITS), max_size=4), st.data())
def test_frame_decoder_large_frames_received_in_place(
    sizes: list[int], data: st.DataObject
) -> None:
    """Frames around the scratch buffer's size and the in-place limit, received the way the
    socket delivers them: into `get_buffer`, in arbitrary amounts."""
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    stream = memoryview(b"".join(frame(p) for p in payloads))
    decoder = FrameDecoder(2 << 20)
    got: list[bytes] = []
    pos = 0
    while pos < len(stream):
        buf = decoder.get_buffer()
        want = data.draw(st.integers(1, 200_000))
        n = min(len(buf), want, len(stream) - pos)
        buf[:n] = stream[pos : pos + n]
        if data.draw(st.booleans()):  # uvloop lets go of it first; asyncio's transports not
            buf.release()
        pos += n
        got += [bytes(f) for f in decoder.received(n)]
        assert decoder.frame_size == _declared_at(sizes, pos)
    assert got == payloads
    assert decoder.buffered == 0 and not decoder.in_frame


def _declared_at(sizes: list[int], pos: int) -> int:
    """What `frame_size` says `pos` bytes into frames of `sizes`: the size of the frame that
    `pos` is inside once its 4-byte length is in, the bytes of it so far before that, and 0
    between frames."""
    start = 0
    for size in sizes:
        end = start + 4 + size
        if start < pos < end:
            return size if pos - start >= 4 else pos - start
        start = end
    return 0


@pytest.mark.parametrize("helper", ["c", "python"])
def test_a_large_frame_keeps_its_head_where_it_was_received(
    helper: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scratch buffer a large frame began in becomes the frame's (no copy of the
    256 KiB head) when nothing else views it, and a new scratch buffer takes what follows;
    with the C helper's buffers and with plain bytearrays alike."""
    if helper == "python":
        monkeypatch.setattr(framing, "_speedups", None)
    elif framing._speedups is None:
        pytest.fail("the C helper is not built")
    size = SCRATCH_BYTES + 1000
    stream = frame(bytes(range(256)) * (size // 256) + b"x" * (size % 256)) + frame(b"next")
    decoder = FrameDecoder(2 << 20)
    first = decoder.get_buffer()
    first_buffer = first.obj
    first[:] = stream[: len(first)]
    taken = len(first)
    first.release()
    assert decoder.received(taken) == []
    rest = decoder.get_buffer()
    assert rest.obj is first_buffer and len(rest) == size + 4 - taken
    rest[:] = stream[taken : size + 4]
    rest.release()
    (done,) = decoder.received(size + 4 - taken)
    assert done.obj is first_buffer and done.readonly and bytes(done) == stream[4 : size + 4]
    assert decoder.feed(stream[size + 4 :]) == [b"next"]


def test_a_frame_of_64_kib_or_more_is_a_view_of_the_buffer_it_arrived_in() -> None:
    """Not copied out: the decoder leaves it its scratch buffer and moves on with the bytes
    after it (here the start of the next frame) in a new one."""
    big = bytes(range(256)) * 400
    stream = frame(b"small") + frame(big) + frame(b"after")
    decoder = FrameDecoder(1 << 20)
    small, whole = decoder.feed(stream[:-3])
    assert isinstance(small, bytes) and small == b"small"
    assert isinstance(whole, memoryview) and whole.readonly and bytes(whole) == big
    assert decoder.buffered == len(frame(b"after")) - 3
    assert decoder.feed(stream[-3:]) == [b"after"]
    assert bytes(whole) == big  # the next frames went to another buffer


def test_frame_decoder_costs_what_a_peer_sent_beyond_the_in_place_limit() -> None:
    """A peer announcing a 50 MB frame and sending 10 bytes makes us hold about that."""
    decoder = FrameDecoder(100 << 20)
    tracemalloc.start()
    try:
        assert decoder.feed((50 << 20).to_bytes(4, "big") + b"0123456789") == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 10
    assert peak < SCRATCH_BYTES + 64 * 1024


def test_frame_decoder_trickled_into_fills_one_chunk_at_a_time() -> None:
    """Beyond the in-place limit a chunk is filled before the next is made, so a peer
    sending a huge frame a byte at a time costs what it sent, not a chunk per byte."""
    decoder = FrameDecoder(100 << 20)
    decoder.feed((50 << 20).to_bytes(4, "big") + b"x" * 10)
    tracemalloc.start()
    try:
        for _ in range(200):
            buf = decoder.get_buffer()
            buf[:1] = b"y"
            assert decoder.received(1) == []
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert decoder.buffered == 210
    assert peak < SCRATCH_BYTES + 64 * 1024


@FAST
@given(st.binary(max_size=10), st.integers(-(2**31), 2**31 - 1), st.integers(0, 1000))
def test_frame_decoder_rejects_bad_lengths(before: bytes, size: int, limit: int) -> None:
    decoder = FrameDecoder(limit)
    prefix = frame(before)
    bad = size.to_bytes(4, "big", signed=True)
    assert decoder.feed(prefix) == [before] if len(before) <= limit else True
    if 0 <= size <= limit:
        assert decoder.feed(bad) == ([b""] if size == 0 else [])
        return
    if len(before) > limit:
        return
    with pytest.raises(FrameError):
        decoder.feed(bad)


# -- request decoding -----------------------------------------------------------------------

PAIRS = [(int(k), v) for k, (lo, hi) in SUPPORTED_VERSIONS.items() for v in range(lo, hi + 1)]
RIGID = [p for p in PAIRS if not is_flexible(*p)]
FLEXIBLE = [p for p in PAIRS if is_flexible(*p)]


def _decode(cls: type[Any], data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode_request(cls, data, 0)


@FAST
@given(st.sampled_from(RIGID), st.binary(max_size=120))
@example((21, 0), b"\x7f\xff\xff\xff")  # an array of 2**31 - 1 topics in 4 bytes
@example((3, 0), b"\xff\xff\xff\xff")
def test_decode_request_non_flexible_raises_only_decode_error(
    pair: tuple[int, int], data: bytes
) -> None:
    _decode(request_class(*pair), data)


def _outcome_in_child(cls: type[Any], data: bytes) -> str:
    """Decode in a forked child: kio's native reader once aborted the whole process (out of
    memory) on a huge declared array count, which must show as a failure, not a crash."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        os.close(read_fd)
        os.close(2)  # the native abort prints a backtrace
        try:
            decode_request(cls, data, 0)
            result = "ok"
        except DecodeError:
            result = "DecodeError"
        except BaseException as exc:
            result = type(exc).__name__
        os.write(write_fd, result.encode())
        os._exit(0)
    os.close(write_fd)
    with os.fdopen(read_fd, "rb") as pipe:
        result = pipe.read().decode()
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return result


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(FLEXIBLE), st.binary(max_size=60))
@example((21, 2), bytes.fromhex("fff2eaaa7f"))  # a compact array of ~2**35 topics
@example((21, 2), bytes.fromhex("ffffffff0f"))
@example((3, 12), bytes.fromhex("ff80ffff7f"))
def test_decode_request_flexible_raises_only_decode_error(
    pair: tuple[int, int], data: bytes
) -> None:
    assert _outcome_in_child(request_class(*pair), data) in ("ok", "DecodeError")
