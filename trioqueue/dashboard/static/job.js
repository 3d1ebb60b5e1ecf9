// One job (#/jobs/<id>): data, options, state and timeline, progress, logs, result
// or error with the stack trace, flow links; retry, promote, remove, change priority.
// Reloaded when a live job event names it.
import { api, fmtNumber, fmtTime } from "./api.js";
import { lastError } from "./queue.js";
import {
  ActionButton, confirmAction, ErrorLine, html, route, Table, useApi, useLive, useState,
} from "./ui.js";

// Shown in their own sections, not among the options.
const OWN_SECTION = new Set(["id", "queue", "name", "data", "state", "timeline", "progress",
  "progressMessage", "stacktrace", "childrenIds", "parentId", "dependsOn"]);

function json(value) {
  return JSON.stringify(value, null, 2);
}

function Timeline({ job }) {
  const rows = (job.timeline || []).map((t, i) => ({ ...t, key: i }));
  return html`<${Table} testid="job-timeline" rows=${rows} empty="No timeline." columns=${[
    { key: "timestamp", label: "when", render: (t) => fmtTime(t.timestamp) },
    { key: "state", label: "state", render: (t) => html`<span class=${`badge ${t.state}`}>${t.state}</span>` },
    { key: "attempt", label: "attempt", render: (t) => t.attempt ?? "" },
    { key: "error", label: "error", render: (t) => html`<span class="error">${t.error || ""}</span>` },
  ]} />`;
}

function Logs({ id, version }) {
  const logs = useApi(`/jobs/${encodeURIComponent(id)}/logs?v=${version}`);
  const rows = (logs.data?.data?.logs || []).map((l, i) => ({ ...l, key: i }));
  return html`<div data-testid="job-logs">
    <${ErrorLine} error=${logs.error} />
    <${Table} rows=${rows} empty="No logs." columns=${[
      { key: "timestamp", label: "when", render: (l) => fmtTime(l.timestamp) },
      { key: "level", label: "level" },
      { key: "message", label: "message" },
    ]} /></div>`;
}

function Outcome({ job, version }) {
  const completed = job.state === "completed";
  const result = useApi(completed ? `/jobs/${encodeURIComponent(job.id)}/result?v=${version}` : null);
  const error = lastError(job);
  const stack = Array.isArray(job.stacktrace) ? job.stacktrace.join("\n") : job.stacktrace;
  return html`
    ${completed ? html`<h2>Result</h2><pre data-testid="job-result">${result.data
      ? json(result.data.result) : "…"}</pre>` : null}
    ${error || stack ? html`<h2>Error</h2>
      <p class="error" data-testid="job-error">${error || ""}</p>
      ${stack ? html`<pre class="stack" data-testid="job-stack">${stack}</pre>` : null}` : null}`;
}

function Flow({ job }) {
  const children = job.childrenIds || [];
  const depends = job.dependsOn || [];
  if (!job.parentId && !children.length && !depends.length) return null;
  const link = (id) => html`<a key=${id} href=${route("jobs", id)}>${id}</a> `;
  return html`<h2>Flow</h2><dl class="fields" data-testid="job-flow">
    ${job.parentId ? html`<dt>parent</dt><dd data-testid="job-parent">${link(job.parentId)}</dd>` : null}
    ${children.length ? html`<dt>children (${job.childrenCompleted ?? 0} done)</dt>
      <dd data-testid="job-children">${children.map(link)}</dd>` : null}
    ${depends.length ? html`<dt>depends on</dt><dd>${depends.map(link)}</dd>` : null}
  </dl>`;
}

function Actions({ job, onChanged }) {
  const id = encodeURIComponent(job.id);
  const [priority, setPriority] = useState(String(job.priority ?? 0));
  const retry = async () => {
    // A failed job waits in its queue's DLQ; a completed one is run again.
    if (job.state === "completed") {
      await api("POST", `/queues/${encodeURIComponent(job.queue)}/retry-completed`, { id: job.id });
    } else {
      await api("POST", `/queues/${encodeURIComponent(job.queue)}/dlq/retry`, { jobId: job.id });
    }
    onChanged();
  };
  const remove = async () => {
    if (!confirmAction(`Remove job ${job.id}?`)) return;
    await api("DELETE", `/jobs/${id}`);
    onChanged();
  };
  const promote = async () => {
    await api("POST", `/jobs/${id}/promote`);
    onChanged();
  };
  // The box's text as typed: the broker's validator (the one every entry point
  // shares) judges it, so an emptied box is its refusal, not a silent priority 0.
  const changePriority = async () => {
    await api("PUT", `/jobs/${id}/priority`, { priority });
    onChanged();
  };
  return html`<div class="actions">
    <${ActionButton} label="retry" run=${retry} testid="job-action-retry"
      disabled=${!["failed", "completed"].includes(job.state)} />
    <${ActionButton} label="promote" run=${promote} testid="job-action-promote"
      disabled=${job.state !== "delayed"} />
    <${ActionButton} label="remove" run=${remove} testid="job-action-remove" danger=${true} />
    <input type="number" value=${priority} data-testid="job-priority-input" style="width:6em"
      onInput=${(e) => setPriority(e.target.value)} />
    <${ActionButton} label="set priority" run=${changePriority} testid="job-action-priority" />
  </div>`;
}

export function JobPage({ params }) {
  const id = params.id;
  const [version, setVersion] = useState(0);
  const found = useApi(`/jobs/${encodeURIComponent(id)}?v=${version}`);
  const bump = () => setVersion((v) => v + 1);
  useLive(["job:*", "dlq:*"], (event, data) => {
    if (data && data.jobId === id) bump();
  }, bump);
  if (found.error) {
    return html`<h1>Job ${id}</h1><${ErrorLine} error=${found.error} />`;
  }
  const job = found.data?.job;
  if (!job) return html`<p class="empty">Loading…</p>`;
  const options = Object.fromEntries(Object.entries(job).filter(([k]) => !OWN_SECTION.has(k)));
  const progress = Number(job.progress) || 0;
  return html`<h1>Job <span data-testid="job-id">${job.id}</span></h1>
    <p><a href=${route("queues", job.queue)}>queue ${job.queue}</a> · name ${job.name} ·
      state <span class=${`badge ${job.state}`} data-testid="job-state">${job.state}</span>${" "}
      · attempts ${fmtNumber(job.attempts)}/${fmtNumber(job.maxAttempts)}</p>
    <${Actions} job=${job} onChanged=${bump} />
    <div class="row">
      <div class="panel"><h2>Data</h2><pre data-testid="job-data">${json(job.data)}</pre>
        <h2>Progress</h2>
        <div class="progress" data-testid="job-progress"><div style=${`width:${Math.min(100, progress)}%`}></div></div>
        <p>${progress}%${job.progressMessage ? ` · ${job.progressMessage}` : ""}</p>
        <${Outcome} job=${job} version=${version} />
        <${Flow} job=${job} />
      </div>
      <div class="panel"><h2>Timeline</h2><${Timeline} job=${job} />
        <h2>Logs</h2><${Logs} id=${job.id} version=${version} /></div>
    </div>
    <div class="panel"><h2>Options</h2><pre data-testid="job-options">${json(options)}</pre></div>`;
}
