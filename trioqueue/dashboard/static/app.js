// The dashboard's shell (see docs/dashboard.md): the nav bar, the hash router, the
// token form and the live-connection badge. Each page is its own module, loaded when
// its route is first opened, so a page missing from a build shows a notice instead of
// breaking the others.
import { render } from "./vendor/preact.mjs";
import { getToken, onAuthRequired, onLiveStatus, setToken } from "./api.js";
import { html, useEffect, useState } from "./ui.js";

// [pattern, module, export, nav label]; a `:name` part becomes params.name.
const ROUTES = [
  ["", "./overview.js", "OverviewPage", "Overview"],
  ["queues", "./queues.js", "QueuesPage", "Queues"],
  ["queues/:queue", "./queue.js", "QueuePage", null],
  ["jobs/:id", "./job.js", "JobPage", null],
  ["dlq/:queue", "./dlq.js", "DlqPage", null],
  ["crons", "./crons.js", "CronsPage", "Crons"],
  ["webhooks", "./webhooks.js", "WebhooksPage", "Webhooks"],
  ["workers", "./workers.js", "WorkersPage", "Workers"],
];

// "#/queues/emails?state=failed&offset=50" -> the route and {queue, state, offset}.
export function parseHash(hash) {
  const raw = hash.replace(/^#\/?/, "");
  const [path, query = ""] = raw.split("?");
  const parts = path.split("/").filter(Boolean);
  for (const [pattern, module, name] of ROUTES) {
    const want = pattern.split("/").filter(Boolean);
    if (want.length !== parts.length) continue;
    const params = {};
    const ok = want.every((w, i) => {
      if (w.startsWith(":")) {
        params[w.slice(1)] = decodeURIComponent(parts[i]);
        return true;
      }
      return w === parts[i];
    });
    if (!ok) continue;
    for (const [key, value] of new URLSearchParams(query)) params[key] = value;
    return { pattern, module, name, params };
  }
  return null;
}

function useHash() {
  const [hash, setHash] = useState(location.hash);
  useEffect(() => {
    const changed = () => setHash(location.hash);
    window.addEventListener("hashchange", changed);
    return () => window.removeEventListener("hashchange", changed);
  }, []);
  return hash;
}

const loaded = new Map(); // module -> component (or an error)

function usePage(match) {
  const [, setVersion] = useState(0);
  if (!match) return { missing: true };
  const key = `${match.module}#${match.name}`;
  if (!loaded.has(key)) {
    loaded.set(key, null);
    import(match.module).then(
      (mod) => loaded.set(key, mod[match.name] || new Error(`${match.name} not exported`)),
      (error) => loaded.set(key, error),
    ).finally(() => setVersion((v) => v + 1));
  }
  const page = loaded.get(key);
  if (page instanceof Error) return { error: page };
  return { Page: page };
}

function TokenForm({ reason, onSaved }) {
  const [value, setValue] = useState("");
  const submit = (event) => {
    event.preventDefault();
    if (!value) return;
    setToken(value);
    onSaved();
  };
  return html`<form class="token-form" data-testid="token-form" onSubmit=${submit}>
    <h2>Sign in</h2>
    <p>${reason || "This broker needs an auth token."} It is kept for this tab only
      (sessionStorage) and sent as a bearer token.</p>
    <input type="password" autocomplete="current-password" placeholder="token"
      data-testid="token-input" value=${value}
      onInput=${(e) => setValue(e.target.value)} />
    <button type="submit" data-testid="token-save">Save</button>
  </form>`;
}

function Nav({ current, live, signedIn, onSignOut }) {
  const links = ROUTES.filter((r) => r[3]);
  return html`<nav class="top">
    <a class="brand" href="#/">trioqueue</a>
    ${links.map(([pattern, , , label]) => html`<a key=${pattern} href=${`#/${pattern}`}
      class=${current === pattern || (pattern && current?.startsWith(pattern)) ? "on" : ""}
      data-testid=${`nav-${pattern || "overview"}`}>${label}</a>`)}
    <span class="spacer"></span>
    <span class=${`live ${live}`} data-testid="live-status" title="live updates">${live}</span>
    ${signedIn ? html`<button class="link" data-testid="sign-out"
      onClick=${onSignOut}>sign out</button>` : null}
  </nav>`;
}

function App() {
  const hash = useHash();
  const match = parseHash(hash);
  const { Page, error, missing } = usePage(match);
  const [authReason, setAuthReason] = useState(null);
  const [live, setLive] = useState("offline");
  // Bumped when a token is saved, so the page remounts and loads again with it.
  const [generation, setGeneration] = useState(0);
  useEffect(() => {
    onAuthRequired((reason) => setAuthReason(reason));
    return onLiveStatus(setLive);
  }, []);
  const saved = () => {
    setAuthReason(null);
    setGeneration((g) => g + 1);
  };
  const signOut = () => {
    setToken(null);
    setAuthReason("Signed out.");
  };
  let body;
  if (authReason) body = html`<${TokenForm} reason=${authReason} onSaved=${saved} />`;
  else if (missing) body = html`<p class="empty">No such page: ${hash}</p>`;
  else if (error) body = html`<p class="error">This page is not available: ${error.message}</p>`;
  else if (!Page) body = html`<p class="empty">Loading…</p>`;
  else body = html`<${Page} key=${`${generation}:${hash.split("?")[0]}`} params=${match.params} />`;
  return html`<${Nav} current=${match?.pattern} live=${live}
      signedIn=${Boolean(getToken())} onSignOut=${signOut} />
    <main>${body}</main>`;
}

render(html`<${App} />`, document.getElementById("app"));
