"""Batch reads (`spark.read.format("oncelog")`): startingOffsets..endingOffsets, resolved once."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from oncelog.spark.kafka_read import OffsetFetcher, check_data_loss, read_range
from oncelog.spark.offsets import EARLIEST_SENTINEL, LATEST_SENTINEL, resolve
from oncelog.spark.options import SourceOptions
from oncelog.spark.partitions import RangePartition, plan_ranges
from oncelog.spark.read_errors import DataLossError


class KafkaBatchReader(DataSourceReader):
    """Plans one input partition per offset range on the driver; reads them on executors."""

    def __init__(self, options: SourceOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        fetcher = OffsetFetcher(self.options)
        try:
            tps = fetcher.partitions()
            earliest, latest = fetcher.watermarks(tps)
        finally:
            fetcher.close()
        start = resolve(
            self.options.starting_offsets,
            tps,
            earliest,
            latest,
            "startingOffsets",
            EARLIEST_SENTINEL,
        )
        end = resolve(
            self.options.ending_offsets, tps, earliest, latest, "endingOffsets", LATEST_SENTINEL
        )
        behind = [
            f"{t}-{p}: {start[(t, p)]} > {end[(t, p)]}"
            for t, p in tps
            if start[(t, p)] > end[(t, p)]
        ]
        if behind and self.options.fail_on_data_loss:
            raise DataLossError(
                "startingOffsets is after endingOffsets or the latest offset for "
                + ", ".join(behind)
                + " (set failOnDataLoss=false to read nothing from those partitions)"
            )
        start = check_data_loss(start, earliest, self.options.fail_on_data_loss)
        ranges = plan_ranges(start, end, self.options.min_partitions)
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, RangePartition):
            yield from read_range(self.options, partition.range, self.schema)
