"""Compression codecs: round trips, the Java framings, and the decompression cap."""

from __future__ import annotations

import gzip
import struct
import zlib

import lz4.frame
import pytest
import snappy
import zstandard

from oncelog.protocol.records.compression import Codec, DecompressionError, compress, decompress

CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]
PAYLOAD = b"".join(i.to_bytes(2, "big") * 3 for i in range(2000))  # 12000 bytes


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip(codec: Codec) -> None:
    packed = compress(codec, PAYLOAD)
    assert packed != PAYLOAD and len(packed) < len(PAYLOAD)
    assert decompress(codec, packed) == PAYLOAD
    assert decompress(codec, memoryview(packed)) == PAYLOAD
    assert decompress(codec, compress(codec, b"")) == b""


def test_none_is_identity_for_compress_only() -> None:
    assert compress(Codec.NONE, b"abc") == b"abc"
    with pytest.raises(DecompressionError, match="unknown compression codec 0"):
        decompress(Codec.NONE, b"abc")
    with pytest.raises(DecompressionError, match="unknown compression codec 6"):
        decompress(6, b"abc")


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_cap_on_decompressed_size(codec: Codec) -> None:
    packed = compress(codec, PAYLOAD)
    assert decompress(codec, packed, limit=len(PAYLOAD)) == PAYLOAD
    with pytest.raises(DecompressionError, match="exceeds the cap of 11999 bytes"):
        decompress(codec, packed, limit=len(PAYLOAD) - 1)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_truncated_payload(codec: Codec) -> None:
    packed = compress(codec, PAYLOAD)
    with pytest.raises(DecompressionError):
        decompress(codec, packed[: len(packed) // 2])


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_garbage_payload(codec: Codec) -> None:
    with pytest.raises(DecompressionError):
        decompress(codec, b"\xff\xfe not compressed at all" * 3)


def test_gzip_accepts_zlib_and_gzip_headers() -> None:
    assert decompress(Codec.GZIP, gzip.compress(b"hello")) == b"hello"
    assert decompress(Codec.GZIP, zlib.compress(b"hello")) == b"hello"


def test_lz4_frame_from_another_writer() -> None:
    packed = lz4.frame.compress(PAYLOAD, block_size=lz4.frame.BLOCKSIZE_MAX64KB)
    assert decompress(Codec.LZ4, packed) == PAYLOAD


def test_zstd_multiple_frames() -> None:
    cctx = zstandard.ZstdCompressor()
    packed = cctx.compress(b"abc") + cctx.compress(b"def")
    assert decompress(Codec.ZSTD, packed) == b"abcdef"


def _xerial(*blocks: bytes) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for block in blocks:
        packed = snappy.compress(block)
        out += struct.pack(">i", len(packed)) + packed
    return out


def test_snappy_xerial_framing_of_java_clients() -> None:
    assert decompress(Codec.SNAPPY, _xerial(b"hello ", b"world")) == b"hello world"
    assert decompress(Codec.SNAPPY, _xerial()) == b""
    with pytest.raises(DecompressionError, match="exceeds the cap"):
        decompress(Codec.SNAPPY, _xerial(b"a" * 100, b"b" * 100), limit=150)
    data = _xerial(b"hello")
    with pytest.raises(DecompressionError, match="overruns"):
        decompress(Codec.SNAPPY, data[:-1])
    with pytest.raises(DecompressionError, match="truncated xerial"):
        decompress(Codec.SNAPPY, data + b"\x00\x00")
    negative = data[:16] + struct.pack(">i", -1) + data[20:]
    with pytest.raises(DecompressionError, match="overruns"):
        decompress(Codec.SNAPPY, negative)


def test_snappy_bomb_is_refused_from_its_preamble() -> None:
    # a raw snappy block that claims 2 GiB: refused before any allocation
    claim = bytes([0x80, 0x80, 0x80, 0x80, 0x08])
    with pytest.raises(DecompressionError, match="exceeds the cap"):
        decompress(Codec.SNAPPY, claim + b"\x00" * 10)
    with pytest.raises(DecompressionError, match="preamble"):
        decompress(Codec.SNAPPY, b"\xff" * 5)
    with pytest.raises(DecompressionError, match="preamble"):
        decompress(Codec.SNAPPY, b"")
