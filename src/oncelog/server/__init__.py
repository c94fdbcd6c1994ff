"""The broker's only asyncio and socket code: listener, connections, timers."""
