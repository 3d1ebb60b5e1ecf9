// One queue (#/queues/<q>?state=waiting&offset=0): its counts, a tab per state, that
// state's jobs one server-side page at a time (GetJobs always with a state: a listing
// without one is slow at depth), and a search by job id or custom id.
import { api, fmtNumber, fmtTime } from "./api.js";
import { ErrorLine, html, Pager, route, Table, useApi, useLive, useState } from "./ui.js";

const PAGE = 50;
// "paused" holds a paused queue's ready jobs (GetJobs lists them under it).
const STATES = ["waiting", "prioritized", "paused", "active", "delayed", "completed",
  "failed", "waiting-children"];

function stateHash(queue, state, offset) {
  return `${route("queues", queue)}?state=${state}&offset=${offset}`;
}

// The last error a job's timeline records (failed and retried jobs carry one).
export function lastError(job) {
  const failures = (job.timeline || []).filter((t) => t.error);
  return failures.length ? failures[failures.length - 1].error : null;
}

function Search({ onFound }) {
  const [text, setText] = useState("");
  const [error, setError] = useState(null);
  const submit = async (event) => {
    event.preventDefault();
    const wanted = text.trim();
    if (!wanted) return;
    setError(null);
    const quoted = encodeURIComponent(wanted);
    for (const path of [`/jobs/${quoted}`, `/jobs/custom/${quoted}`]) {
      try {
        const reply = await api("GET", path);
        if (reply.job) return onFound(reply.job);
      } catch (e) {
        if (e.status !== 404) return setError(e);
      }
    }
    setError(new Error(`No job with id or custom id "${wanted}".`));
  };
  return html`<form class="inline" onSubmit=${submit}>
    <input data-testid="job-search" placeholder="job id or custom id" value=${text}
      onInput=${(e) => setText(e.target.value)} size="40" />
    <button type="submit" data-testid="job-search-go">find</button>
    <${ErrorLine} error=${error} />
  </form>`;
}

const COLUMNS = [
  { key: "id", label: "id", render: (j) => html`<a href=${route("jobs", j.id)}
    data-testid=${`job-link-${j.id}`}>${j.id}</a>` },
  { key: "name", label: "name" },
  { key: "customId", label: "custom id", render: (j) => j.customId || "" },
  { key: "priority", label: "priority", className: "num" },
  { key: "attempts", label: "attempts", className: "num",
    render: (j) => `${j.attempts}/${j.maxAttempts}` },
  { key: "createdAt", label: "created", render: (j) => fmtTime(j.createdAt) },
  { key: "runAt", label: "runs at", render: (j) => fmtTime(j.runAt) },
  { key: "progress", label: "progress", className: "num", render: (j) => `${j.progress ?? 0}%` },
  { key: "error", label: "last error", render: (j) => html`<span class="error">${lastError(j) || ""}</span>` },
];

export function QueuePage({ params }) {
  const queue = params.queue;
  const state = STATES.includes(params.state) ? params.state : "waiting";
  const offset = Math.max(0, Number(params.offset) || 0);
  const q = encodeURIComponent(queue);
  const counts = useApi(`/queues/${q}/counts`);
  const paused = useApi(`/queues/${q}/paused`);
  const jobs = useApi(`/queues/${q}/jobs/list?state=${state}&limit=${PAGE}&offset=${offset}`);
  const [liveCounts, setLiveCounts] = useState(null);

  useLive(["queue:counts", "queue:paused", "queue:resumed"], (event, data) => {
    if (data.queue !== queue) return;
    if (event === "queue:counts") setLiveCounts(data);
    else paused.reload();
  }, () => { setLiveCounts(null); counts.reload(); paused.reload(); });

  const shown = { ...(counts.data?.counts || {}), ...(liveCounts || {}) };
  const tabs = STATES.map((s) => html`<a key=${s} href=${stateHash(queue, s, 0)}
    class=${s === state ? "on" : ""} data-testid=${`tab-${s}`}>${s}${" "}
    <span data-testid=${`qcount-${s}`}>${fmtNumber(shown[s] ?? 0)}</span></a>`);
  const rows = (jobs.stale ? [] : jobs.data?.jobs || []).map((j) => ({ ...j, key: j.id, testid: `job-row-${j.id}` }));
  const count = shown[state];
  return html`<h1>Queue ${queue}
      ${paused.data?.paused ? html` <span class="badge active">paused</span>` : null}</h1>
    <p><a href=${route("queues")}>all queues</a> · <a href=${route("dlq", queue)}>dead
      letters</a> · <button onClick=${() => { counts.reload(); jobs.reload(); }}
      data-testid="queue-refresh">refresh</button></p>
    <${Search} onFound=${(job) => { location.hash = route("jobs", job.id); }} />
    <div class="tabs">${tabs}</div>
    <${ErrorLine} error=${counts.error || jobs.error} />
    <${Table} testid="jobs-table" columns=${COLUMNS} rows=${rows}
      empty=${jobs.loading ? "Loading…" : `No ${state} jobs.`} />
    <${Pager} offset=${offset} limit=${PAGE} count=${rows.length}
      total=${typeof count === "number" ? count : undefined}
      onPage=${(next) => { location.hash = stateHash(queue, state, next); }} />`;
}
