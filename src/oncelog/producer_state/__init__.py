"""Idempotent-producer state per partition: epochs, sequence numbers, duplicate detection."""
