"""AlterUserScramCredentials (51): upsert (salted password in, StoredKey and ServerKey kept)
or delete users' SCRAM credentials; needs Alter on the cluster. Checked per user as Kafka's
ScramControlManager does; a single node writes its metadata image, a cluster etcd (the answer
waits for it)."""

from __future__ import annotations

from oncelog.broker import authz
from oncelog.broker.cluster_view import answer_when_written
from oncelog.broker.context import BrokerContext, RequestContext
from oncelog.broker.handlers.types import (
    AlterUserScramCredentialsAnswer,
    AlterUserScramCredentialsRequest,
)
from oncelog.broker.purgatory import Delayed
from oncelog.errors import ErrorCode
from oncelog.security.acl import AclOperation
from oncelog.security.credentials import Change, plan_alter

#: How long a cluster's answer waits for etcd.
WRITE_TIMEOUT_MS = 30_000


def handle(
    ctx: RequestContext, request: AlterUserScramCredentialsRequest
) -> AlterUserScramCredentialsAnswer | Delayed:
    if not authz.authorize_cluster(ctx, AclOperation.ALTER):
        users = dict.fromkeys(
            [d.name for d in request.deletions] + [u.name for u in request.upsertions]
        )
        return {
            "throttle_time": 0,
            "results": [
                {
                    "user": user,
                    "error_code": ErrorCode.cluster_authorization_failed,
                    "error_message": "Cluster authorization failed.",
                }
                for user in users
            ],
        }
    broker = ctx.broker
    results, changes = plan_alter(broker.scram, request.deletions, request.upsertions)
    response: AlterUserScramCredentialsAnswer = {"throttle_time": 0, "results": results}
    ops = broker.cluster_ops
    if not changes:
        return response
    if ops is None:
        _apply_local(broker, changes)
        return response
    op = ops.write_scram(changes)
    changed = {change.user for change in changes}

    def fail(code: ErrorCode, message: str) -> None:
        for result in results:
            if result["user"] in changed:
                result.update(error_code=code, error_message=message)

    return answer_when_written(op, broker.clock.monotonic_ms() + WRITE_TIMEOUT_MS, response, fail)


def _apply_local(broker: BrokerContext, changes: list[Change]) -> None:
    """A single node: the credentials and its metadata image (one atomic, checksummed file)."""
    for change in changes:
        if change.credential is None:
            broker.scram.remove(change.user, change.mechanism)
        else:
            broker.scram.put(change.user, change.mechanism, change.credential)
    broker.replicas.metadata.set_scram(broker.scram.to_json())
