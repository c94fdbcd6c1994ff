"""librdkafka's built-in mock cluster, held by a helper process, as a target for `verify run`.

Why: the mock is a real Kafka-protocol server that knowingly does not implement read_committed
(it serves aborted transactional records to read_committed consumers) nor fencing. Running the
same workload against it proves the checker catches a broker's real violations; benchmarks use
it as the speed yardstick. The mock has no CreateTopics handler, so topics are created here
with rd_kafka_mock_topic_create(). It lives as long as the librdkafka handle that owns it,
hence the helper process (`python -m oncelog.verify.mock_cluster`), driven by lines on stdin.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import selectors
import subprocess
import sys
from pathlib import Path
from types import TracebackType
from typing import Any


class MockClusterError(RuntimeError):
    """The helper could not start the mock cluster or create a topic."""


def librdkafka_path() -> str:
    """The librdkafka that confluent_kafka itself loaded, so the mock matches the client."""
    import confluent_kafka  # noqa: F401 - loads the bundled librdkafka

    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "librdkafka" in Path(path).name:
                return path
    found = ctypes.util.find_library("rdkafka")
    if not found:
        raise MockClusterError("librdkafka not found")
    return found


def serve() -> None:
    """Hold a mock cluster; answer `create TOPIC P` / `delete TOPIC` lines until EOF."""
    lib = ctypes.CDLL(librdkafka_path())
    vp, cp, ci = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    lib.rd_kafka_conf_new.restype = vp
    lib.rd_kafka_conf_set.argtypes = [vp, cp, cp, cp, ctypes.c_size_t]
    lib.rd_kafka_new.restype = vp
    lib.rd_kafka_new.argtypes = [ci, vp, cp, ctypes.c_size_t]
    lib.rd_kafka_handle_mock_cluster.restype = vp
    lib.rd_kafka_handle_mock_cluster.argtypes = [vp]
    lib.rd_kafka_mock_cluster_bootstraps.restype = cp
    lib.rd_kafka_mock_cluster_bootstraps.argtypes = [vp]
    lib.rd_kafka_mock_topic_create.restype = ci
    lib.rd_kafka_mock_topic_create.argtypes = [vp, cp, ci, ci]
    lib.rd_kafka_mock_topic_delete.restype = ci
    lib.rd_kafka_mock_topic_delete.argtypes = [vp, cp]
    lib.rd_kafka_destroy.argtypes = [vp]

    errstr = ctypes.create_string_buffer(512)
    conf = lib.rd_kafka_conf_new()
    for key, value in (("test.mock.num.brokers", "1"), ("log_level", "3")):
        if lib.rd_kafka_conf_set(conf, key.encode(), value.encode(), errstr, 512) != 0:
            raise MockClusterError(f"conf {key}: {errstr.value.decode()}")
    rk = lib.rd_kafka_new(0, conf, errstr, 512)  # RD_KAFKA_PRODUCER
    if not rk:
        raise MockClusterError(f"rd_kafka_new: {errstr.value.decode()}")
    mcluster = lib.rd_kafka_handle_mock_cluster(rk)
    bootstrap = lib.rd_kafka_mock_cluster_bootstraps(mcluster).decode()
    print(json.dumps({"bootstrap": bootstrap, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[:1] == ["create"]:
            err = lib.rd_kafka_mock_topic_create(mcluster, words[1].encode(), int(words[2]), 1)
        elif words[:1] == ["delete"]:
            err = lib.rd_kafka_mock_topic_delete(mcluster, words[1].encode())
        else:
            break
        print(json.dumps({"err": err}), flush=True)
    lib.rd_kafka_destroy(rk)


class MockCluster:
    """Parent side: starts the helper, creates topics, stops it (closing stdin, then SIGKILL)."""

    def __init__(self, startup_timeout: float = 30.0) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "oncelog.verify.mock_cluster"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = self._reply(startup_timeout)
        self.bootstrap: str = hello["bootstrap"]
        self.pid = self.proc.pid
        if not self.bootstrap.startswith("127.0.0.1:"):
            self.stop()
            raise MockClusterError(f"mock cluster is not on 127.0.0.1: {self.bootstrap}")

    def _reply(self, timeout: float) -> dict[str, Any]:
        assert self.proc.stdout is not None
        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                raise MockClusterError("mock cluster helper did not answer")
        line = self.proc.stdout.readline()
        if not line:
            raise MockClusterError("mock cluster helper exited")
        return dict(json.loads(line))

    def _command(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        err = self._reply(10)["err"]
        if err:
            raise MockClusterError(f"{text!r}: librdkafka error {err}")

    def create_topic(self, topic: str, partitions: int) -> None:
        self._command(f"create {topic} {partitions}")

    def delete_topic(self, topic: str) -> None:
        self._command(f"delete {topic}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.close()
                self.proc.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def __enter__(self) -> MockCluster:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    serve()
