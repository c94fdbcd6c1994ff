"""Streaming reads (`spark.readStream.format("oncelog")`): micro-batches over offset ranges.

The reader lives in Spark's long-running Python planner process on the driver; executors get a
pickled copy and only call `read`. Offsets are the JSON of `oncelog.spark.offsets`; the
resolved start of batch 0 (and of partitions discovered later) travels inside the end offset
so a replay after a driver crash reads exactly the journaled range. Supports admission control
(`maxOffsetsPerTrigger` as ReadMaxRows, budget shared by backlog) and Trigger.AvailableNow
(the latest offsets at start are the target; nothing beyond them is read).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from oncelog.spark.kafka_read import OffsetFetcher, check_data_loss, read_range
from oncelog.spark.offsets import (
    EARLIEST_SENTINEL,
    INITIAL_KEY,
    PartitionOffsets,
    effective_start,
    end_offset_json,
    from_json,
    initial_offset_json,
    resolve,
    to_json,
)
from oncelog.spark.options import SourceOptions
from oncelog.spark.partitions import RangePartition, limit_offsets, plan_ranges
from oncelog.spark.read_errors import DataLossError


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch planning on the driver, offset-range reads on executors."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._fetcher: OffsetFetcher | None = None
        self._initial: dict[str, Any] | None = None
        self._target: PartitionOffsets | None = None
        self._latest: PartitionOffsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Executors need only the options and schema, never the driver's consumer."""
        return {"options": self.options, "schema": self.schema}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["options"], state["schema"])  # type: ignore[misc]

    def _offsets(self) -> tuple[list[tuple[str, int]], PartitionOffsets, PartitionOffsets]:
        if self._fetcher is None:
            self._fetcher = OffsetFetcher(self.options)
        tps = self._fetcher.partitions()
        earliest, latest = self._fetcher.watermarks(tps)
        self._latest = latest
        return tps, earliest, latest

    def initialOffset(self) -> dict[str, Any]:
        """Resolved once per planner process; replays use the start carried by batch 0's end."""
        if self._initial is None:
            tps, earliest, latest = self._offsets()
            start = resolve(
                self.options.starting_offsets,
                tps,
                earliest,
                latest,
                "startingOffsets",
                EARLIEST_SENTINEL,
            )
            self._initial = initial_offset_json(start)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target: the latest offsets now; later data and partitions wait."""
        _, _, latest = self._offsets()
        self._target = dict(latest)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        tps, earliest, latest = self._offsets()
        previous = from_json(start)
        new_starts = {tp: earliest[tp] for tp in tps if tp not in previous}
        begin = {tp: previous.get(tp, new_starts.get(tp, 0)) for tp in tps}
        available = dict(latest)
        if self._target is not None:
            available = {tp: min(latest[tp], self._target.get(tp, begin[tp])) for tp in tps}
        available = {tp: max(off, begin[tp]) for tp, off in available.items()}
        if isinstance(limit, ReadMaxRows):
            end = limit_offsets(begin, available, limit.max_rows)
        else:
            end = available
        if end == previous and not new_starts and not start.get(INITIAL_KEY):
            return start
        return end_offset_json(start, end, new_starts)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin = effective_start(start, end)
        stop = from_json(end)
        begin = {tp: begin.get(tp, 0) for tp in stop}
        behind = [
            f"{t}-{p}: {begin[(t, p)]} > {o}" for (t, p), o in stop.items() if begin[(t, p)] > o
        ]
        if behind and self.options.fail_on_data_loss:
            raise DataLossError(
                "offsets went backwards (topic deleted and recreated?) for "
                + ", ".join(behind)
                + "; set failOnDataLoss=false to skip them"
            )
        if self._fetcher is None:
            self._fetcher = OffsetFetcher(self.options)
        earliest, _ = self._fetcher.watermarks(sorted(stop))
        begin = check_data_loss(begin, earliest, self.options.fail_on_data_loss)
        ranges = plan_ranges(begin, stop, self.options.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            yield from read_range(self.options, partition.range, self.schema)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to do: offsets live in Spark's checkpoint, never in a consumer group."""

    def stop(self) -> None:
        if self._fetcher is not None:
            self._fetcher.close()
            self._fetcher = None
