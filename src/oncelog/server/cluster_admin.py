"""The etcd writes behind the cluster's admin requests (topics, partitions, elections).

`ClusterRuntime` inherits these; handlers reach them through `broker.cluster_view.ClusterOps`.
"""

from __future__ import annotations


class ClusterAdminOps:
    """Admin operations of a clustered broker (mixed into `ClusterRuntime`)."""
