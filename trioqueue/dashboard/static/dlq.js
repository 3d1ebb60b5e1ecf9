// The dead-letter page (#/dlq/<queue>): a queue's entries a page at a time, by reason;
// retry one, retry those shown by the filter, purge; the queue's DLQ settings.
import { api, fmtTime, fmtNumber } from "./api.js";
import { html, useState, Table, Pager, confirmAction, ErrorLine } from "./ui.js";
import { useLiveLoad, perform } from "./live_load.js";

const PAGE_SIZE = 50;
const MINUTE_MS = 60_000;

function queuePath(queue, rest) {
  return `/queues/${encodeURIComponent(queue)}${rest}`;
}

// The Dlq command's filter for a reason and a minimum age in minutes (blank: any).
function dlqFilter(reason, olderThanMinutes) {
  const filter = {};
  if (reason) filter.reason = reason;
  const minutes = Number(olderThanMinutes);
  if (olderThanMinutes !== "" && minutes >= 0) filter.olderThan = Math.floor(Date.now() - minutes * MINUTE_MS);
  return filter;
}

async function loadDlq(queue, filter, offset) {
  const query = new URLSearchParams({ limit: PAGE_SIZE, offset });
  for (const [key, value] of Object.entries(filter)) query.set(key, value);
  const [stats, page] = await Promise.all([
    api("GET", queuePath(queue, "/dlq/stats")),
    api("GET", queuePath(queue, `/dlq?${query}`)),
  ]);
  return { stats: stats.data.stats, entries: page.entries || [] };
}

function ReasonChips({ byReason, reason, onPick }) {
  const reasons = Object.entries(byReason || {});
  return html`<div class="chips" data-testid="dlq-reasons">
    <button class=${reason ? "" : "active"} onClick=${() => onPick("")}>all reasons</button>
    ${reasons.map(([name, count]) => html`<button class=${reason === name ? "active" : ""}
        data-testid=${`dlq-reason-${name}`} onClick=${() => onPick(name)}>
      ${name} (${fmtNumber(count)})</button>`)}
  </div>`;
}

function entryColumns(retry) {
  return [
    { key: "id", label: "Job", render: (e) => html`<a href=${`#/jobs/${encodeURIComponent(e.job.id)}`}
        data-testid=${`dlq-row-${e.job.id}`}>${e.job.id}</a>` },
    { key: "name", label: "Name", render: (e) => e.job.name },
    { key: "reason", label: "Reason", render: (e) => e.reason },
    { key: "attempts", label: "Attempts",
      render: (e) => fmtNumber((e.attempts || []).length || e.job.attempts) },
    { key: "error", label: "Last error", render: (e) => html`<span class="error-text">${e.error || "-"}</span>` },
    { key: "enteredAt", label: "Entered", render: (e) => fmtTime(e.enteredAt) },
    { key: "retries", label: "Retries", render: (e) => fmtNumber(e.retryCount) },
    { key: "actions", label: "", render: (e) => html`<button data-testid=${`dlq-retry-${e.job.id}`}
        onClick=${() => retry(e.job.id)}>Retry</button>` },
  ];
}

const CONFIG_FIELDS = [
  ["autoRetry", "Retry automatically", "checkbox"],
  ["autoRetryInterval", "Auto-retry interval (ms)", "number"],
  ["maxAutoRetries", "Auto-retries at most", "number"],
  ["maxAge", "Drop entries older than (ms)", "number"],
  ["maxEntries", "Entries kept at most", "number"],
];

// The queue's DLQ settings (GET/PUT /queues/<q>/dlq-config) as a small form.
function DlqConfig({ queue }) {
  const [draft, setDraft] = useState(null);
  const [error, setError] = useState(null);
  const [saved, setSaved] = useState(false);
  const loaded = useLiveLoad(() => api("GET", queuePath(queue, "/dlq-config")), [queue]);
  const config = draft || (loaded.data && loaded.data.config);
  if (!config) return html`<${ErrorLine} error=${loaded.error} />`;
  const change = (key, kind) => (event) => {
    setSaved(false);
    const raw = kind === "checkbox" ? event.target.checked : event.target.value;
    setDraft({ ...config, [key]: kind === "checkbox" || raw === "" ? raw : Number(raw) });
  };
  const save = (event) => {
    event.preventDefault();
    const body = { ...config };
    if (body.maxAge === "") body.maxAge = null;
    perform(() => api("PUT", queuePath(queue, "/dlq-config"), body),
      async () => { setDraft(null); setSaved(true); await loaded.reload(); }, setError);
  };
  return html`<form class="dlq-config" data-testid="dlq-config" onSubmit=${save}>
    <h3>Settings</h3>
    ${CONFIG_FIELDS.map(([key, label, kind]) => html`<label>${label}
      ${kind === "checkbox"
        ? html`<input type="checkbox" name=${key} checked=${!!config[key]} onChange=${change(key, kind)} />`
        : html`<input type="number" min="0" name=${key} value=${config[key] ?? ""} onInput=${change(key, kind)} />`}
    </label>`)}
    <button type="submit" data-testid="dlq-config-save">Save</button>
    ${saved ? html`<span class="saved">saved</span>` : null}
    <${ErrorLine} error=${error} />
  </form>`;
}

export function DlqPage({ params }) {
  const queue = params.queue || "";
  const [reason, setReason] = useState(params.reason || "");
  const [olderThan, setOlderThan] = useState("");
  const [offset, setOffset] = useState(Number(params.offset) || 0);
  const [error, setError] = useState(null);
  const [notice, setNotice] = useState("");
  const filter = dlqFilter(reason, olderThan);
  const loaded = useLiveLoad(() => loadDlq(queue, filter, offset), [queue, reason, olderThan, offset],
    ["dlq:*", "job:retried"], (event, data) => !data || !data.queue || data.queue === queue);
  const retried = (what) => (reply) => setNotice(`${what}: ${fmtNumber(reply.count)} re-queued`);
  const act = (body, what) => perform(
    async () => retried(what)(await api("POST", queuePath(queue, "/dlq/retry"), body)),
    loaded.reload, setError);
  const purge = () => {
    if (!confirmAction(`Delete every dead letter of ${queue} for good?`)) return;
    perform(async () => {
      const reply = await api("POST", queuePath(queue, "/dlq/purge"));
      setNotice(`purged ${fmtNumber(reply.count)}`);
    }, loaded.reload, setError);
  };
  const pick = (name) => { setReason(name); setOffset(0); };
  const data = loaded.data;
  const shown = data ? (reason ? (data.stats.byReason || {})[reason] || 0 : data.stats.total) : null;
  const filtered = reason || olderThan !== "";
  return html`<section class="dlq-page">
    <h2>Dead letters: ${queue} <span class="count" data-testid="dlq-count">${fmtNumber(shown)}</span></h2>
    <${ErrorLine} error=${error || loaded.error} />
    ${notice ? html`<p class="notice" data-testid="dlq-notice">${notice}</p>` : null}
    ${data ? html`<${ReasonChips} byReason=${data.stats.byReason} reason=${reason} onPick=${pick} />` : null}
    <div class="toolbar">
      <label>Older than (minutes) <input type="number" min="0" value=${olderThan}
        data-testid="dlq-older-than" onInput=${(e) => { setOlderThan(e.target.value); setOffset(0); }} /></label>
      <button data-testid="dlq-retry-filtered" onClick=${() => {
        if (confirmAction(filtered ? "Retry every dead letter the filter shows?" : `Retry every dead letter of ${queue}?`)) {
          act(filtered ? { filter } : {}, filtered ? "retried the filtered" : "retried all");
        }
      }}>${filtered ? "Retry filtered" : "Retry all"}</button>
      <button class="danger" data-testid="dlq-purge" onClick=${purge}>Purge</button>
    </div>
    ${data ? html`<div data-testid="dlq-table">
      <${Table} columns=${entryColumns((jobId) => act({ jobId }, "retried one"))}
        rows=${data.entries} empty="No dead letters here." />
      <${Pager} offset=${offset} limit=${PAGE_SIZE} count=${data.entries.length} onPage=${setOffset} />
    </div>` : html`<p>Loading...</p>`}
    <${DlqConfig} queue=${queue} />
  </section>`;
}
