"""A small blocking Kafka client on the protocol layer, for the operator tools."""
