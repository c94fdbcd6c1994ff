"""Replication between brokers: the leader's view of its followers and the follower's fetch
position and truncation, as sans-IO state machines (see README.md)."""
