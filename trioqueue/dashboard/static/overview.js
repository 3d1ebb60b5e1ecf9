// The overview (#/): counts across queues, throughput, latency, workers, storage and
// crons. Loaded once from REST, then kept current by stats:snapshot frames (every
// stats_snapshot_interval_s, 5 s by default): no polling loop of its own.
import { api, fmtBytes, fmtNumber } from "./api.js";
import { addTotals, seedHistory, ThroughputChart } from "./throughput.js";
import { ErrorLine, html, route, useEffect, useLive, useState } from "./ui.js";

const STATES = ["waiting", "active", "delayed", "completed", "failed", "dlq"];

function Card({ label, value, testid }) {
  return html`<div class="card"><div class="label">${label}</div>
    <div class="value" data-testid=${testid}>${fmtNumber(value)}</div></div>`;
}

function Latency({ latency }) {
  if (!latency) return html`<p class="empty">—</p>`;
  const ms = (v) => (v === null || v === undefined ? "—" : `${fmtNumber(v)} ms`);
  const rows = ["push", "pull", "ack"].map((op) => {
    const p = latency.percentiles?.[op] || {};
    return html`<tr key=${op}><td>${op}</td><td class="num">${ms(p.p50)}</td>
      <td class="num">${ms(p.p95)}</td><td class="num">${ms(p.p99)}</td>
      <td class="num">${ms(latency.averages?.[op])}</td></tr>`;
  });
  return html`<table class="grid" data-testid="latency"><thead><tr><th>command</th>
    <th>p50</th><th>p95</th><th>p99</th><th>average</th></tr></thead>
    <tbody>${rows}</tbody></table>`;
}

function Storage({ storage }) {
  if (!storage) return html`<p class="empty">—</p>`;
  const state = storage.degraded ? (storage.diskFull ? "full" : "degraded") : "healthy";
  return html`<dl class="fields" data-testid="storage">
    <dt>engine</dt><dd>${storage.engine}</dd>
    <dt>state</dt><dd class=${storage.degraded ? "error" : ""}>${state}</dd>
    <dt>used</dt><dd>${fmtBytes(storage.usedBytes)}${storage.maxBytes
      ? ` of ${fmtBytes(storage.maxBytes)}` : ""}</dd>
    ${storage.diskFreeBytes != null ? html`<dt>disk free</dt>
      <dd>${fmtBytes(storage.diskFreeBytes)}</dd>` : null}
    ${storage.error ? html`<dt>error</dt><dd class="error">${storage.error}</dd>` : null}
  </dl>`;
}

// Counts from /stats (which has `failed`; the snapshot frame does not). Its `waiting`
// holds the prioritized jobs already, as the snapshot frame's does.
function countsOf(stats) {
  return {
    waiting: stats.waiting, active: stats.active,
    delayed: stats.delayed, completed: stats.completed, failed: stats.failed, dlq: stats.dlq,
  };
}

export function OverviewPage() {
  const [counts, setCounts] = useState(null);
  const [rates, setRates] = useState(null);
  const [dash, setDash] = useState(null);
  const [error, setError] = useState(null);

  useEffect(() => {
    let live = true;
    Promise.all([api("GET", "/stats"), api("GET", "/metrics"), api("GET", "/dashboard")])
      .then(([stats, metrics, overview]) => {
        if (!live) return;
        const s = stats.stats;
        setCounts(countsOf(s));
        setRates({ pushPerSec: s.pushPerSec, pullPerSec: s.pullPerSec });
        setDash(overview.data);
        // The broker's last hour (its totals every 10 s), then the baseline the
        // first snapshot's rates are measured from.
        seedHistory(overview.data.throughputHistory || []);
        addTotals(Date.now(), { ...s, totalFailed: metrics.metrics.totalFailed });
      }, (e) => live && setError(e));
    return () => {
      live = false;
    };
  }, []);

  useLive(["stats:snapshot", "storage:status"], (event, data) => {
    if (event === "storage:status") {
      setDash((d) => (d ? { ...d, storage: data } : d));
      return;
    }
    addTotals(Date.now(), data);
    // Stats' `failed` is the lifetime total of jobs failed for good: the frame's
    // `totalFailed`.
    setCounts((c) => ({ ...c, waiting: data.waiting, active: data.active,
      delayed: data.delayed, completed: data.completed, failed: data.totalFailed,
      dlq: data.dlq }));
    setRates({ pushPerSec: data.pushPerSec, pullPerSec: data.pullPerSec });
    setDash((d) => (d ? { ...d, workers: { ...d.workers, ...data.workers },
      crons: { total: data.cronJobs } } : d));
  });

  return html`<h1>Overview</h1>
    <${ErrorLine} error=${error} />
    <div class="cards">
      ${STATES.map((s) => html`<${Card} key=${s} label=${s} value=${counts?.[s]}
        testid=${`count-${s}`} />`)}
      <${Card} label="pushed/s" value=${rates?.pushPerSec} testid="rate-push" />
      <${Card} label="pulled/s" value=${rates?.pullPerSec} testid="rate-pull" />
    </div>
    <div class="panel"><h2>Throughput (last hour)</h2><${ThroughputChart} /></div>
    <div class="row">
      <div class="panel"><h2>Latency</h2><${Latency} latency=${dash?.latency} /></div>
      <div class="panel"><h2>Workers</h2>
        <p><span data-testid="workers-active">${fmtNumber(dash?.workers?.active)}</span>${" "}
          active of ${fmtNumber(dash?.workers?.total)} registered ·${" "}
          <a href=${route("workers")}>registry</a></p>
        <h2>Crons</h2>
        <p><span data-testid="crons-count">${fmtNumber(dash?.crons?.total)}</span> scheduled ·${" "}
          <a href=${route("crons")}>list</a></p>
        <h2>Queues</h2>
        <p>${fmtNumber(dash?.collections?.queues)} queues,${" "}
          ${fmtNumber(dash?.collections?.liveJobs)} jobs kept ·${" "}
          <a href=${route("queues")}>table</a></p>
      </div>
      <div class="panel"><h2>Storage</h2><${Storage} storage=${dash?.storage} /></div>
    </div>`;
}
