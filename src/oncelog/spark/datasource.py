"""The `oncelog` Python data source: Spark's Kafka source and an exactly-once Kafka sink.

The format name is "oncelog" because "kafka" is reserved by Spark. Options are validated when a
reader is created, so a bad option fails the query at definition time with a clear message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from oncelog.spark.batch_reader import KafkaBatchReader
from oncelog.spark.kafka_read import source_schema
from oncelog.spark.options import parse_options
from oncelog.spark.stream_reader import KafkaStreamReader

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


class OncelogDataSource(DataSource):
    """`spark.read/readStream.format("oncelog")` and the matching writers."""

    @classmethod
    def name(cls) -> str:
        return "oncelog"

    def schema(self) -> StructType:
        lower = {str(k).lower(): str(v) for k, v in self.options.items()}
        include = lower.get("includeheaders", "false").strip().lower() == "true"
        return source_schema(include)

    def reader(self, schema: StructType) -> DataSourceReader:
        return KafkaBatchReader(parse_options(self.options, streaming=False), schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(parse_options(self.options, streaming=True), schema)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        # Imported lazily: the sink is a separate module with its own dependencies.
        from oncelog.spark.sink import KafkaBatchWriter

        return KafkaBatchWriter(dict(self.options), schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from oncelog.spark.sink import KafkaStreamWriter

        return KafkaStreamWriter(dict(self.options), schema, overwrite)


def register(spark: SparkSession) -> None:
    """Make `format("oncelog")` available in this Spark session."""
    spark.dataSource.register(OncelogDataSource)
