// The webhooks page (#/webhooks): the broker's webhooks; add, enable or disable,
// delete.
import { api, fmtTime, fmtNumber } from "./api.js";
import { html, useState, Table, confirmAction, ErrorLine } from "./ui.js";
import { useLiveLoad, perform } from "./live_load.js";

// The events a webhook may ask for (docs/protocol.md, "Webhooks").
const EVENTS = ["job.pushed", "job.started", "job.completed", "job.failed", "job.progress"];
const BLANK = { url: "", events: ["job.completed", "job.failed"], queue: "", secret: "" };

function webhookBody(form) {
  const body = { url: form.url.trim(), events: form.events };
  if (form.queue.trim()) body.queue = form.queue.trim();
  if (form.secret) body.secret = form.secret;
  return body;
}

function WebhookForm({ onAdded }) {
  const [form, setForm] = useState(BLANK);
  const [error, setError] = useState(null);
  const field = (key) => (event) => setForm({ ...form, [key]: event.target.value });
  const toggle = (name) => (event) => setForm({
    ...form,
    events: event.target.checked ? [...form.events, name] : form.events.filter((e) => e !== name),
  });
  const submit = (event) => {
    event.preventDefault();
    perform(() => api("POST", "/webhooks", webhookBody(form)),
      async () => { setForm(BLANK); await onAdded(); }, setError);
  };
  return html`<form class="inline-form" data-testid="webhook-form" onSubmit=${submit}>
    <input name="url" type="url" placeholder="https://example.com/hook" required value=${form.url} onInput=${field("url")} />
    <input name="queue" placeholder="queue (blank: every queue)" value=${form.queue} onInput=${field("queue")} />
    <input name="secret" type="password" placeholder="signing secret (optional)" value=${form.secret} onInput=${field("secret")} />
    <fieldset><legend>Events</legend>${EVENTS.map((name) => html`<label>
      <input type="checkbox" name=${name} checked=${form.events.includes(name)} onChange=${toggle(name)} />${name}</label>`)}
    </fieldset>
    <button type="submit" data-testid="webhook-add">Add webhook</button>
    <${ErrorLine} error=${error} />
  </form>`;
}

export function WebhooksPage() {
  const [error, setError] = useState(null);
  const loaded = useLiveLoad(() => api("GET", "/webhooks"), [], ["webhook:*"]);
  const path = (id, rest = "") => `/webhooks/${encodeURIComponent(id)}${rest}`;
  const setEnabled = (hook) => perform(
    () => api("PUT", path(hook.id, "/enabled"), { enabled: !hook.enabled }), loaded.reload, setError);
  const remove = (hook) => {
    if (!confirmAction(`Delete the webhook to ${hook.url}?`)) return;
    perform(() => api("DELETE", path(hook.id)), loaded.reload, setError);
  };
  const columns = [
    { key: "url", label: "URL", render: (w) => html`<span data-testid=${`webhook-row-${w.id}`}>${w.url}</span>` },
    { key: "queue", label: "Queue", render: (w) => w.queue || "every queue" },
    { key: "events", label: "Events", render: (w) => (w.events || []).join(", ") },
    { key: "lastTriggered", label: "Last sent", render: (w) => fmtTime(w.lastTriggered) },
    { key: "counts", label: "Sent / failed / dropped", render: (w) =>
      `${fmtNumber(w.successCount)} / ${fmtNumber(w.failureCount)} / ${fmtNumber(w.droppedCount || 0)}` },
    { key: "enabled", label: "Enabled", render: (w) => html`<button
        data-testid=${`webhook-toggle-${w.id}`} aria-pressed=${w.enabled ? "true" : "false"}
        onClick=${() => setEnabled(w)}>${w.enabled ? "enabled" : "disabled"}</button>` },
    { key: "actions", label: "", render: (w) => html`<button class="danger"
        data-testid=${`webhook-delete-${w.id}`} onClick=${() => remove(w)}>Delete</button>` },
  ];
  const hooks = loaded.data ? loaded.data.data.webhooks || [] : null;
  return html`<section class="webhooks-page">
    <h2>Webhooks</h2>
    <${ErrorLine} error=${error || loaded.error} />
    <${WebhookForm} onAdded=${loaded.reload} />
    ${hooks ? html`<div data-testid="webhook-table"><${Table} columns=${columns} rows=${hooks}
      empty="No webhooks." /></div>` : html`<p>Loading...</p>`}
  </section>`;
}
