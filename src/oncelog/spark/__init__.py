"""Spark connector: the `oncelog` Python data source (Kafka source + exactly-once sink).

Speaks only the Kafka protocol through confluent-kafka, so it works against any Kafka cluster.
"""

from oncelog.spark.datasource import OncelogDataSource, register

__all__ = ["OncelogDataSource", "register"]
