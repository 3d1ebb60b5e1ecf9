// Shared building blocks of the pages: the template tag, the hooks, and the few
// components every page repeats (a table, a pager, an error line).
import { h } from "./vendor/preact.mjs";
import { useCallback, useEffect, useMemo, useRef, useState } from "./vendor/hooks.mjs";
import htm from "./vendor/htm.mjs";
import { api, ApiError, onLive } from "./api.js";

export const html = htm.bind(h);
export { useCallback, useEffect, useMemo, useRef, useState };

// A table whose columns are [{key, label, render?(row)}]; rows may carry `testid`
// (the row's data-testid) and `key` (preact's identity for the row).
export function Table({ columns, rows, empty = "Nothing here.", testid }) {
  if (!rows || rows.length === 0) {
    return html`<p class="empty" data-testid=${testid ? `${testid}-empty` : undefined}>${empty}</p>`;
  }
  return html`<table class="grid" data-testid=${testid}>
    <thead><tr>${columns.map((c) => html`<th key=${c.key}>${c.label}</th>`)}</tr></thead>
    <tbody>${rows.map((row, i) => html`<tr key=${row.key ?? i} data-testid=${row.testid}>
      ${columns.map((c) => html`<td key=${c.key} class=${c.className}>
        ${c.render ? c.render(row) : row[c.key]}</td>`)}
    </tr>`)}</tbody>
  </table>`;
}

// Previous / next over a server-side page. `count` is the total when known, else the
// number of rows on this page (a full page means there may be more).
export function Pager({ offset, limit, count, total, onPage }) {
  const known = typeof total === "number";
  const hasNext = known ? offset + limit < total : count >= limit;
  const last = known ? Math.min(offset + limit, total) : offset + count;
  return html`<div class="pager" data-testid="pager">
    <button disabled=${offset <= 0} onClick=${() => onPage(Math.max(0, offset - limit))}
      data-testid="pager-prev">‹ prev</button>
    <span>${count ? `${offset + 1}–${last}` : "0"}${known ? ` of ${total}` : ""}</span>
    <button disabled=${!hasNext} onClick=${() => onPage(offset + limit)}
      data-testid="pager-next">next ›</button>
  </div>`;
}

// Destructive actions ask first; window.confirm keeps it simple and testable
// (Playwright answers the dialog).
export function confirmAction(text) {
  return window.confirm(text);
}

export function ErrorLine({ error }) {
  if (!error) return null;
  const text = error instanceof ApiError || error instanceof Error ? error.message : String(error);
  return html`<p class="error" data-testid="error" role="alert">${text}</p>`;
}

// Load `path` (re-loaded when it changes or on reload()); {data, error, loading, stale,
// reload}. The last answer stays shown while the next loads (no flicker on a live
// reload); `stale` says it answered another path (a page may hide it then).
export function useApi(path) {
  const [state, setState] = useState({ data: null, error: null, loading: true, path: null });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!path) return undefined;
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    api("GET", path).then(
      (data) => live && setState({ data, error: null, loading: false, path }),
      (error) => live && setState({ data: null, error, loading: false, path }),
    );
    return () => {
      live = false;
    };
  }, [path, tick]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { ...state, stale: state.path !== path, reload };
}

// Subscribe for the component's lifetime; the latest callbacks are always the ones
// called. onSubscribed (optional): see onLive in api.js.
export function useLive(patterns, callback, onSubscribed = null) {
  const latest = useRef(callback);
  latest.current = callback;
  const latestSubscribed = useRef(onSubscribed);
  latestSubscribed.current = onSubscribed;
  const key = patterns.join(",");
  useEffect(() => onLive(patterns, (...args) => latest.current(...args),
    () => latestSubscribed.current?.()), [key]);
}

// A button that runs an async action, shows it running, and reports its error.
export function ActionButton({ label, run, testid, danger, disabled }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState(null);
  const click = async () => {
    setBusy(true);
    setError(null);
    try {
      await run();
    } catch (e) {
      setError(e);
    } finally {
      setBusy(false);
    }
  };
  return html`<span class="action">
    <button class=${danger ? "danger" : ""} disabled=${busy || disabled}
      data-testid=${testid} onClick=${click}>${label}</button>
    ${error ? html`<span class="error inline">${error.message}</span>` : null}
  </span>`;
}

// The hash of a route, each path part escaped (queue names may hold any character).
export function route(...parts) {
  return `#/${parts.map((p) => encodeURIComponent(p)).join("/")}`;
}
