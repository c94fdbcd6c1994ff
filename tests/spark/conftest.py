"""Spark local-mode fixtures: one JVM per test session, bounded and quiet."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark.spark_env import java_conf, spark_env

pytestmark = pytest.mark.spark


def spark_conf() -> dict[str, str]:
    """Settings every Spark test uses (also for pipelines started as subprocesses)."""
    return {
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.driver.memory": "1g",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        **java_conf(),
    }


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession shared by the session's Spark tests."""
    saved = {key: os.environ.get(key) for key in spark_env()}
    os.environ.update(spark_env())  # read when the JVM and its Python workers start
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master("local[2]").appName("oncelog-tests")
    for key, value in spark_conf().items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/spark/" in str(item.fspath):
            item.add_marker(pytest.mark.spark)
