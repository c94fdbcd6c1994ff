"""Test harnesses that run the broker in this process (no sockets, a manual clock)."""
