"""Request handling: one handler module per API, the replica manager and the fetch purgatory."""
