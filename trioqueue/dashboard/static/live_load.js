// Data an admin page loads over REST and loads again when a live frame says it changed
// (dead letters, crons, webhooks, workers). Reloads are throttled: a burst of frames
// (a thousand jobs failing at once) costs one request per interval, not one per frame.
import { onLive } from "./api.js";
import { useState, useEffect, useRef } from "./ui.js";

const RELOAD_INTERVAL_MS = 2000;

// `load()` returns a promise of the page's data; `deps` (an array) say when it must run
// again from scratch; `patterns` are the live frames that mark the data stale, and
// `relevant(event, data)` (optional) picks the frames that concern this page.
export function useLiveLoad(load, deps, patterns = [], relevant = () => true) {
  const [state, setState] = useState({ data: null, error: null });
  const latest = useRef(load);
  latest.current = load;
  const run = () => latest.current().then(
    (data) => setState({ data, error: null }),
    (error) => setState((old) => ({ data: old.data, error })));
  useEffect(() => { setState({ data: null, error: null }); run(); }, deps);
  useEffect(() => {
    if (!patterns.length) return undefined;
    let timer = null;
    let last = 0;
    const stale = (event, data) => {
      if (!relevant(event, data) || timer !== null) return;
      const wait = Math.max(0, last + RELOAD_INTERVAL_MS - Date.now());
      timer = setTimeout(() => { timer = null; last = Date.now(); run(); }, wait);
    };
    const unsubscribe = onLive(patterns, stale, () => run());
    return () => { unsubscribe(); if (timer !== null) clearTimeout(timer); };
  }, [...deps, patterns.join(",")]);
  return { ...state, reload: run };
}

// Runs `action()` (a REST call), then `after()`; a refusal lands in `setError`.
export async function perform(action, after, setError) {
  setError(null);
  try {
    await action();
    await after();
  } catch (error) {
    setError(error);
  }
}
