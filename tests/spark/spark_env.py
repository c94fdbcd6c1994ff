"""Start-up settings for every Spark JVM and Python worker the tests start.

A pipeline run spends most of its time starting up, not processing its few hundred events:
on 2 cores about 10 s of JVM start-up before the query is defined, and some 15 Python
processes (the planner workers of the Python data source, the worker daemons and their
workers) before batch 0 is done. Two settings cut that by about a third without changing
what runs:

- `JAVA_OPTIONS`: a test JVM lives for a few batches, so the C2 compiler's CPU time is never
  earned back; C1 alone (`TieredStopAtLevel=1`) and the serial collector leave both cores to
  the work itself (≈ 15% of a run, and the later batches are no slower).
- `spark_home()`: Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on every Python
  worker's path, and Python never caches bytecode for modules imported from a zip: each
  worker process compiled PySpark from source again (≈ 1.3 s of CPU per process, against
  0.7 s for the whole import from the installed package). The tests use a SPARK_HOME whose
  `bin`, `jars`, `sbin`… are the PySpark wheel's and which has no `python/lib`, so the
  workers import the very same PySpark from the venv's site-packages, `__pycache__` included.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pyspark

#: The PySpark wheel's Spark installation (what PySpark uses when SPARK_HOME is not set).
WHEEL_SPARK_HOME = Path(pyspark.__file__).resolve().parent

#: JVM options of the drivers, executors, Master and Workers the tests start.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: What of the wheel's Spark a SPARK_HOME needs (the launch scripts, the JARs, …).
SPARK_DIRS = ("bin", "sbin", "jars", "conf", "data", "licenses")


def java_conf() -> dict[str, str]:
    """Spark settings that pass `JAVA_OPTIONS` to the driver's and the executors' JVMs."""
    return {
        "spark.driver.extraJavaOptions": JAVA_OPTIONS,
        "spark.executor.extraJavaOptions": JAVA_OPTIONS,
    }


def spark_env() -> dict[str, str]:
    """Environment of a process that starts Spark or a Spark service."""
    return {
        "SPARK_HOME": spark_home(),
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
    }


@functools.cache
def spark_home() -> str:
    """A SPARK_HOME of links to the wheel's Spark, without `python/lib` (see the module doc).

    Shared by every test process of this user and PySpark installation: built in a private
    directory, then renamed into place (the first of concurrent builders wins).
    """
    key = hashlib.sha256(str(WHEEL_SPARK_HOME).encode()).hexdigest()[:12]
    home = Path(tempfile.gettempdir()) / f"oncelog-test-spark-home-{os.getuid()}-{key}"
    if (home / "jars").is_dir():
        return str(home)
    build = Path(tempfile.mkdtemp(prefix=home.name + ".", dir=home.parent))
    for name in SPARK_DIRS:
        if (WHEEL_SPARK_HOME / name).exists():
            (build / name).symlink_to(WHEEL_SPARK_HOME / name)
    try:
        build.rename(home)
    except OSError:  # another process was first
        shutil.rmtree(build, ignore_errors=True)
    if not (home / "jars").is_dir():
        raise RuntimeError(f"could not build {home}")
    return str(home)
