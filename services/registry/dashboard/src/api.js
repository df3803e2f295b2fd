// The registry's HTTP API as the dashboard uses it. Every call goes to this page's own origin
// (its Content-Security-Policy allows nothing else); a failure becomes an ApiError carrying the
// registry's JSON error body, so the page can show the operator what the registry said.

export class ApiError extends Error {
  constructor(status, code, message) {
    super(code ? `${code}: ${message}` : message);
    this.status = status;
    this.code = code;
  }
}

async function call(method, path, body) {
  const init = { method, headers: { accept: 'application/json' } };
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
  let json = null;
  if (text) {
    try {
      json = JSON.parse(text);
    } catch {
      // Not JSON: reported below with the status.
    }
  }
  if (!response.ok) {
    const code = json && json.error_code;
    const message = (json && json.error_message) || `${method} ${path} answered ${response.status}`;
    throw new ApiError(response.status, code, message);
  }
  if (json === null && text) {
    throw new ApiError(response.status, 'BAD_RESPONSE', `${method} ${path} did not answer JSON`);
  }
  return json;
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
