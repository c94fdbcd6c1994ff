"""CreateTopics (19): validated per topic; `validate_only` checks without creating."""

from __future__ import annotations

from collections import Counter
from typing import Any

from oncelog.broker.context import RequestContext
from oncelog.broker.handlers.describe_configs import describe_topic_configs
from oncelog.broker.handlers.metadata import ZERO_UUID
from oncelog.broker.replica_manager import TopicSpec
from oncelog.config import validate_topic_configs
from oncelog.errors import ErrorCode, InvalidReplicationFactor, InvalidRequest, KafkaError


def handle(ctx: RequestContext, request: Any) -> dict[str, Any]:
    replicas = ctx.broker.replicas
    counts = Counter(t.name for t in request.topics)
    results = []
    for topic in request.topics:
        result: dict[str, Any] = {
            "name": topic.name,
            "topic_id": ZERO_UUID,
            "error_code": ErrorCode.none,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        try:
            if counts[topic.name] > 1:
                raise InvalidRequest(f"Topic {topic.name} appears more than once in the request")
            spec = _spec(ctx, topic)
            partitions, _ = replicas.validate_topic(spec)
            # Kafka's cross-key rules see the broker's defaults under the topic's overrides.
            validate_topic_configs(spec.configs, ctx.broker.config.topic_defaults())
            if request.validate_only:
                result.update(num_partitions=partitions, replication_factor=1)
            else:
                image = replicas.create_topic(spec)
                result.update(
                    topic_id=image.topic_id,
                    num_partitions=image.partitions,
                    replication_factor=1,
                    configs=[
                        {
                            "name": c["name"],
                            "value": c["value"],
                            "read_only": False,
                            "config_source": c["config_source"],
                            "is_sensitive": False,
                        }
                        for c in describe_topic_configs(ctx, topic.name, None, False)
                    ],
                )
        except KafkaError as exc:
            result.update(error_code=exc.code, error_message=str(exc))
        results.append(result)
    return {"throttle_time": 0, "topics": results}


def _spec(ctx: RequestContext, topic: Any) -> TopicSpec:
    partitions = topic.num_partitions
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise InvalidRequest(
                "Both numPartitions or replicationFactor and replicasAssignments were set."
            )
        for assignment in topic.assignments:
            if list(assignment.broker_ids) != [ctx.broker.node.node_id]:
                raise InvalidReplicationFactor(
                    f"Replica assignment {list(assignment.broker_ids)} names unknown brokers"
                )
        partitions = len(topic.assignments)
    configs = {c.name: c.value for c in topic.configs}
    replication = -1 if topic.assignments else topic.replication_factor
    return TopicSpec(topic.name, partitions, replication, configs)
