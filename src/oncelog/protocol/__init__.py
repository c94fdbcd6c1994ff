"""Kafka wire protocol: framing, headers, the API registry and the v2 record-batch codec. No IO."""
