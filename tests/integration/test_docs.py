"""The shell commands of README.md and docs/*.md, run as written.

A fenced block whose info string is `sh runnable` (```` ```sh runnable ````) is run here, with
`bash -euo pipefail`, against one real broker (`oncelog serve` on 127.0.0.1, ephemeral port,
HTTP listener on). Before a block runs, its text is rewritten for that broker: `127.0.0.1:9092`
becomes the broker's address, `http://127.0.0.1:9644` its HTTP listener, `.venv/bin/` the test
interpreter's bin directory, `examples/` and `bench/` the repository's, and `oncelog-data/` the
broker's data dir. `$BOOTSTRAP` holds the broker's address too. The blocks of one page run in
order, in one temporary directory of that page, so a block may use what an earlier one of its
page made; pages run side by side and share no topics. A failing block fails its page's test
with `file:line` and the block's output.

Every other shell block (`sh`, `bash`, `shell`, `console`) must be listed in COVERED, keyed by
its first line, with the test (or script) that runs what it shows: the blocks that start
brokers, clusters, Spark or long runs. So no command in the docs drifts away from what runs.
The convention is documented in docs/README.md.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
BLOCK_TIMEOUT_S = 120
PAGES_AT_ONCE = 4

#: The shell blocks that cannot run against one throwaway broker in CI time, by first line,
#: with what runs them instead: tests (path::name) or a script that .ci/run runs.
RUN_CLUSTER = "tests/integration/test_run_cluster_script.py::" + (
    "test_a_killed_broker_is_reported_the_others_serve_and_a_restart_rejoins"
)
COVERED: dict[str, tuple[str, ...]] = {
    # README.md, and docs/http-metrics-console.md (the console's URL in the ready line)
    "scripts/run-broker": ("scripts/smoke-fresh-clone",),
    "scripts/run-broker            # …, console http://127.0.0.1:9644/ ; open it in a browser": (
        "scripts/smoke-fresh-clone",
        "tests/integration/test_console_browser.py::test_console_pages_and_abort",
    ),
    "scripts/test": (".ci/run",),
    # README.md and docs/cluster.md
    "scripts/run-cluster      # etcd + brokers 1-3 on 127.0.0.1:9092-9094, data in "
    "./oncelog-cluster": (RUN_CLUSTER,),
    ".venv/bin/oncelog topics create tour-orders --partitions 3 --replication-factor 3 \\": (
        RUN_CLUSTER,
    ),
    "kill 12345                     # the pid run-cluster printed for broker 2": (RUN_CLUSTER,),
    "scripts/run-pipeline              # 1,000 events, then run it again: it continues": (
        "tests/spark/test_run_pipeline_script.py::"
        "test_ctrl_c_stops_spark_then_the_broker_with_one_line",
        "tests/integration/test_run_pipeline_topics.py::"
        "test_foreign_input_and_output_are_refused_in_one_line",
        "tests/spark/test_pipeline.py::test_kafka_sink_two_runs_from_one_checkpoint",
        "tests/spark/test_pipeline.py::test_windowed_kafka",
        "tests/spark/test_pipeline.py::test_sqlite_sink",
        "tests/spark/test_spark_cluster.py::"
        "test_kafka_sink_through_executor_worker_driver_and_broker_kills",
        "tests/integration/test_pipeline_generate.py::test_a_repeated_run_completes_an_interrupted_one",
    ),
    ".venv/bin/oncelog verify run --start-broker --duration 30 --faults kill,pause \\": (
        "tests/integration/test_verify_run.py::test_verify_run_with_faults_is_clean",
    ),
    # docs/README.md
    "scripts/test tests/integration/test_docs.py": (
        "tests/integration/test_docs.py::test_runnable_blocks",
    ),
    # docs/configuration.md
    ".venv/bin/oncelog serve --listen 127.0.0.1:0 --data-dir /tmp/ol     # port 0: any free port": (
        "tests/integration/test_startup.py::test_missing_parents_are_created",
        "tests/unit/test_config.py::test_overrides_win_over_the_file",
    ),
    # docs/cluster.md
    'echo \'{"version":1,"topics":[{"topic":"orders"}]}\' > topics.json': (
        "tests/integration/test_reassignment.py::test_the_tool_executes_verifies_and_rolls_back",
        "tests/integration/test_reassignment_throttle.py::"
        "test_a_throttled_move_sets_kafkas_throttles_which_verify_clears",
        "tests/integration/test_reassignment_throttle.py::"
        "test_cancel_clears_the_throttles_unless_preserved",
    ),
    "# two brokers for two cores, by hand: own node id, address and data dir each": (
        "tests/integration/test_cluster_admin.py::"
        "test_create_with_replication_and_explicit_assignment",
    ),
    # docs/http-metrics-console.md
    ".venv/bin/oncelog serve --data-dir /tmp/ol --override http.listeners=http://127.0.0.1:0": (
        "tests/integration/test_http_listener.py::test_ready_line_names_the_console",
    ),
    ".venv/bin/oncelog acls --add --allow-principal User:ops --operation All --cluster \\": (
        "tests/integration/test_console_auth.py::test_abort_needs_alter_on_the_cluster",
    ),
    # docs/security.md
    ".venv/bin/oncelog users describe --command-config admin.properties": (
        "tests/integration/test_sasl_scram.py::test_users_cli_adds_describes_and_deletes",
    ),
    ".venv/bin/oncelog acls --add --allow-principal User:alice --producer --topic orders \\": (
        "tests/integration/test_acls.py::test_oncelog_acls_cli",
    ),
    # docs/spark.md
    ".venv/bin/oncelog pipeline averages --input spark-demo-events \\": (
        "tests/spark/test_pipeline.py::test_kafka_sink_two_runs_from_one_checkpoint",
        "tests/spark/test_pipeline.py::test_windowed_kafka",
        "tests/spark/test_pipeline.py::test_sqlite_sink",
    ),
    # docs/tools.md
    ".venv/bin/oncelog transactions abort --topic T --partition P --start-offset O "
    "--bootstrap-server 127.0.0.1:9092": (
        "tests/integration/test_transaction_tools.py::test_find_hanging_and_abort_release_the_lso",
    ),
    # docs/verify.md
    ".venv/bin/oncelog verify run --start-broker --duration 120 --faults kill,pause,crash \\": (
        "tests/integration/test_verify_run.py::test_verify_run_with_faults_is_clean",
    ),
    ".venv/bin/oncelog verify run --start-cluster 3 --duration 300 \\": (
        "tests/integration/test_verify_cluster.py::test_every_cluster_fault_and_no_anomaly",
    ),
    ".venv/bin/oncelog verify transactions --start-cluster 3 --messages 100000 --copiers 3 \\": (
        "tests/integration/test_verify_transactions.py::"
        "test_copies_exactly_once_in_order_across_broker_kills_and_a_bounce",
    ),
}


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence
    info: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def runnable(self) -> bool:
        return "runnable" in self.info.split()[1:]

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a Markdown page (CommonMark fences, indented ones included)."""
    found: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            closing = FENCE.match(lines[j])
            if closing and closing["fence"].startswith(fence) and not closing["info"].strip():
                break
            line = lines[j]
            body.append(line[len(indent) :] if line.startswith(indent) else line.lstrip())
            j += 1
        found.append(Block(path, i + 1, opening["info"].strip(), "\n".join(body) + "\n"))
        i = j + 1
    return found


def shell_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page) if b.language in SHELL]


def test_every_shell_block_is_runnable_or_covered() -> None:
    problems = []
    seen: set[str] = set()
    for block in shell_blocks():
        if block.runnable:
            continue
        seen.add(block.first_line)
        if block.first_line not in COVERED:
            problems.append(
                f"{block.where}: a shell block neither `sh runnable` nor in COVERED: "
                f"{block.first_line!r}"
            )
    for first_line, targets in COVERED.items():
        if first_line not in seen:
            problems.append(f"COVERED lists a block no page has: {first_line!r}")
        for target in targets:
            path, _, name = target.partition("::")
            file = ROOT / path
            if not file.is_file() or (
                name and not re.search(rf"^(async )?def {name}\(", file.read_text(), re.M)
            ):
                problems.append(f"COVERED names {target}, which does not exist")
    assert not problems, "\n".join(problems)


NETWORK_TOOLS = re.compile(
    r"\.venv/bin/oncelog (--log-level \w+ )?(topics|produce|consume|transactions|groups|cluster|"
    r"configs|acls|users|get-offsets|delete-records|log-dirs|reassign-partitions|"
    r"pipeline generate)\b"
)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """(offset of the first line, text) of each command, continuation lines joined."""
    out: list[tuple[int, str]] = []
    current: list[str] = []
    start = 0
    for n, line in enumerate(text.splitlines()):
        if not current:
            start = n
        current.append(line.rstrip("\\").rstrip())
        if not line.rstrip().endswith("\\"):
            out.append((start, " ".join(current)))
            current = []
    return out


def test_runnable_blocks_name_the_broker() -> None:
    """A tool with no address would talk to whatever listens on 127.0.0.1:9092."""
    problems = []
    for block in shell_blocks():
        if not block.runnable:
            continue
        for offset, command in logical_lines(block.text):
            talks = NETWORK_TOOLS.search(command) or re.search(r"\bkcat\b", command)
            if talks and "127.0.0.1:9092" not in command:
                problems.append(f"{block.path.relative_to(ROOT)}:{block.line + 1 + offset}")
    assert not problems, "commands without --bootstrap-server 127.0.0.1:9092: " + ", ".join(
        problems
    )


@pytest.fixture(scope="module")
def docs_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data = tmp_path_factory.mktemp("docs-broker") / "oncelog-data"
    broker = BrokerProcess(data, {"http.listeners": "http://127.0.0.1:0"}).start()
    try:
        yield broker
    finally:
        broker.stop()


def rewrite(text: str, broker: BrokerProcess) -> str:
    console = re.search(r"console (http://\S+?)/?$", broker.ready_line)
    assert console, broker.ready_line
    bin_dir = Path(sys.executable).parent
    out = text.replace("127.0.0.1:9092", broker.bootstrap)
    out = out.replace("http://127.0.0.1:9644", console.group(1))
    not_in_a_path = r"(?<![\w./-])"
    out = re.sub(not_in_a_path + r"\.venv/bin/", lambda _: f"{bin_dir}/", out)
    for folder in ("examples", "bench"):
        out = re.sub(not_in_a_path + folder + "/", lambda _: f"{ROOT}/{folder}/", out)  # noqa: B023
    out = re.sub(not_in_a_path + r"oncelog-data/", lambda _: f"{broker.data_dir}/", out)
    return out


def runnable_pages() -> list[Path]:
    return [p for p in PAGES if any(b.runnable for b in blocks(p))]


def run_page(page: Path, broker: BrokerProcess, workdir: Path) -> str | None:
    """Run the page's runnable blocks in order; None, or why the first failing one failed."""
    env = {**os.environ, "BOOTSTRAP": broker.bootstrap}
    for block in blocks(page):
        if not block.runnable:
            continue
        started = time.monotonic()
        try:
            done = subprocess.run(
                ["bash", "-euo", "pipefail", "-c", rewrite(block.text, broker)],
                check=False,
                cwd=workdir,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=BLOCK_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired as exc:
            output = exc.output if isinstance(exc.output, str) else ""
            late = f"no end after {BLOCK_TIMEOUT_S} s"
            return f"{block.where}: {late}\n{block.text}--- output:\n{output}"
        if not broker.alive():
            return f"{block.where}: the broker died\n{broker.log_tail()}"
        if done.returncode != 0:
            return (
                f"{block.where}: exit status {done.returncode} after "
                f"{time.monotonic() - started:.1f} s\n{block.text}--- output:\n{done.stdout}"
            )
    return None


@pytest.fixture(scope="module")
def page_runs(
    docs_broker: BrokerProcess, tmp_path_factory: pytest.TempPathFactory
) -> dict[Path, str | None]:
    """Every page's blocks, the pages side by side (most of a block's time is waiting: for a
    consumer group to form, for --timeout-ms), so the whole run stays within CI's budget."""
    pages = runnable_pages()
    workdirs = {page: tmp_path_factory.mktemp(page.stem) for page in pages}
    with ThreadPoolExecutor(max_workers=PAGES_AT_ONCE) as pool:
        futures = {page: pool.submit(run_page, page, docs_broker, workdirs[page]) for page in pages}
        return {page: future.result() for page, future in futures.items()}


@pytest.mark.parametrize("page", runnable_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_runnable_blocks(page: Path, page_runs: dict[Path, str | None]) -> None:
    failure = page_runs[page]
    assert failure is None, failure
