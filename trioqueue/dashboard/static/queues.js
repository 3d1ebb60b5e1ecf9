// The queues table (#/queues): one server-side page (50 queues) of /dashboard/queues,
// each row's counts from /queues/<q>/counts, kept current by queue:counts and
// queue:paused|resumed frames. Actions run the queue-control routes.
import { api, fmtNumber } from "./api.js";
import {
  ActionButton, confirmAction, ErrorLine, html, Pager, route, Table, useEffect, useLive,
  useRef, useState,
} from "./ui.js";

const PAGE = 50;
const COUNTS = ["waiting", "active", "delayed", "completed", "failed", "dlq"];

// One row from the page's item and the queue's own counts (which add completed and
// failed; waiting shows waiting + prioritized, as the broker's totals do).
function rowOf(item, counts) {
  const c = counts || {};
  return {
    name: item.name, paused: item.paused, dlq: item.dlq,
    rateLimit: item.rateLimit, concurrency: item.concurrency,
    waiting: (c.waiting ?? item.waiting ?? 0) + (c.prioritized ?? item.prioritized ?? 0),
    active: c.active ?? item.active, delayed: c.delayed ?? item.delayed,
    completed: c.completed, failed: c.failed,
  };
}

// What each action sends, and the question asked first for a destructive one.
const ACTIONS = [
  ["pause", null, null],
  ["resume", null, null],
  ["drain", "Remove every waiting and delayed job of", null],
  ["clean", "Remove up to 1,000 completed jobs of", { grace: 0, state: "completed" }],
  ["obliterate", "Remove EVERYTHING (jobs in every state, DLQ, logs, limits) of", null],
];

function Actions({ row, onDone }) {
  return html`<div class="actions">${ACTIONS.map(([verb, question, body]) => {
    const hidden = (verb === "pause" && row.paused) || (verb === "resume" && !row.paused);
    if (hidden) return null;
    const run = async () => {
      if (question && !confirmAction(`${question} queue "${row.name}"?`)) return;
      await api("POST", `/queues/${encodeURIComponent(row.name)}/${verb}`, body ?? {});
      onDone(verb, row.name);
    };
    return html`<${ActionButton} key=${verb} label=${verb} run=${run}
      danger=${Boolean(question)} testid=${`action-${verb}-${row.name}`} />`;
  })}</div>`;
}

export function QueuesPage({ params }) {
  const offset = Math.max(0, Number(params.offset) || 0);
  const [rows, setRows] = useState(null);
  const [total, setTotal] = useState(0);
  const [error, setError] = useState(null);
  const [tick, setTick] = useState(0);
  const reloadTimer = useRef(null);

  useEffect(() => {
    let live = true;
    (async () => {
      const page = await api("GET", `/dashboard/queues?limit=${PAGE}&offset=${offset}`);
      const items = page.data.queues;
      // One counts read per row of the page: O(page), never the whole broker.
      const counts = await Promise.all(items.map((q) => api(
        "GET", `/queues/${encodeURIComponent(q.name)}/counts`).then((r) => r.counts, () => null)));
      if (!live) return;
      setRows(items.map((item, i) => rowOf(item, counts[i])));
      setTotal(page.data.total);
      setError(null);
    })().catch((e) => live && setError(e));
    return () => {
      live = false;
    };
  }, [offset, tick]);
  useEffect(() => () => clearTimeout(reloadTimer.current), []);

  // A queue we have not listed (a new one) reloads the page, at most once a second.
  const reloadSoon = () => {
    if (!reloadTimer.current) {
      reloadTimer.current = setTimeout(() => {
        reloadTimer.current = null;
        setTick((t) => t + 1);
      }, 1000);
    }
  };

  useLive(["queue:counts", "queue:paused", "queue:resumed", "queue:drained",
    "queue:cleaned", "stats:snapshot"], (event, data) => {
    if (event === "stats:snapshot") {
      // The snapshot carries every queue's dlq count and paused flag.
      setRows((current) => current && current.map((r) => {
        const q = data.queues?.[r.name];
        return q ? { ...r, dlq: q.dlq, paused: q.paused } : r;
      }));
      return;
    }
    setRows((current) => {
      if (!current) return current;
      if (!current.some((r) => r.name === data.queue)) {
        if (current.length < PAGE) reloadSoon();
        return current;
      }
      return current.map((r) => {
        if (r.name !== data.queue) return r;
        if (event === "queue:paused") return { ...r, paused: true };
        if (event === "queue:resumed") return { ...r, paused: false };
        if (event !== "queue:counts") return r;
        return { ...r, waiting: data.waiting + (data.prioritized || 0), active: data.active,
          delayed: data.delayed, completed: data.completed, failed: data.failed };
      });
    });
  }, reloadSoon);

  // After an action the row is refreshed in place (a drained queue stays listed until
  // the page is reloaded); an obliterated queue is gone, so the page is read again.
  const done = async (verb, name) => {
    if (verb === "obliterate") {
      reloadSoon();
      return;
    }
    const q = encodeURIComponent(name);
    const [counts, paused] = await Promise.all([api("GET", `/queues/${q}/counts`),
      api("GET", `/queues/${q}/paused`)]);
    setRows((current) => current && current.map((r) => (r.name === name
      ? { ...rowOf({ ...r, paused: paused.paused }, counts.counts) } : r)));
  };
  const columns = [
    { key: "name", label: "queue",
      render: (r) => html`<a href=${route("queues", r.name)}>${r.name}</a>` },
    ...COUNTS.map((state) => ({
      key: state, label: state, className: "num",
      render: (r) => html`<span data-testid=${`${state}-${r.name}`}>${state === "dlq"
        ? html`<a href=${route("dlq", r.name)}>${fmtNumber(r.dlq)}</a>`
        : fmtNumber(r[state])}</span>`,
    })),
    { key: "paused", label: "paused",
      render: (r) => html`<span data-testid=${`paused-${r.name}`}
        class=${r.paused ? "badge active" : ""}>${r.paused ? "yes" : "no"}</span>` },
    { key: "rateLimit", label: "rate limit",
      render: (r) => html`<span data-testid=${`rate-${r.name}`}>${r.rateLimit
        ? `${fmtNumber(r.rateLimit.max)} / ${fmtNumber(r.rateLimit.duration)} ms` : "—"}</span>` },
    { key: "concurrency", label: "concurrency", className: "num",
      render: (r) => html`<span data-testid=${`concurrency-${r.name}`}>${r.concurrency
        ?? "—"}</span>` },
    { key: "actions", label: "actions", render: (r) => html`<${Actions} row=${r} onDone=${done} />` },
  ];
  const onPage = (next) => {
    location.hash = `${route("queues")}?offset=${next}`;
  };
  return html`<h1>Queues</h1>
    <${ErrorLine} error=${error} />
    ${rows === null && !error ? html`<p class="empty">Loading…</p>` : html`
      <${Table} testid="queues-table" columns=${columns} empty="No queues yet."
        rows=${(rows || []).map((r) => ({ ...r, key: r.name, testid: `queue-row-${r.name}` }))} />
      <${Pager} offset=${offset} limit=${PAGE} count=${rows?.length || 0} total=${total}
        onPage=${onPage} />`}`;
}
