"""oncelog: a Kafka-compatible message broker with exactly-once semantics."""

__version__ = "0.1.0"
