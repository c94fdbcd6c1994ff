"""Durable partition logs: segments, sparse indexes, recovery, retention, the log manager."""
