"""The web console in a real headless Chromium (Debian's /usr/bin/chromium driven by
Playwright): a broker with the HTTP listener on port 0, real traffic from confluent-kafka (an
idempotent producer, a consumer group with committed offsets and lag, a transactional
producer killed inside its transaction), each page loaded and checked against the numbers
that traffic must produce, screenshots saved, and a hanging
transaction aborted with a click, after which the LSO has moved."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from playwright.sync_api import BrowserContext, Page, expect, sync_playwright

from oncelog.client.admin import Admin
from oncelog.types import TopicPartition
from tests.broker_process import BrokerProcess
from tests.integration.test_client_quotas import Admin as Admin4Quotas

pytestmark = pytest.mark.integration

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: Screenshots go to a temporary directory; ONCELOG_UPDATE_SCREENSHOTS=1 writes the README's
#: copies in docs/screenshots/ instead (so a test run leaves the working tree as it was).
DOCS_SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
SCREENSHOTS = (
    DOCS_SCREENSHOTS
    if os.environ.get("ONCELOG_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / f"oncelog-console-screenshots-{os.getpid()}"
)
OVERRIDES = {
    "http.listeners": "http://127.0.0.1:0",
    "transaction.state.log.num.partitions": "2",
    "offsets.topic.num.partitions": "2",
    "num.partitions": "1",
}
ORDERS = 10  # records the idempotent producer writes to orders-0
COMMITTED = 4  # the offset the group commits on orders-0
TIMEOUT_MS = 15_000


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[BrowserContext]:
    """Chromium with a new empty profile; never a browser Playwright downloads."""
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1360, "height": 860},
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


def console_url(broker: BrokerProcess) -> str:
    match = re.search(r", console (http://127\.0\.0\.1:\d+/)$", broker.ready_line)
    assert match, broker.ready_line
    return match.group(1)


def kill_inside_a_transaction(bootstrap: str) -> None:
    """A transactional producer that writes to stuck-0 and dies before ending the
    transaction: its open transaction pins stuck-0's LSO."""
    script = f"""
import os
from confluent_kafka import Producer
p = Producer({{"bootstrap.servers": "{bootstrap}", "transactional.id": "stuck-1",
              "transaction.timeout.ms": 900000}})
p.init_transactions(20)
p.begin_transaction()
p.produce("stuck", b"in-doubt")
p.flush(20)
os._exit(9)
"""
    result = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    assert result.returncode == 9


@contextlib.contextmanager
def steady_traffic(producer: Producer) -> Iterator[None]:
    """About 200 records a second to orders-2 while the block runs."""
    stop = threading.Event()

    def run() -> None:
        i = 0
        while not stop.is_set():
            for _ in range(20):
                producer.produce("orders", f"load-{i}".encode(), partition=2)
                i += 1
            producer.poll(0)
            stop.wait(0.1)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        assert producer.flush(15) == 0


def cell(page: Page, table: str, row_text: str, column: str) -> str:
    """The text of `column` in the first row of table #`table` containing `row_text`."""
    headers = [h.strip() for h in page.locator(f"#{table} thead th").all_text_contents()]
    row = page.locator(f"#{table} tbody tr", has_text=row_text).first
    return row.locator("td").nth(headers.index(column)).inner_text().strip()


def row_cells(page: Page, table: str, topic: str, partition: int) -> dict[str, str]:
    """The cells of table #`table`'s row for one partition, by column header."""
    headers = [h.strip() for h in page.locator(f"#{table} thead th").all_text_contents()]
    for row in page.locator(f"#{table} tbody tr").all():
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        if cells[0] == topic and cells[1] == str(partition):
            return dict(zip(headers, cells, strict=False))
    raise AssertionError(f"no row for {topic}-{partition} in #{table}")


def open_page(page: Page, base: str, name: str, ready: str) -> None:
    page.goto(f"{base}#{name}")
    page.wait_for_selector(ready)


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"console-{name}.png"), full_page=True)


@dataclass(frozen=True)
class Traffic:
    """What the test's clients did, and the producer ids the brokers gave them."""

    cluster_id: str
    idempotent: Producer
    consumer: Consumer
    idempotent_pid: int
    txn_pid: int


def make_traffic(broker: BrokerProcess) -> Traffic:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topics = [NewTopic("orders", 3, 1), NewTopic("stuck", 1, 1)]
    for future in admin.create_topics(topics).values():
        future.result(15)
    cluster_id = admin.list_topics(timeout=10).cluster_id

    kill_inside_a_transaction(broker.bootstrap)
    idempotent = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    for i in range(ORDERS):
        idempotent.produce("orders", f"order-{i}".encode(), partition=0)
    idempotent.produce("orders", b"elsewhere", partition=1)
    idempotent.produce("stuck", b"after")
    assert idempotent.flush(15) == 0

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "billing",
            "client.id": "billing-1",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["orders"])
    deadline = time.monotonic() + 20
    seen = 0
    while seen < ORDERS + 1 and time.monotonic() < deadline:
        seen += sum(1 for m in consumer.consume(50, 0.5) if m.error() is None)
    assert seen == ORDERS + 1
    consumer.commit(
        offsets=[KafkaTopicPartition("orders", 0, COMMITTED), KafkaTopicPartition("orders", 1, 1)],
        asynchronous=False,
    )

    with Admin(broker.bootstrap) as oncelog_admin:
        orders = oncelog_admin.describe_producers([TopicPartition("orders", 0)])
        stuck = oncelog_admin.describe_producers([TopicPartition("stuck", 0)])
    idempotent_pid = orders[0].producer_id
    txn_pid = next(p.producer_id for p in stuck if p.txn_start_offset >= 0)
    assert idempotent_pid != txn_pid
    return Traffic(cluster_id, idempotent, consumer, idempotent_pid, txn_pid)


def check_cluster(page: Page, base: str, broker: BrokerProcess, traffic: Traffic) -> None:
    open_page(page, base, "cluster", "#brokers")
    expect(page.locator("#cluster-id")).to_have_text(traffic.cluster_id)
    expect(page.locator("#controller-id")).to_have_text("1")
    assert cell(page, "brokers", "127.0.0.1", "Port") == str(broker.port)
    shoot(page, "cluster")


def check_topics(page: Page, base: str) -> None:
    """orders-0 holds ORDERS records; stuck-0 two, its LSO pinned at 0."""
    open_page(page, base, "topics", "#partitions")
    orders0 = row_cells(page, "partitions", "orders", 0)
    assert (orders0["Log start"], orders0["High watermark"], orders0["LSO"]) == (
        "0",
        str(ORDERS),
        str(ORDERS),
    )
    assert (orders0["Leader"], orders0["Replicas"], orders0["ISR"]) == ("1", "1", "1")
    stuck0 = row_cells(page, "partitions", "stuck", 0)
    assert (stuck0["High watermark"], stuck0["LSO"]) == ("2", "0")
    assert row_cells(page, "partitions", "orders", 2)["High watermark"] == "0"
    assert page.locator("#partitions", has_text="__consumer_offsets").count() == 0
    shoot(page, "topics")


def check_producers(page: Page, base: str, traffic: Traffic) -> None:
    """The idempotent producer wrote sequences 0..ORDERS-1 to orders-0; the killed
    transactional one has a transaction open on stuck-0 from offset 0."""
    open_page(page, base, "producers", "#producers")
    mine = row_cells(page, "producers", "orders", 0)
    assert mine["Producer id"] == str(traffic.idempotent_pid)
    assert mine["Last sequence"] == str(ORDERS - 1)
    assert mine["Open txn first offset"] == "-"
    headers = [h.strip() for h in page.locator("#producers thead th").all_text_contents()]
    for row in page.locator("#producers tbody tr").all():
        cells = dict(zip(headers, row.locator("td").all_inner_texts(), strict=True))
        if cells["Topic"] == "stuck" and cells["Producer id"] == str(traffic.txn_pid):
            assert cells["Open txn first offset"] == "0"
            assert re.fullmatch(r"[0-9.]+s|[0-9]+m[0-9]{2}s", cells["Open txn age"])
            break
    else:
        raise AssertionError("the transactional producer is not listed on stuck-0")
    shoot(page, "producers")


def check_groups(page: Page, base: str) -> None:
    """billing committed COMMITTED on orders-0, whose end is ORDERS."""
    open_page(page, base, "groups", "#group-billing")
    assert cell(page, "groups", "billing", "State") == "Stable"
    assert cell(page, "groups", "billing", "Members") == "1"
    assert cell(page, "groups", "billing", "Total lag") == str(ORDERS - COMMITTED)
    lagging = row_cells(page, "group-billing", "orders", 0)
    assert (lagging["Committed"], lagging["End offset"], lagging["Lag"]) == (
        str(COMMITTED),
        str(ORDERS),
        str(ORDERS - COMMITTED),
    )
    assert row_cells(page, "group-billing", "orders", 1)["Lag"] == "0"
    assignment = cell(page, "members-billing", "billing-1", "Assignment")
    assert assignment == "orders-0, orders-1, orders-2"
    shoot(page, "groups")


def check_quotas(page: Page, base: str, broker: BrokerProcess) -> None:
    """Quotas set with kafka-python's AlterClientQuotas, one row per entity."""
    admin = Admin4Quotas(broker.bootstrap)
    try:
        assert admin.alter([("user", "alice")], {"producer_byte_rate": 1048576.0}) == (0, None)
        assert admin.alter([("client-id", None)], {"request_percentage": 50.0}) == (0, None)
    finally:
        admin.close()
    open_page(page, base, "quotas", "#quotas")
    assert cell(page, "quotas", "alice", "Produce") == "1048576 B/s"
    assert cell(page, "quotas", "alice", "Client id") == ""
    assert cell(page, "quotas", "<default>", "Request time") == "50 %"
    shoot(page, "quotas")


def check_metrics(page: Page, base: str, traffic: Traffic) -> None:
    """The totals count what was produced, and the rate follows new traffic."""
    open_page(page, base, "metrics", "#chart-messages")
    expect(page.locator("#total-messages")).not_to_have_text("-")
    assert float(page.locator("#total-messages").inner_text()) >= ORDERS + 3
    with steady_traffic(traffic.idempotent):
        expect(page.locator("#rate-messages")).not_to_have_text(re.compile(r"^(-|0\.0/s)$"))
        time.sleep(6)  # some points on the charts for the screenshot
        shoot(page, "metrics")
    with urllib.request.urlopen(f"{base}metrics", timeout=10) as response:
        text = response.read().decode()
    produced = re.search(r'oncelog_messages_in_total\{topic="orders"\} ([0-9.e+]+)', text)
    assert produced and float(produced.group(1)) > ORDERS + 1


def abort_hanging(page: Page, base: str, broker: BrokerProcess, traffic: Traffic) -> None:
    """The transaction is open in the coordinator's view and hanging once older than 1 s (it
    was left open seconds ago); the Abort button writes the marker and the LSO moves."""
    open_page(page, base, "transactions?max_transaction_timeout_ms=1000", "#hanging-transactions")
    assert cell(page, "open-transactions", "stuck-1", "State") == "Ongoing"
    assert cell(page, "open-transactions", "stuck-1", "Partitions") == "stuck-0"
    assert cell(page, "hanging-transactions", "stuck", "Producer id") == str(traffic.txn_pid)
    assert cell(page, "hanging-transactions", "stuck", "Start offset") == "0"
    shoot(page, "transactions")
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#hanging-transactions button.abort").first.click()
    expect(page.locator("#abort-message")).to_have_text(
        f"Aborted the transaction of producer {traffic.txn_pid} (epoch 0) open on stuck-0 "
        "since offset 0."
    )
    expect(page.locator("#hanging-transactions")).to_have_text("none")
    shoot(page, "transactions-aborted")

    with Admin(broker.bootstrap) as oncelog_admin:
        lso = oncelog_admin.latest_offsets([TopicPartition("stuck", 0)], read_committed=True)
    assert lso[TopicPartition("stuck", 0)] == 3  # two records and the ABORT marker
    open_page(page, base, "topics", "#partitions")
    stuck0 = row_cells(page, "partitions", "stuck", 0)
    assert (stuck0["High watermark"], stuck0["LSO"]) == ("3", "3")


def test_console_pages_and_abort(
    broker_factory: type[BrokerProcess], browser: BrowserContext
) -> None:
    broker = broker_factory(overrides=OVERRIDES).start()
    base = console_url(broker)
    traffic = make_traffic(broker)
    page = browser.new_page()
    try:
        check_cluster(page, base, broker, traffic)
        check_topics(page, base)
        check_producers(page, base, traffic)
        check_groups(page, base)
        check_quotas(page, base, broker)
        check_metrics(page, base, traffic)
        abort_hanging(page, base, broker, traffic)
    finally:
        page.close()
        traffic.consumer.close()
