"""Compression codecs of record batches, with a hard cap on decompressed size.

The broker decompresses only to validate a batch; stored batches stay as the producer
compressed them. The cap bounds the memory a decompression bomb can make us allocate.
"""

from __future__ import annotations

import gzip
import struct
import zlib
from enum import IntEnum

import lz4.frame
import snappy
import zstandard

from oncelog.protocol.records.batch import HEADER_SIZE, BatchHeader

MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
_XERIAL_MAGIC = b"\x82SNAPPY\x00"


class Codec(IntEnum):
    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class DecompressionError(ValueError):
    """The payload does not decompress, or decompresses to more than the cap."""


def batch_records(data: bytes | memoryview, pos: int, header: BatchHeader) -> bytes:
    """The record bytes of the stored batch at `pos`, decompressed if it is compressed."""
    body = data[pos + HEADER_SIZE : pos + header.size]
    return decompress(header.compression, body) if header.compression else bytes(body)


def decompress(codec: int, data: bytes | memoryview, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Decompress `data` with `codec`, refusing to produce more than `limit` bytes."""
    try:
        if codec == Codec.GZIP:
            return _gunzip(bytes(data), limit)
        if codec == Codec.SNAPPY:
            return _unsnappy(bytes(data), limit)
        if codec == Codec.LZ4:
            return _unlz4(bytes(data), limit)
        if codec == Codec.ZSTD:
            return _unzstd(bytes(data), limit)
    except DecompressionError:
        raise
    except Exception as exc:  # each library raises its own types on garbage
        raise DecompressionError(f"{Codec(codec).name} payload does not decompress: {exc}") from exc
    raise DecompressionError(f"unknown compression codec {codec}")


def compress(codec: int, data: bytes) -> bytes:
    """Compress records (used by tests and the console producer)."""
    if codec == Codec.GZIP:
        return gzip.compress(data)
    if codec == Codec.SNAPPY:
        return bytes(snappy.compress(data))
    if codec == Codec.LZ4:
        return bytes(lz4.frame.compress(data))
    if codec == Codec.ZSTD:
        return bytes(zstandard.ZstdCompressor().compress(data))
    return data


def _too_big(limit: int) -> DecompressionError:
    return DecompressionError(f"decompressed size exceeds the cap of {limit} bytes")


def _gunzip(data: bytes, limit: int) -> bytes:
    d = zlib.decompressobj(wbits=47)  # gzip or zlib header
    out = d.decompress(data, limit + 1)
    if len(out) > limit:
        raise _too_big(limit)
    if not d.eof:
        raise DecompressionError("truncated gzip stream")
    return out


def _unsnappy(data: bytes, limit: int) -> bytes:
    if data.startswith(_XERIAL_MAGIC):
        # Java clients frame snappy in xerial blocks: header(16) then [len int32][block]...
        pos, parts, total = 16, [], 0
        while pos < len(data):
            if pos + 4 > len(data):
                raise DecompressionError("truncated xerial snappy block header")
            (size,) = struct.unpack_from(">i", data, pos)
            pos += 4
            if size < 0 or pos + size > len(data):
                raise DecompressionError("xerial snappy block overruns the payload")
            block = data[pos : pos + size]
            total += _snappy_length(block)
            if total > limit:
                raise _too_big(limit)
            parts.append(snappy.uncompress(block))
            pos += size
        return b"".join(parts)
    if _snappy_length(data) > limit:
        raise _too_big(limit)
    return bytes(snappy.uncompress(data))


def _snappy_length(block: bytes) -> int:
    """The uncompressed length a raw snappy block declares in its varint preamble."""
    result = shift = 0
    for i, byte in enumerate(block[:5]):
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result
        shift += 7
        if i == 4:
            break
    raise DecompressionError("bad snappy length preamble")


def _unlz4(data: bytes, limit: int) -> bytes:
    d = lz4.frame.LZ4FrameDecompressor()
    out = d.decompress(data, max_length=limit + 1)
    if len(out) > limit or (not d.eof and not d.needs_input):
        raise _too_big(limit)
    if not d.eof:
        raise DecompressionError("truncated lz4 frame")
    return bytes(out)


def _unzstd(data: bytes, limit: int) -> bytes:
    parts: list[bytes] = []
    total = 0
    with zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True) as reader:
        while True:
            chunk = reader.read(min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            parts.append(chunk)
            total += len(chunk)
            if total > limit:
                raise _too_big(limit)
    _check_zstd_frames(data)
    return b"".join(parts)


_ZSTD_MAGIC = 0xFD2FB528
_ZSTD_DICT_ID_SIZES = (0, 1, 2, 4)


def _check_zstd_frames(data: bytes) -> None:
    """Raise unless `data` is whole zstd frames: the reader returns the partial output of a
    truncated frame without complaint, where Kafka's (zstd-jni) fails. Walks only frame and
    block headers (RFC 8878), so it costs per block, not per byte."""
    pos, end = 0, len(data)
    while pos < end:
        if end - pos < 8:
            raise DecompressionError("truncated zstd frame header")
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame: magic, size, payload
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise DecompressionError("data after the zstd frames")
        fhd = data[pos + 4]
        single_segment = (fhd >> 5) & 1
        fcs_size = (single_segment, 2, 4, 8)[fhd >> 6]
        pos += 5 + (1 - single_segment) + _ZSTD_DICT_ID_SIZES[fhd & 3] + fcs_size
        last = 0
        while not last:
            if end - pos < 3:
                raise DecompressionError("truncated zstd frame")
            block = int.from_bytes(data[pos : pos + 3], "little")
            last, kind, size = block & 1, (block >> 1) & 3, block >> 3
            pos += 3 + (1 if kind == 1 else size)  # an RLE block stores its byte once
        pos += 4 if fhd & 0x04 else 0  # content checksum
    if pos != end:
        raise DecompressionError("truncated zstd frame")
