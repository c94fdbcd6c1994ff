"""One member of a classic group: its subscription, assignment, session and pending replies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Response = dict[str, Any]


@dataclass(eq=False)
class Waiter:
    """A reply a member waits for (JoinGroup or SyncGroup), filled in by the coordinator.

    The broker keeps it in its purgatory; `fallback` is sent if nothing fills it in time.
    """

    fallback: Response
    result: Response | None = None

    def complete(self, response: Response) -> None:
        if self.result is None:
            self.result = response


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    last_heartbeat_ms: int = 0
    awaiting_join: Waiter | None = None
    awaiting_sync: Waiter | None = None
    #: True until the member's first join completes (it has no generation yet).
    is_new: bool = True

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata_for(self, protocol: str | None) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def same_protocols(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def session_deadline_ms(self) -> int | None:
        """When the member expires, or None while it waits for a join or sync reply."""
        if self.awaiting_join is not None or self.awaiting_sync is not None:
            return None
        return self.last_heartbeat_ms + self.session_timeout_ms

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")
