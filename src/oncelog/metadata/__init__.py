"""Cluster metadata: topics, their ids, partition counts and config overrides."""
