// The oncelog web console: one page per view, each reading the console's JSON API
// (/api/...), which reads the cluster through the Kafka protocol. No framework, no build.
"use strict";

const PAGES = {};
const REFRESH_MS = 5000;
const METRICS_POLL_MS = 1000;
const HISTORY = 60;
let timer = null;
let whoami = { user: null, may_abort: false };

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== null && value !== undefined && value !== false) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function show(value) {
  return value === null || value === undefined ? "-" : value;
}

function duration(ms) {
  if (ms === null || ms === undefined) return "-";
  const s = ms / 1000;
  if (s < 60) return s.toFixed(1) + "s";
  const m = Math.floor(s / 60);
  if (m < 60) return m + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s";
  return Math.floor(m / 60) + "h" + String(m % 60).padStart(2, "0") + "m";
}

function isoTime(ms) {
  return ms === null || ms === undefined || ms < 0 ? "-" : new Date(ms).toISOString();
}

// A table: columns are [header, function(row) -> cell, "num" for numbers].
function table(id, columns, rows, rowClass) {
  if (!rows.length) return el("p", { class: "empty", id: id }, "none");
  return el(
    "table",
    { id: id },
    el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", {}, h)))),
    el(
      "tbody",
      {},
      rows.map((row) =>
        el(
          "tr",
          { class: rowClass ? rowClass(row) : null },
          columns.map(([, cell, kind]) => el("td", { class: kind || null }, show(cell(row))))
        )
      )
    )
  );
}

function setStatus(text, error) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = "status" + (error ? " error" : "");
}

async function api(path, options) {
  const response = await fetch(path, options);
  let body = null;
  try {
    body = await response.json();
  } catch (e) {
    body = null;
  }
  if (!response.ok) {
    throw new Error((body && body.error) || response.status + " " + response.statusText);
  }
  return body;
}

function render(...nodes) {
  const page = document.getElementById("page");
  page.replaceChildren(...nodes);
}

// -- cluster ---------------------------------------------------------------------------------

PAGES.cluster = async () => {
  const c = await api("/api/cluster");
  render(
    el("h2", {}, "Cluster"),
    el(
      "div",
      { class: "cards" },
      card("Cluster id", c.cluster_id, "cluster-id"),
      card("Controller", c.controller_id, "controller-id"),
      card("Brokers", c.brokers.length, "broker-count")
    ),
    el("h2", {}, "Brokers"),
    table(
      "brokers",
      [
        ["Node", (b) => b.node_id, "num"],
        ["Host", (b) => b.host],
        ["Port", (b) => b.port, "num"],
        ["Rack", (b) => b.rack],
        ["Controller", (b) => (b.controller ? "yes" : "")],
      ],
      c.brokers
    )
  );
};

function card(label, value, id) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label), el("div", { class: "value", id: id }, show(value)));
}

// -- topics ----------------------------------------------------------------------------------

PAGES.topics = async () => {
  const topics = await api("/api/topics");
  const internal = new URLSearchParams(location.hash.split("?")[1] || "").get("internal") === "1";
  const shown = topics.filter((t) => internal || !t.internal);
  const rows = shown.flatMap((t) => t.partitions.map((p) => ({ topic: t.name, ...p })));
  render(
    el("h2", {}, "Topics and partitions"),
    el(
      "div",
      { class: "toolbar" },
      el("span", { class: "muted" }, shown.length + " topics, " + rows.length + " partitions"),
      el("a", { href: internal ? "#topics" : "#topics?internal=1" }, internal ? "hide internal topics" : "show internal topics")
    ),
    table(
      "partitions",
      [
        ["Topic", (p) => p.topic],
        ["Partition", (p) => p.partition, "num"],
        ["Leader", (p) => p.leader, "num"],
        ["Epoch", (p) => p.leader_epoch, "num"],
        ["Replicas", (p) => p.replicas.join(",")],
        ["ISR", (p) => p.isr.join(",")],
        ["Moving", (p) => moving(p)],
        ["Log start", (p) => p.log_start_offset, "num"],
        ["High watermark", (p) => p.high_watermark, "num"],
        ["LSO", (p) => p.last_stable_offset, "num"],
        ["Error", (p) => p.error],
      ],
      rows,
      (p) => (p.last_stable_offset !== null && p.last_stable_offset < p.high_watermark ? "open" : null)
    )
  );
};

// A partition being reassigned: the replicas it is adding and removing, as kafka-topics shows.
const moving = (p) =>
  [p.adding.length ? "adding " + p.adding.join(",") : "", p.removing.length ? "removing " + p.removing.join(",") : ""]
    .filter(Boolean)
    .join("; ");

// -- producers -------------------------------------------------------------------------------

PAGES.producers = async () => {
  const producers = await api("/api/producers");
  render(
    el("h2", {}, "Active producers per partition"),
    el("p", { class: "muted" }, "DescribeProducers on each partition's leader; a transaction's age counts from the producer's last write to the partition."),
    table(
      "producers",
      [
        ["Topic", (p) => p.topic],
        ["Partition", (p) => p.partition, "num"],
        ["Producer id", (p) => p.producer_id, "num"],
        ["Epoch", (p) => p.producer_epoch, "num"],
        ["Last sequence", (p) => p.last_sequence, "num"],
        ["Last write", (p) => isoTime(p.last_timestamp)],
        ["Coordinator epoch", (p) => p.coordinator_epoch, "num"],
        ["Open txn first offset", (p) => p.txn_start_offset, "num"],
        ["Open txn age", (p) => (p.txn_age_ms === null ? null : duration(p.txn_age_ms)), "num"],
      ],
      producers
    )
  );
};

// -- transactions ----------------------------------------------------------------------------

function maxTimeout() {
  const fromHash = new URLSearchParams(location.hash.split("?")[1] || "").get("max_transaction_timeout_ms");
  return fromHash || "900000";
}

PAGES.transactions = async () => {
  const max = maxTimeout();
  const t = await api("/api/transactions?max_transaction_timeout_ms=" + encodeURIComponent(max));
  const input = el("input", { id: "max-timeout", type: "number", min: "0", value: max });
  const apply = el("button", { id: "apply-timeout", onclick: () => { location.hash = "#transactions?max_transaction_timeout_ms=" + encodeURIComponent(input.value); } }, "Apply");
  render(
    el("h2", {}, "Open transactions"),
    el("p", { class: "muted" }, "ListTransactions and DescribeTransactions on every coordinator."),
    table(
      "open-transactions",
      [
        ["Transactional id", (x) => x.transactional_id],
        ["Coordinator", (x) => x.coordinator_id, "num"],
        ["Producer id", (x) => x.producer_id, "num"],
        ["Epoch", (x) => x.producer_epoch, "num"],
        ["State", (x) => x.state],
        ["Timeout", (x) => (x.timeout_ms === null ? null : duration(x.timeout_ms)), "num"],
        ["Started", (x) => isoTime(x.start_time_ms)],
        ["Age", (x) => (x.age_ms === null ? null : duration(x.age_ms)), "num"],
        ["Partitions", (x) => x.partitions.join(", ")],
      ],
      t.open
    ),
    el("h2", {}, "Hanging transactions"),
    el(
      "div",
      { class: "toolbar" },
      el("label", { for: "max-timeout" }, "Open longer than (ms)"),
      input,
      apply,
      el("span", { class: "muted" }, "as oncelog transactions find-hanging --max-transaction-timeout-ms")
    ),
    el("div", { id: "abort-result" }),
    hangingTable(t.hanging)
  );
};

function hangingTable(rows) {
  const abortCell = (p) =>
    el(
      "button",
      {
        class: "danger abort",
        "data-topic": p.topic,
        "data-partition": p.partition,
        "data-producer-id": p.producer_id,
        disabled: whoami.may_abort ? null : "disabled",
        title: whoami.may_abort ? "write an ABORT marker (WriteTxnMarkers)" : "needs Alter on the cluster",
        onclick: () => abortTransaction(p),
      },
      "Abort"
    );
  if (!rows.length) return el("p", { class: "empty", id: "hanging-transactions" }, "none");
  const columns = [
    ["Topic", (p) => p.topic],
    ["Partition", (p) => p.partition, "num"],
    ["Producer id", (p) => p.producer_id, "num"],
    ["Epoch", (p) => p.producer_epoch, "num"],
    ["Coordinator epoch", (p) => p.coordinator_epoch, "num"],
    ["Start offset", (p) => p.txn_start_offset, "num"],
    ["Last write", (p) => isoTime(p.last_timestamp)],
    ["Duration", (p) => duration(p.txn_age_ms), "num"],
  ];
  return el(
    "table",
    { id: "hanging-transactions" },
    el("thead", {}, el("tr", {}, columns.map(([h]) => el("th", {}, h)), el("th", {}, ""))),
    el(
      "tbody",
      {},
      rows.map((p) =>
        el("tr", { class: "hanging" }, columns.map(([, cell, kind]) => el("td", { class: kind || null }, show(cell(p)))), el("td", {}, abortCell(p)))
      )
    )
  );
}

async function abortTransaction(p) {
  const what = `the transaction of producer ${p.producer_id} on ${p.topic}-${p.partition} open since offset ${p.txn_start_offset}`;
  if (!window.confirm(`Abort ${what}?`)) return;
  const out = document.getElementById("abort-result");
  try {
    const body = await api("/api/transactions/abort", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ topic: p.topic, partition: p.partition, producer_id: p.producer_id, start_offset: p.txn_start_offset }),
    });
    await PAGES.transactions();
    document.getElementById("abort-result").replaceChildren(el("div", { class: "message", id: "abort-message" }, body.message));
  } catch (e) {
    out.replaceChildren(el("div", { class: "message error", id: "abort-message" }, e.message));
  }
}

// -- client quotas ---------------------------------------------------------------------------

PAGES.quotas = async () => {
  const rows = await api("/api/quotas");
  const rate = (v) => (v === null || v === undefined ? "" : v + " B/s");
  render(
    el("h2", {}, "Client quotas"),
    el("p", { class: "muted" }, "Set with oncelog configs --entity-type users|clients (AlterClientQuotas); the most specific entity that sets a quota applies."),
    table(
      "quotas",
      [
        ["User", (q) => q.user ?? ""],
        ["Client id", (q) => q.client_id ?? ""],
        ["Produce", (q) => rate(q.producer_byte_rate), "num"],
        ["Fetch", (q) => rate(q.consumer_byte_rate), "num"],
        ["Request time", (q) => (q.request_percentage == null ? "" : q.request_percentage + " %"), "num"],
      ],
      rows
    )
  );
};

// -- consumer groups -------------------------------------------------------------------------

PAGES.groups = async () => {
  const groups = await api("/api/groups");
  const parts = [el("h2", {}, "Consumer groups")];
  parts.push(
    table(
      "groups",
      [
        ["Group", (g) => g.group_id],
        ["State", (g) => g.state],
        ["Protocol", (g) => g.protocol_type],
        ["Coordinator", (g) => g.coordinator_id, "num"],
        ["Members", (g) => g.members.length, "num"],
        ["Total lag", (g) => g.total_lag, "num"],
      ],
      groups
    )
  );
  for (const g of groups) {
    parts.push(el("h2", {}, "Group " + g.group_id));
    parts.push(el("p", { class: "muted" }, "End offset is the LSO (what read_committed consumers read up to)."));
    parts.push(
      table(
        "group-" + g.group_id,
        [
          ["Topic", (r) => r.topic],
          ["Partition", (r) => r.partition, "num"],
          ["Committed", (r) => r.committed_offset, "num"],
          ["End offset", (r) => r.end_offset, "num"],
          ["Lag", (r) => r.lag, "num"],
          ["Member", (r) => r.member_id],
        ],
        g.partitions
      )
    );
    if (g.members.length) {
      parts.push(el("h3", {}, "Members"));
      parts.push(
        table(
          "members-" + g.group_id,
          [
            ["Member id", (m) => m.member_id],
            ["Instance id", (m) => m.group_instance_id],
            ["Client id", (m) => m.client_id],
            ["Host", (m) => m.host],
            ["Assignment", (m) => m.assignment.join(", ")],
          ],
          g.members
        )
      );
    }
  }
  render(...parts);
};

// -- metrics: live charts --------------------------------------------------------------------

const COLORS = ["#2457c5", "#d9822b", "#2e9e5b", "#b3261e", "#7b4cc2", "#0f8b8d", "#c2417b", "#5c6370"];
const series = { time: [], messages: [], bytes: [], errors: {} };
let lastTotals = null;

function recordRates(snapshot) {
  const t = snapshot.time_ms;
  const totals = snapshot.totals;
  if (lastTotals && t > lastTotals.time_ms) {
    const dt = (t - lastTotals.time_ms) / 1000;
    const rate = (now, before) => Math.max(0, (now - before) / dt);
    series.time.push(t);
    series.messages.push(rate(totals.messages_in, lastTotals.totals.messages_in));
    series.bytes.push(rate(totals.bytes_in, lastTotals.totals.bytes_in));
    const codes = new Set([...Object.keys(totals.errors), ...Object.keys(series.errors)]);
    for (const code of codes) {
      const list = series.errors[code] || (series.errors[code] = new Array(series.time.length - 1).fill(0));
      list.push(rate(totals.errors[code] || 0, lastTotals.totals.errors[code] || 0));
    }
    if (series.time.length > HISTORY) {
      series.time.shift();
      series.messages.shift();
      series.bytes.shift();
      for (const list of Object.values(series.errors)) list.shift();
    }
  }
  lastTotals = snapshot;
}

function drawChart(canvas, lines) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = width * ratio;
  canvas.height = height * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const left = 56, bottom = 18, top = 8;
  const max = Math.max(1, ...lines.flatMap((l) => l.values));
  g.strokeStyle = "#d9dde5";
  g.fillStyle = "#6b7385";
  g.font = "11px system-ui, sans-serif";
  for (let i = 0; i <= 4; i++) {
    const y = top + ((height - top - bottom) * i) / 4;
    g.beginPath();
    g.moveTo(left, y);
    g.lineTo(width, y);
    g.stroke();
    g.fillText(formatNumber(max * (1 - i / 4)), 4, y + 4);
  }
  g.fillText(`last ${HISTORY}s`, left, height - 4);
  const n = HISTORY;
  for (const line of lines) {
    g.strokeStyle = line.color;
    g.lineWidth = 2;
    g.beginPath();
    line.values.forEach((v, i) => {
      const x = left + ((width - left) * (n - line.values.length + i)) / (n - 1);
      const y = top + (height - top - bottom) * (1 - v / max);
      if (i === 0) g.moveTo(x, y);
      else g.lineTo(x, y);
    });
    g.stroke();
  }
}

function formatNumber(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return v.toFixed(v < 10 ? 1 : 0);
}

function legend(lines) {
  return el("div", { class: "legend" }, lines.map((l) => el("span", {}, el("i", { style: "background:" + l.color }), l.label)));
}

function drawMetrics() {
  const last = (list) => (list.length ? list[list.length - 1] : null);
  const set = (id, value) => {
    const node = document.getElementById(id);
    if (node) node.textContent = value;
  };
  set("rate-messages", last(series.messages) === null ? "-" : formatNumber(last(series.messages)) + "/s");
  set("rate-bytes", last(series.bytes) === null ? "-" : formatNumber(last(series.bytes)) + " B/s");
  if (lastTotals) {
    set("total-messages", formatNumber(lastTotals.totals.messages_in));
    set("total-bytes", formatNumber(lastTotals.totals.bytes_in));
  }
  const throughput = document.getElementById("chart-messages");
  if (throughput) drawChart(throughput, [{ values: series.messages, color: COLORS[0] }]);
  const bytes = document.getElementById("chart-bytes");
  if (bytes) drawChart(bytes, [{ values: series.bytes, color: COLORS[1] }]);
  const errors = document.getElementById("chart-errors");
  if (errors) {
    const lines = Object.entries(series.errors).map(([code, values], i) => ({ label: code, values, color: COLORS[(i + 3) % COLORS.length] }));
    drawChart(errors, lines);
    document.getElementById("errors-legend").replaceChildren(lines.length ? legend(lines) : el("span", { class: "empty" }, "no errors"));
    const totals = lastTotals ? Object.entries(lastTotals.totals.errors) : [];
    document.getElementById("error-totals").replaceChildren(
      table("error-counts", [["Error", (r) => r[0]], ["Count", (r) => r[1], "num"]], totals)
    );
  }
}

PAGES.metrics = async () => {
  render(
    el("h2", {}, "Throughput"),
    el(
      "div",
      { class: "cards" },
      card("Messages in", "-", "rate-messages"),
      card("Bytes in", "-", "rate-bytes"),
      card("Messages in (total)", "-", "total-messages"),
      card("Bytes in (total)", "-", "total-bytes")
    ),
    el(
      "div",
      { class: "charts" },
      el("div", { class: "chart" }, el("h3", {}, "Messages in per second"), el("canvas", { id: "chart-messages" })),
      el("div", { class: "chart" }, el("h3", {}, "Bytes in per second"), el("canvas", { id: "chart-bytes" })),
      el("div", { class: "chart" }, el("h3", {}, "Errors per second, by code"), el("canvas", { id: "chart-errors" }), el("div", { id: "errors-legend" }))
    ),
    el("h2", {}, "Errors since start"),
    el("div", { id: "error-totals" }),
    el("p", { class: "muted" }, "From the broker's Prometheus registry (", el("a", { href: "/metrics" }, "/metrics"), "), polled every second.")
  );
  drawMetrics();
};

async function pollMetrics() {
  try {
    recordRates(await api("/api/metrics"));
    if (currentPage() === "metrics") drawMetrics();
  } catch (e) {
    if (currentPage() === "metrics") setStatus("metrics: " + e.message, true);
  }
}

// -- routing ---------------------------------------------------------------------------------

function currentPage() {
  const name = location.hash.slice(1).split("?")[0];
  return PAGES[name] ? name : "cluster";
}

async function load() {
  const name = currentPage();
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("active", a.dataset.page === name);
  clearTimeout(timer);
  try {
    await PAGES[name]();
    setStatus("updated " + new Date().toLocaleTimeString(), false);
    document.body.dataset.loaded = name;
  } catch (e) {
    render(el("div", { class: "message error", id: "page-error" }, e.message));
    setStatus("error", true);
  }
  if (name !== "metrics" && name !== "transactions") timer = setTimeout(load, REFRESH_MS);
}

async function start() {
  try {
    whoami = await api("/api/whoami");
  } catch (e) {
    whoami = { user: null, may_abort: false };
  }
  window.addEventListener("hashchange", load);
  pollMetrics();
  setInterval(pollMetrics, METRICS_POLL_MS);
  await load();
}

start();
