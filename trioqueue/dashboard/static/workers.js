// The workers page (#/workers): the broker's worker registry, loaded again on a
// worker frame or each stats snapshot (every 5 s), never on a faster timer.
import { api, fmtTime, fmtNumber } from "./api.js";
import { html, Table, ErrorLine } from "./ui.js";
import { useLiveLoad } from "./live_load.js";

const COLUMNS = [
  { key: "name", label: "Name", render: (w) => html`<span data-testid=${`worker-row-${w.id}`}>${w.name}</span>` },
  { key: "status", label: "Status", render: (w) => html`<span class=${`status-${w.status}`}>${w.status}</span>` },
  { key: "queues", label: "Queues", render: (w) => (w.queues || []).join(", ") },
  { key: "host", label: "Host / pid", render: (w) => `${w.hostname || "-"} / ${w.pid || "-"}` },
  { key: "lastSeen", label: "Last seen", render: (w) => fmtTime(w.lastSeen) },
  { key: "activeJobs", label: "Active", render: (w) => `${fmtNumber(w.activeJobs)} / ${fmtNumber(w.concurrency)}` },
  { key: "processedJobs", label: "Processed", render: (w) => fmtNumber(w.processedJobs) },
  { key: "failedJobs", label: "Failed", render: (w) => fmtNumber(w.failedJobs) },
];

export function WorkersPage() {
  const loaded = useLiveLoad(() => api("GET", "/workers"), [], ["worker:*", "stats:snapshot"]);
  const data = loaded.data && loaded.data.data;
  const stats = data ? data.stats : null;
  return html`<section class="workers-page">
    <h2>Workers</h2>
    <${ErrorLine} error=${loaded.error} />
    ${stats ? html`<p class="summary" data-testid="workers-summary">
      ${fmtNumber(stats.active)} active of ${fmtNumber(stats.total)};
      ${fmtNumber(stats.activeJobs)} jobs running in ${fmtNumber(stats.concurrencySlots)} slots;
      ${fmtNumber(stats.totalProcessed)} processed, ${fmtNumber(stats.totalFailed)} failed</p>` : null}
    ${data ? html`<div data-testid="worker-table"><${Table} columns=${COLUMNS} rows=${data.workers || []}
      empty="No workers registered." /></div>` : html`<p>Loading...</p>`}
  </section>`;
}
