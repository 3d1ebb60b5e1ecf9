// The crons page (#/crons): the broker's cron jobs; add one (a cron pattern or an
// interval in ms), delete one.
import { api, fmtTime, fmtNumber } from "./api.js";
import { html, useState, Table, confirmAction, ErrorLine } from "./ui.js";
import { useLiveLoad, perform } from "./live_load.js";

const BLANK = { name: "", queue: "", pattern: "", every: "", data: "" };

// The POST /crons body from the form; throws on a field a user must fix.
function cronBody(form) {
  const body = { name: form.name.trim(), queue: form.queue.trim() };
  if (form.pattern.trim()) body.schedule = form.pattern.trim();
  else if (form.every !== "") body.repeatEvery = Number(form.every);
  else throw new Error("give a cron pattern or an interval in ms");
  if (form.data.trim()) {
    try { body.data = JSON.parse(form.data); } catch (e) { throw new Error(`data is not JSON: ${e.message}`); }
  }
  return body;
}

function CronForm({ onAdded }) {
  const [form, setForm] = useState(BLANK);
  const [error, setError] = useState(null);
  const field = (key) => (event) => setForm({ ...form, [key]: event.target.value });
  const submit = (event) => {
    event.preventDefault();
    perform(() => api("POST", "/crons", cronBody(form)),
      async () => { setForm(BLANK); await onAdded(); }, setError);
  };
  return html`<form class="inline-form" data-testid="cron-form" onSubmit=${submit}>
    <input name="name" placeholder="name" required value=${form.name} onInput=${field("name")} />
    <input name="queue" placeholder="queue" required value=${form.queue} onInput=${field("queue")} />
    <input name="pattern" placeholder="cron pattern (*/5 * * * *)" value=${form.pattern} onInput=${field("pattern")} />
    <input name="every" type="number" min="1" placeholder="or every (ms)" value=${form.every} onInput=${field("every")} />
    <input name="data" placeholder='data JSON ({"a":1})' value=${form.data} onInput=${field("data")} />
    <button type="submit" data-testid="cron-add">Add cron</button>
    <${ErrorLine} error=${error} />
  </form>`;
}

export function CronsPage() {
  const [error, setError] = useState(null);
  const loaded = useLiveLoad(() => api("GET", "/crons"), [], ["cron:*"]);
  const remove = (name) => {
    if (!confirmAction(`Delete cron ${name}?`)) return;
    perform(() => api("DELETE", `/crons/${encodeURIComponent(name)}`), loaded.reload, setError);
  };
  const columns = [
    { key: "name", label: "Name", render: (c) => html`<span data-testid=${`cron-row-${c.name}`}>${c.name}</span>` },
    { key: "queue", label: "Queue", render: (c) => html`<a href=${`#/queues/${encodeURIComponent(c.queue)}`}>${c.queue}</a>` },
    { key: "schedule", label: "Schedule",
      render: (c) => c.schedule || `every ${fmtNumber(c.repeatEvery)} ms` },
    { key: "nextRun", label: "Next run", render: (c) => fmtTime(c.nextRun) },
    { key: "executions", label: "Runs", render: (c) => fmtNumber(c.executions) },
    { key: "actions", label: "", render: (c) => html`<button class="danger"
        data-testid=${`cron-delete-${c.name}`} onClick=${() => remove(c.name)}>Delete</button>` },
  ];
  const crons = loaded.data ? loaded.data.crons || [] : null;
  return html`<section class="crons-page">
    <h2>Crons</h2>
    <${ErrorLine} error=${error || loaded.error} />
    <${CronForm} onAdded=${loaded.reload} />
    ${crons ? html`<div data-testid="cron-table"><${Table} columns=${columns} rows=${crons}
      empty="No crons." /></div>` : html`<p>Loading...</p>`}
  </section>`;
}
