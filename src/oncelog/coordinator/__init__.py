"""Coordinators: sans-IO, event-sourced state machines behind internal topics (groups now,
transactions later). They never do IO or read the clock themselves."""
