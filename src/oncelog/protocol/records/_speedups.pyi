from typing import Any, TypeVar

def check_records(
    buf: bytes | bytearray | memoryview, start: int, end: int, count: int, /
) -> tuple[str, int, int] | None: ...
def scan_records(
    body: bytes | bytearray | memoryview, count: int, /
) -> list[tuple[int, int, int, int, int, int, int, int, int]]: ...
T = TypeVar("T")

def check_client_batch(
    buf: bytes | bytearray | memoryview, max_message_bytes: int, require_key: bool, cls: type[T], /
) -> T | None: ...
def read_produce(
    view: memoryview,
    offset: int,
    flexible: bool,
    request_cls: type[T],
    topic_cls: type[object],
    partition_cls: type[object],
    /,
) -> T | None: ...
def encode_produce_response(
    version: int,
    correlation_id: int,
    answer: object,
    answer_keys: frozenset[str],
    partition_keys: frozenset[str],
    /,
) -> bytes | None: ...
def encode_fetch_response(
    version: int,
    correlation_id: int,
    answer: object,
    answer_keys: frozenset[str],
    partition_keys: frozenset[str],
    region_type: type[object],
    /,
) -> list[Any] | None: ...
def read_fetch_response(
    view: memoryview,
    offset: int,
    version: int,
    response_cls: type[T],
    topic_cls: type[object],
    partition_cls: type[object],
    aborted_cls: type[object],
    known_errors: frozenset[int],
    /,
) -> T | None: ...
def stamp_batch(
    data: bytes | bytearray | memoryview, base_offset: int, leader_epoch: int, header: T, /
) -> tuple[bytes, T]: ...
def read_fetch(
    view: memoryview,
    offset: int,
    version: int,
    request_cls: type[T],
    topic_cls: type[object],
    partition_cls: type[object],
    forgotten_cls: type[object],
    /,
) -> T | None: ...
def new_buffer(n: int, /) -> bytearray: ...
def grow_buffer(buf: bytearray, n: int, /) -> None: ...
def reserve_blocks(fd: int, offset: int, length: int, /) -> bool: ...
def append_records(
    body: bytes | bytearray | memoryview,
    count: int,
    base_offset: int,
    base_timestamp: int,
    append_time: int,
    lo: int,
    hi: int,
    cols: list[bytearray],
    with_headers: bool,
    /,
) -> int: ...
