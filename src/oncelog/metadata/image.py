"""The metadata image of a single-node cluster, persisted as one checksummed file.

Kafka keeps this in the KRaft `__cluster_metadata` log; a single node needs only the latest
image, written atomically (`oncelog-metadata.json` in the first log dir) on every change.
`meta.properties` in each log dir carries node.id and cluster.id as Kafka's does.
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from oncelog.storage.files import read_checked_json, write_atomically, write_checked_json

METADATA_FILE = "oncelog-metadata.json"


@dataclass(frozen=True, slots=True)
class TopicImage:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: Mapping[str, str] = field(default_factory=dict)
    internal: bool = False


class MetadataImage:
    def __init__(self, path: Path, cluster_id: str, topics: dict[str, TopicImage]) -> None:
        self.path = path
        self.cluster_id = cluster_id
        self.topics = topics
        #: The ACL bindings as oncelog.security.acl stores them (AclBinding.to_json).
        self.acls: list[dict[str, Any]] = []
        #: Dynamic broker configs (IncrementalAlterConfigs): "" the cluster default, else a
        #: broker id, each mapping keys to values.
        self.broker_configs: dict[str, dict[str, str]] = {}
        #: Salted SCRAM credentials as oncelog.security.credentials stores them (never a
        #: password): {name, mechanism, salt, stored_key, server_key, iterations}.
        self.scram: list[dict[str, Any]] = []
        #: Client quotas (AlterClientQuotas): {entity: [[type, name or null], ...], quotas}.
        self.client_quotas: list[dict[str, Any]] = []

    @classmethod
    def load_or_create(cls, log_dir: Path, node_id: int) -> MetadataImage:
        log_dir.mkdir(parents=True, exist_ok=True)
        path = log_dir / METADATA_FILE
        if path.exists():
            data = read_checked_json(path)
            topics = {
                t["name"]: TopicImage(
                    t["name"],
                    uuid.UUID(t["topic_id"]),
                    int(t["partitions"]),
                    dict(t["configs"]),
                    bool(t.get("internal", False)),
                )
                for t in data["topics"]
            }
            image = cls(path, str(data["cluster_id"]), topics)
            image.acls = list(data.get("acls", []))
            image.scram = list(data.get("scram", []))
            image.client_quotas = list(data.get("client_quotas", []))
            image.broker_configs = {
                str(k): dict(v) for k, v in data.get("broker_configs", {}).items()
            }
        else:
            cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            image = cls(path, cluster_id, {})
            image.save()
        _write_meta_properties(log_dir, node_id, image.cluster_id)
        return image

    def save(self) -> None:
        write_checked_json(
            self.path,
            {
                "cluster_id": self.cluster_id,
                "topics": [
                    {
                        "name": t.name,
                        "topic_id": str(t.topic_id),
                        "partitions": t.partitions,
                        "configs": dict(t.configs),
                        "internal": t.internal,
                    }
                    for t in self.topics.values()
                ],
                "acls": self.acls,
                "broker_configs": self.broker_configs,
                "scram": self.scram,
                "client_quotas": self.client_quotas,
            },
        )

    def add_topic(self, topic: TopicImage) -> None:
        self.topics[topic.name] = topic
        self.save()

    def set_acls(self, acls: list[dict[str, Any]]) -> None:
        """Replace every ACL binding and write the image (CreateAcls, DeleteAcls)."""
        self.acls = acls
        self.save()

    def set_client_quotas(self, quotas: list[dict[str, Any]]) -> None:
        """Replace every client quota and write the image (AlterClientQuotas)."""
        self.client_quotas = quotas
        self.save()

    def set_scram(self, credentials: list[dict[str, Any]]) -> None:
        """Replace every SCRAM credential and write the image (AlterUserScramCredentials)."""
        self.scram = credentials
        self.save()

    @classmethod
    def format(
        cls, log_dir: Path, node_id: int, cluster_id: str, scram: list[dict[str, Any]]
    ) -> MetadataImage:
        """`oncelog storage format`: a new image (with SCRAM credentials) before first start."""
        log_dir.mkdir(parents=True, exist_ok=True)
        image = cls(log_dir / METADATA_FILE, cluster_id, {})
        image.scram = scram
        image.save()
        _write_meta_properties(log_dir, node_id, cluster_id)
        return image

    @staticmethod
    def is_formatted(log_dir: Path) -> bool:
        return (log_dir / METADATA_FILE).exists() or (log_dir / "meta.properties").exists()

    def set_broker_configs(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replace one entity's dynamic broker configs ("" the default) and write the image."""
        if configs:
            self.broker_configs[entity] = dict(configs)
        else:
            self.broker_configs.pop(entity, None)
        self.save()

    def remove_topic(self, name: str) -> TopicImage | None:
        topic = self.topics.pop(name, None)
        if topic is not None:
            self.save()
        return topic


def _write_meta_properties(log_dir: Path, node_id: int, cluster_id: str) -> None:
    path = log_dir / "meta.properties"
    text = f"version=1\nnode.id={node_id}\ncluster.id={cluster_id}\n"
    if not path.exists() or path.read_text() != text:
        write_atomically(path, text.encode())
