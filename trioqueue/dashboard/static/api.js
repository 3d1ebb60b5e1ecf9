// The page's only ways to reach the broker: REST calls (api) and the live WebSocket
// frames (onLive). Pages never build a fetch or a socket of their own, so the token,
// the error shape and the reconnect policy live in one place (docs/dashboard.md).

const TOKEN_KEY = "trioqueue.token";

// Kept per tab (sessionStorage): closing the tab forgets it, and it never goes in a
// URL where history, logs or a shared link would keep it.
export function getToken() {
  try {
    return sessionStorage.getItem(TOKEN_KEY) || null;
  } catch {
    return null;
  }
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  // The socket authenticated (or failed to) with the old token: start over.
  restartLive();
}

let authHandler = () => {};

// The shell registers what to do when the broker wants a token (show the form).
export function onAuthRequired(handler) {
  authHandler = handler;
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.name = "ApiError";
    this.status = status;
  }
}

// One REST call: the parsed reply (text for a non-JSON answer such as /prometheus).
// A non-2xx status or an `ok: false` body throws ApiError with the broker's own text.
export async function api(method, path, body) {
  const headers = {};
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, `broker unreachable: ${error.message}`);
  }
  const type = response.headers.get("Content-Type") || "";
  const reply = type.includes("json") ? await response.json().catch(() => null)
    : await response.text();
  if (response.status === 401) authHandler("The broker asks for a token.");
  const refused = reply && typeof reply === "object" && reply.ok === false;
  if (!response.ok || refused) {
    const text = reply && typeof reply === "object" && reply.error
      ? reply.error : `${response.status} ${response.statusText}`;
    throw new ApiError(response.status, text);
  }
  return reply;
}

// ---- live frames: one WebSocket for the whole page --------------------------------

const listeners = new Set(); // {patterns, callback}
const statusListeners = new Set();
let socket = null;
let subscribed = new Set(); // patterns the broker has been asked for on this socket
let retryMs = 500;
let retryTimer = null;
let liveStatus = "offline";
let nextReqId = 1;
// Subscribe requests sent and not yet answered: reqId -> the patterns they add.
const pendingSubscribes = new Map();

function setStatus(status) {
  liveStatus = status;
  for (const callback of statusListeners) callback(status);
}

// "connecting", "live", "offline" or "unauthorized": the shell shows it in the nav.
export function onLiveStatus(callback) {
  statusListeners.add(callback);
  callback(liveStatus);
  return () => statusListeners.delete(callback);
}

export function matches(pattern, name) {
  if (pattern === "*" || pattern === name) return true;
  return pattern.endsWith(":*") && name.startsWith(pattern.slice(0, -1));
}

function wantedPatterns() {
  const wanted = new Set();
  for (const { patterns } of listeners) for (const p of patterns) wanted.add(p);
  return wanted;
}

// Returns the request's reqId, or null when there is no open socket to send on.
function send(msg) {
  if (!socket || socket.readyState !== WebSocket.OPEN) return null;
  const reqId = `ui-${nextReqId++}`;
  socket.send(JSON.stringify({ ...msg, reqId }));
  return reqId;
}

// Bring the socket's subscription in line with the listeners' patterns.
function syncSubscription() {
  if (liveStatus !== "live") return;
  const wanted = wantedPatterns();
  const added = [...wanted].filter((p) => !subscribed.has(p));
  const dropped = [...subscribed].filter((p) => !wanted.has(p));
  if (added.length) {
    const reqId = send({ cmd: "Subscribe", events: added });
    if (reqId) pendingSubscribes.set(reqId, added);
  }
  if (dropped.length) send({ cmd: "Unsubscribe", events: dropped });
  subscribed = wanted;
}

function deliver(frame) {
  for (const { patterns, callback } of [...listeners]) {
    if (patterns.some((p) => matches(p, frame.event))) {
      try {
        callback(frame.event, frame.data, frame.ts);
      } catch (error) {
        console.error("live listener failed", error);
      }
    }
  }
}

// The broker has started sending `added`: every listener on one of those patterns
// loads its data again, because frames sent before this moment (after the page's
// first load, or while the socket was down) never reached it.
function announceSubscribed(added) {
  for (const { patterns, onSubscribed } of [...listeners]) {
    if (onSubscribed && patterns.some((p) => added.includes(p))) {
      try {
        onSubscribed();
      } catch (error) {
        console.error("live listener failed", error);
      }
    }
  }
}

function onMessage(message, authReqId) {
  let frame;
  try {
    frame = JSON.parse(message.data);
  } catch {
    return;
  }
  if (frame && typeof frame.event === "string") {
    deliver(frame);
  } else if (frame && frame.ok && pendingSubscribes.has(frame.reqId)) {
    const added = pendingSubscribes.get(frame.reqId);
    pendingSubscribes.delete(frame.reqId);
    announceSubscribed(added);
  } else if (frame && authReqId && frame.reqId === authReqId && frame.ok) {
    setStatus("live");
    retryMs = 500;
    syncSubscription();
  } else if (frame && frame.ok === false && (frame.reqId === authReqId ||
             /auth/i.test(String(frame.error)))) {
    // A refused Auth, or a Subscribe sent without a token to a broker that wants one.
    setStatus("unauthorized");
    authHandler("The live connection was refused: a valid token is needed.");
    if (socket) socket.close();
  }
}

function connect() {
  clearTimeout(retryTimer);
  retryTimer = null;
  if (socket || listeners.size === 0) return;
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const ws = new WebSocket(`${scheme}://${location.host}/ws`);
  socket = ws;
  subscribed = new Set();
  pendingSubscribes.clear();
  setStatus("connecting");
  const token = getToken();
  const authReqId = token ? `auth-${nextReqId++}` : null;
  ws.onopen = () => {
    if (token) ws.send(JSON.stringify({ cmd: "Auth", token, reqId: authReqId }));
    else {
      setStatus("live");
      retryMs = 500;
      syncSubscription();
    }
  };
  ws.onmessage = (message) => onMessage(message, authReqId);
  ws.onclose = () => {
    if (socket !== ws) return; // replaced by restartLive
    socket = null;
    if (liveStatus !== "unauthorized") setStatus("offline");
    // Backoff doubles to 15 s; an unauthorized socket waits for a new token instead.
    if (liveStatus === "offline" && listeners.size) {
      retryTimer = setTimeout(connect, retryMs);
      retryMs = Math.min(retryMs * 2, 15000);
    }
  };
}

function restartLive() {
  const old = socket;
  socket = null;
  if (old) old.close();
  setStatus("offline");
  retryMs = 500;
  connect();
}

// Call callback(event, data, ts) for each live frame whose name matches one of
// patterns (exact, "family:*" or "*"); returns the function that stops it.
// onSubscribed (optional) is called each time the broker confirms a subscription to
// one of the patterns (the first time, and again after a reconnect): a page reloads
// there what it fetched over REST, so no change falls between its load and the frames.
export function onLive(patterns, callback, onSubscribed = null) {
  const entry = { patterns: [...patterns], callback, onSubscribed };
  listeners.add(entry);
  if (socket) syncSubscription();
  else connect();
  return () => {
    listeners.delete(entry);
    syncSubscription();
  };
}

// ---- formatters -------------------------------------------------------------------

export function fmtTime(ms) {
  if (ms === null || ms === undefined || ms === "") return "—";
  const date = new Date(Number(ms));
  if (Number.isNaN(date.getTime())) return "—";
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ` +
    `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

export function fmtNumber(n) {
  if (n === null || n === undefined || Number.isNaN(Number(n))) return "—";
  const value = Number(n);
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  return value.toLocaleString("en-US", { maximumFractionDigits: 2 });
}

export function fmtBytes(bytes) {
  if (bytes === null || bytes === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = Number(bytes);
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${value.toFixed(unit ? 1 : 0)} ${units[unit]}`;
}
