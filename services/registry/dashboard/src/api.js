// The registry's HTTP API as the dashboard uses it. Every call goes to this page's own origin
// (its Content-Security-Policy allows nothing else); a failure becomes an ApiError carrying the
// registry's JSON error body, so the page can show the operator what the registry said.
//
// When the registry requires authentication, every call carries the operator's token
// (`Authorization: Bearer`). It comes from the address's fragment (`#token=…`, as
// `a2a-mesh up --auth` prints it: a fragment never reaches a server or its logs) or from the
// sign-in form, and is kept for this tab only (sessionStorage).

const TOKEN_KEY = 'a2a-mesh-token';
const TOKEN_FRAGMENT = /^#token=([^&]+)$/;

export const session = {
  // Takes a token from the address's fragment, then removes it from the address bar, so it is
  // neither bookmarked nor shown.
  adoptFromLocation() {
    const found = TOKEN_FRAGMENT.exec(window.location.hash);
    if (!found) return;
    this.set(decodeURIComponent(found[1]));
    window.history.replaceState(null, '', window.location.pathname + window.location.search);
  },
  set(token) {
    sessionStorage.setItem(TOKEN_KEY, token);
  },
  clear() {
    sessionStorage.removeItem(TOKEN_KEY);
  },
  headers(headers) {
    const token = sessionStorage.getItem(TOKEN_KEY);
    return token ? { ...headers, authorization: `Bearer ${token}` } : headers;
  },
};

export class ApiError extends Error {
  constructor(status, code, message) {
    super(code ? `${code}: ${message}` : message);
    this.status = status;
    this.code = code;
  }
}

async function call(method, path, body) {
  const init = { method, headers: session.headers({ accept: 'application/json' }) };
  if (body !== undefined) {
    init.headers['content-type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, 'NETWORK', `cannot reach the registry (${error.message})`);
  }
  const text = await response.text();
  const json = parsed(text);
  if (!response.ok) throw refusal(method, path, response.status, json);
  if (json === null && text) {
    throw new ApiError(response.status, 'BAD_RESPONSE', `${method} ${path} did not answer JSON`);
  }
  return json;
}

// JSON, or null when the text is none (reported by the caller with the status).
function parsed(text) {
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return null;
  }
}

function refusal(method, path, status, json) {
  const code = json && json.error_code;
  const message = (json && json.error_message) || `${method} ${path} answered ${status}`;
  return new ApiError(status, code, message);
}

// Reads the registry's event stream (Server-Sent Events) until it ends: `onOpen` once it is
// accepted, then `onEvent(kind, data)` for each event. Over fetch rather than EventSource, which
// cannot send the Authorization header. Throws an ApiError when the registry refuses the stream.
export async function streamEvents({ onOpen, onEvent }) {
  let response;
  try {
    response = await fetch('/api/events', { headers: session.headers({ accept: 'text/event-stream' }), cache: 'no-store' });
  } catch (error) {
    throw new ApiError(0, 'NETWORK', `cannot reach the registry (${error.message})`);
  }
  if (!response.ok) throw refusal('GET', '/api/events', response.status, parsed(await response.text()));
  onOpen();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  let kind = 'message';
  let data = [];
  for (;;) {
    let chunk;
    try {
      chunk = await reader.read();
    } catch {
      return; // The connection dropped: the caller reconnects.
    }
    if (chunk.done) return;
    buffer += chunk.value;
    // One field per line; a blank line ends an event (the SSE format).
    let end;
    while ((end = buffer.indexOf('\n')) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, '');
      buffer = buffer.slice(end + 1);
      if (line === '') {
        if (data.length > 0) onEvent(kind, data.join('\n'));
        kind = 'message';
        data = [];
      } else if (!line.startsWith(':')) {
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'event') kind = value;
        else if (field === 'data') data.push(value);
      }
    }
  }
}

const segment = (value) => encodeURIComponent(value);

export const api = {
  topology: () => call('GET', '/api/topology'),
  links: () => call('GET', '/api/links'),
  createLink: (link) => call('POST', '/api/links', link),
  updateLink: (id, changes) => call('PUT', `/api/links/${segment(id)}`, changes),
  deleteLink: (id) => call('DELETE', `/api/links/${segment(id)}`),
  linkMessages: (id, limit = 50) => call('GET', `/api/links/${segment(id)}/messages?limit=${limit}`),
  org: (agent) => call('GET', `/api/agents/${segment(agent)}/org`),
  agentLinks: (agent) => call('GET', `/api/agents/${segment(agent)}/links`),
  agent: (agent) => call('GET', `/agents/${segment(agent)}`),
  // The registry relays these from the agent's registered URLs (see src/dashboard.rs).
  agentCard: (agent) => call('GET', `/dashboard/agents/${segment(agent)}/card`),
  agentHealth: (agent) => call('GET', `/dashboard/agents/${segment(agent)}/health`),
};

// Every kind of event `/api/events` sends (the contract of issue 14).
export const EVENT_KINDS = [
  'agent_registered',
  'agent_deregistered',
  'health_changed',
  'link_created',
  'link_updated',
  'link_deleted',
  'agent_message_sent',
  'agent_message_received',
  'call',
  'gap',
];
