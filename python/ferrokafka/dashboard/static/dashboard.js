// ferrokafka dashboard: polls /api/status and renders processes, lag chart, errors, schedulers.
// State for tests and debugging lives on window.ferrokafkaDashboard. Whatever the records said
// is shown as text (textContent, never innerHTML), and one section that cannot be drawn does
// not keep the others from updating.
"use strict";

const dashboard = (window.ferrokafkaDashboard = { snapshot: null, chart: null, updates: 0, error: null });
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"];

function cell(text, className) {
  const td = document.createElement("td");
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

function fillTable(id, rows, makeRow) {
  const body = document.querySelector(`#${id} tbody`);
  body.replaceChildren(...rows.map(makeRow));
}

function ago(seconds) {
  if (seconds < 0) return `in ${(-seconds).toFixed(0)} s (clock ahead)`;
  if (seconds < 90) return `${seconds.toFixed(0)} s ago`;
  if (seconds < 5400) return `${(seconds / 60).toFixed(0)} min ago`;
  return `${(seconds / 3600).toFixed(1)} h ago`;
}

// 9999-12-31 23:59:59 UTC, the last second the status view accepts (a time in milliseconds
// is far later, and toISOString() throws a RangeError past year 275760).
const LATEST_TIME = 253402300799;

function when(unixSeconds) {
  if (!(unixSeconds >= 0 && unixSeconds <= LATEST_TIME)) return "invalid time";
  return new Date(unixSeconds * 1000).toISOString().replace("T", " ").slice(0, 19);
}

function renderProcesses(snapshot) {
  fillTable("processes", snapshot.processes, (p) => {
    const tr = document.createElement("tr");
    tr.dataset.processId = p.id;
    tr.dataset.health = p.health;
    const health = cell("");
    const badge = document.createElement("span");
    badge.className = `health health-${p.health}`;
    badge.textContent = p.health;
    health.append(badge);
    tr.append(
      cell(p.id), health, cell(p.status), cell(ago(p.age)), cell((p.memory_usage / 1024).toFixed(1)),
      cell(p.threads), cell(p.cpu_usage.length ? p.cpu_usage[0].toFixed(2) : "-"), cell(p.busy),
      cell(p.lag), cell(p.totals.messages ?? 0), cell(p.totals.errors ?? 0),
      cell(p.newer_schema ? `${p.schema_version} (newer: partly read)` : p.schema_version),
    );
    return tr;
  });
  const partitions = snapshot.processes.flatMap((p) => p.partitions.map((lag) => [p, lag]));
  fillTable("partitions", partitions, ([p, lag]) => {
    const tr = document.createElement("tr");
    tr.append(
      cell(p.id), cell(lag.group), cell(lag.topic), cell(lag.partition), cell(lag.lag_hybrid),
      cell(lag.lag), cell(lag.committed_offset), cell(lag.stored_offset),
      cell(lag.hi_offset), cell(lag.poll_state),
    );
    return tr;
  });
}

function seriesLabel(s) {
  return `${s.topic}[${s.partition}] ${s.group} @ ${s.process_id}`;
}

function renderLagChart(snapshot) {
  const shown = new Set(snapshot.processes.map((p) => p.id));
  const series = snapshot.lag_history.filter((s) => shown.has(s.process_id) && s.points.length);
  const holder = document.getElementById("lag-chart");
  document.getElementById("lag-empty").hidden = series.length > 0;
  if (!series.length) {
    if (dashboard.chart) dashboard.chart.destroy();
    dashboard.chart = null;
    return;
  }
  const tables = series.map((s) => [s.points.map((p) => p[0]), s.points.map((p) => p[1])]);
  const data = uPlot.join(tables);
  const labels = series.map(seriesLabel);
  const key = labels.join("\n");
  const width = Math.max(300, holder.clientWidth || 800);
  if (dashboard.chart && dashboard.chartKey === key) {
    dashboard.chart.setData(data);
    return;
  }
  if (dashboard.chart) dashboard.chart.destroy();
  dashboard.chartKey = key;
  dashboard.chart = new uPlot(
    {
      width,
      height: 280,
      scales: { y: { range: (_u, min, max) => [0, Math.max(1, max * 1.1)] } },
      axes: [{}, { label: "lag (messages)" }],
      series: [
        { label: "time" },
        ...labels.map((label, i) => ({
          label, stroke: COLORS[i % COLORS.length], width: 2, spanGaps: true, points: { size: 5 },
        })),
      ],
    },
    data,
    holder,
  );
}

function renderErrors(snapshot) {
  fillTable("errors", snapshot.errors.slice(0, 20), (e) => {
    const tr = document.createElement("tr");
    tr.dataset.errorId = e.id;
    tr.append(cell(when(e.occurred_at)), cell(e.process_id), cell(e.type), cell(e.error_class),
      cell(e.error_message.slice(0, 500), "message"));
    return tr;
  });
}

function renderSchedulers(snapshot) {
  fillTable("schedulers", snapshot.schedulers, (s) => {
    const tr = document.createElement("tr");
    const daily = Object.entries(s.daily).map(([day, count]) => `${day}: ${count}`).join(", ");
    tr.append(cell(s.topic), cell(s.partition), cell(s.state), cell(s.pending), cell(s.dispatched),
      cell(`${s.low}..${s.high}`), cell(ago(s.age)), cell(daily || "-"));
    return tr;
  });
}

function render(snapshot) {
  const t = snapshot.totals;
  document.getElementById("summary").textContent =
    `${t.alive} alive · ${t.stale} stale · ${t.stopped} stopped · total lag ${t.lag} · ` +
    `${snapshot.errors.length} recent errors` + (snapshot.caught_up ? "" : " · still reading…");
  const failed = [renderProcesses, renderLagChart, renderErrors, renderSchedulers].flatMap((section) => {
    try {
      section(snapshot);
      return [];
    } catch (error) {
      return [`${section.name}: ${error}`];
    }
  });
  dashboard.error = failed.length ? failed.join("; ") : null;
  document.getElementById("updated").textContent =
    `updated ${when(snapshot.generated_at)} UTC` + (failed.length ? ` (failed: ${dashboard.error})` : "");
  const skipped = Object.entries(snapshot.skipped).map(([topic, n]) => `${topic}: ${n}`).join(", ");
  const omitted = Object.entries(snapshot.omitted).map(([what, n]) => `${what}: ${n}`).join(", ");
  document.getElementById("skipped").textContent =
    `Skipped records: ${skipped || "none"}` + (omitted ? ` · not listed: ${omitted}` : "");
}

async function refresh() {
  let delay = 2000;
  try {
    const response = await fetch("/api/status", { cache: "no-store" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const snapshot = await response.json();
    delay = snapshot.refresh_seconds * 1000;
    dashboard.snapshot = snapshot;
    render(snapshot);
    dashboard.updates += 1;
  } catch (error) {
    dashboard.error = String(error);
    document.getElementById("updated").textContent = `update failed: ${error}`;
  }
  setTimeout(refresh, delay);
}

refresh();
