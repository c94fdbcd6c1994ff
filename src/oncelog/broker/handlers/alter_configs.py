"""AlterConfigs (33), the legacy form: each resource's entries replace all its overrides
(topic configs, or one broker entity's dynamic configs). Shares IncrementalAlterConfigs'
flow and checks (`incremental_alter_configs.alter`)."""

from __future__ import annotations

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.incremental_alter_configs import alter
from oncelog.broker.handlers.types import AlterConfigsAnswer, AlterConfigsRequest
from oncelog.broker.purgatory import Delayed


def handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsAnswer | Delayed:
    return alter(ctx, request, incremental=False)
