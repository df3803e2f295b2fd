// The dashboard in a real browser: playwright-core driving Debian's chromium against a running
// suite. tests/dashboard_browser.rs starts the suite and runs this script; it can also run by
// hand against `a2a-mesh up`:
//
//   MESH_REGISTRY_URL=http://127.0.0.1:8000 MESH_ORCHESTRATOR_URL=http://127.0.0.1:8001 \
//   MESH_CHROMIUM=/usr/bin/chromium MESH_SCREENSHOT_DIR=/tmp/shots node tests/browser/dashboard.mjs
//
// With MESH_TOKEN (an admin token: the suite requires authentication), the script calls the API
// with it, checks the page's sign-in, and opens the page signed in through its address fragment.
//
// Every check runs even when an earlier one failed (each says what it saw); the script exits 1
// when any failed, and always prints the screenshots' paths.

import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { chromium } from 'playwright-core';

const registry = required('MESH_REGISTRY_URL').replace(/\/$/, '');
const orchestrator = required('MESH_ORCHESTRATOR_URL').replace(/\/$/, '');
const executablePath = process.env.MESH_CHROMIUM || '/usr/bin/chromium';
const shots = process.env.MESH_SCREENSHOT_DIR || join(process.cwd(), 'dashboard-screenshots');
const token = process.env.MESH_TOKEN || '';
const authorization = token ? { authorization: `Bearer ${token}` } : {};
// How long the page may take to show what the API says (it learns changes from the event stream).
const SETTLE_MS = 10_000;
// How long a query's call may take to reach the page: the agents report calls in batches.
const CALL_EVENT_MS = 20_000;

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`set ${name}`);
    process.exit(2);
  }
  return value;
}

const results = [];
const screenshots = [];
const consoleErrors = [];
// Console errors a check provokes on purpose (the browser logs every 4xx answer): matched by
// text and URL, each allowed once.
const expectedErrors = [];

async function check(name, body) {
  const started = Date.now();
  try {
    await body();
    results.push({ name, ok: true, ms: Date.now() - started });
    console.log(`ok   ${name}`);
  } catch (error) {
    results.push({ name, ok: false, ms: Date.now() - started, error: error.message });
    console.log(`FAIL ${name}: ${error.message}`);
  }
}

function assert(condition, message) {
  if (!condition) throw new Error(message);
}

async function eventually(what, probe, timeoutMs = SETTLE_MS) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try {
      const value = await probe();
      if (value) return value;
    } catch (error) {
      last = error;
    }
    if (Date.now() > deadline) throw new Error(`${what} within ${timeoutMs} ms${last ? `: ${last.message}` : ''}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function getJson(url, init) {
  const response = await fetch(url, { ...init, headers: { ...authorization, ...init?.headers } });
  const text = await response.text();
  if (!response.ok) throw new Error(`${init?.method || 'GET'} ${url} answered ${response.status}: ${text.slice(0, 300)}`);
  return JSON.parse(text);
}

async function screenshot(page, name) {
  const path = join(shots, name);
  await page.screenshot({ path, fullPage: true });
  screenshots.push(path);
}

const sortBy = (key) => (a, b) => String(a[key]).localeCompare(String(b[key]));
// The agents, and every end of a link that has not registered (drawn as `unregistered`).
const nodesOf = (topology) => {
  const nodes = topology.agents.map((a) => ({ id: a.id, health: ['healthy', 'unhealthy', 'unreachable'].includes(a.health_status) ? a.health_status : 'unknown' }));
  for (const end of topology.links.flatMap((l) => [l.from, l.to])) {
    if (!nodes.some((n) => n.id === end)) nodes.push({ id: end, health: 'unregistered' });
  }
  return nodes.sort(sortBy('id'));
};
const edgesOf = (topology) =>
  topology.links.map((l) => ({ id: l.id, from: l.from, to: l.to, direction: l.direction, relationship: l.relationship, enabled: Boolean(l.enabled) })).sort(sortBy('id'));

mkdirSync(shots, { recursive: true });
const browser = await chromium.launch({
  executablePath,
  // What works on these machines: no sandbox as root, and no background traffic to the outside.
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1480, height: 1000 } });
const page = await context.newPage();
page.on('console', (message) => {
  if (message.type() !== 'error') return;
  const url = message.location()?.url || '';
  const expected = expectedErrors.findIndex((e) => message.text().includes(e.text) && url.includes(e.url));
  if (expected >= 0) expectedErrors.splice(expected, 1);
  else consoleErrors.push(`${message.text()} (${url})`);
});
page.on('pageerror', (error) => consoleErrors.push(`uncaught: ${error.message}`));

let created = null;

if (token) {
  await check('without a token the page asks for one, and a token signs it in', async () => {
    // A tab of its own: its refusals are expected, and its session must not sign the main page in.
    const guest = await browser.newContext({ viewport: { width: 1200, height: 900 } });
    const tab = await guest.newPage();
    try {
      await tab.goto(`${registry}/dashboard`);
      await tab.waitForSelector('#signin:not([hidden])', { timeout: SETTLE_MS });
      const reason = await tab.textContent('#signin-reason');
      assert(reason.includes('authentication required'), `sign-in reason: ${reason}`);
      assert(!(await tab.getAttribute('body', 'data-ready')), 'the page shows data without a token');
      await screenshot(tab, '00-sign-in.png');
      await tab.getByLabel('Access token', { exact: true }).fill(token);
      await tab.getByRole('button', { name: 'Sign in' }).click();
      await tab.waitForSelector('body[data-ready="true"]', { timeout: SETTLE_MS });
      assert(await tab.isHidden('#signin'), 'the sign-in form stays after signing in');
      await tab.waitForSelector('body[data-stream="live"]', { timeout: SETTLE_MS });
    } finally {
      await guest.close();
    }
  });
}

await check('the dashboard loads, with its assets from the registry only', async () => {
  const foreign = [];
  page.on('request', (request) => {
    if (!request.url().startsWith(registry) && !request.url().startsWith('data:')) foreign.push(request.url());
  });
  // Signed in as `a2a-mesh up --auth` prints the address: the token in the fragment.
  const response = await page.goto(`${registry}/dashboard${token ? `#token=${encodeURIComponent(token)}` : ''}`);
  assert(response.ok(), `GET /dashboard answered ${response.status()}`);
  const csp = response.headers()['content-security-policy'] || '';
  assert(csp.includes("default-src 'self'"), `Content-Security-Policy: ${csp || 'none'}`);
  await page.waitForSelector('body[data-ready="true"]', { timeout: SETTLE_MS });
  const address = page.url();
  assert(!address.includes('token='), `the token stays in the address bar: ${address}`);
  await page.waitForSelector('body[data-stream="live"]', { timeout: SETTLE_MS });
  assert(foreign.length === 0, `requests outside the registry: ${foreign.join(', ')}`);
});

await check('the graph shows the nodes and edges of /api/topology', async () => {
  // Both sides can move (a health poll): compare until they agree, then once more at rest.
  let last = {};
  await eventually(`the graph equal to /api/topology (last: ${JSON.stringify(last)})`, async () => {
    const topology = await getJson(`${registry}/api/topology`);
    const shown = await page.evaluate(() => window.meshDashboard.graph());
    last = { api: { nodes: nodesOf(topology), edges: edgesOf(topology) }, page: { nodes: shown.nodes.sort(sortBy('id')), edges: shown.edges.sort(sortBy('id')) } };
    assert(topology.agents.length >= 4, `the suite's four agents in /api/topology, got ${topology.agents.length}`);
    return JSON.stringify(last.api) === JSON.stringify(last.page);
  });
  const topology = await getJson(`${registry}/api/topology`);
  const listed = await page.$$eval('#agent-list button', (buttons) => buttons.map((b) => b.dataset.agentId).sort());
  assert(JSON.stringify(listed) === JSON.stringify(topology.agents.map((a) => a.id).sort()), `agent list ${listed}`);
  const rows = await page.$$eval('#link-table tbody tr', (trs) => trs.map((tr) => tr.dataset.linkId).sort());
  assert(JSON.stringify(rows) === JSON.stringify(topology.links.map((l) => l.id).sort()), `link table ${rows}`);
  const mode = await page.textContent('#mode');
  assert(mode.includes(topology.mode), `mode badge "${mode}", API says ${topology.mode}`);
  await screenshot(page, '01-topology.png');
});

await check('a link created in the editor is in the API and on the graph', async () => {
  const topology = await getJson(`${registry}/api/topology`);
  const ids = topology.agents.map((a) => a.id).sort();
  const joined = (a, b) => topology.links.some((l) => (l.from === a && l.to === b) || (l.from === b && l.to === a));
  const pair = ids.flatMap((a) => ids.map((b) => [a, b])).find(([a, b]) => a !== b && !joined(a, b));
  assert(pair, `no two agents without a link among ${ids}`);
  const [from, to] = pair;
  // By keyboard-reachable, labelled controls, as an operator would.
  await page.getByLabel('From', { exact: true }).selectOption(from);
  await page.getByLabel('To', { exact: true }).selectOption(to);
  await page.getByLabel('Direction', { exact: true }).selectOption('one_way');
  await page.getByLabel('Relationship', { exact: true }).selectOption('peer');
  await page.getByRole('button', { name: 'Create link' }).click();
  await page.waitForFunction(() => document.getElementById('link-status').textContent.startsWith('Created'), null, { timeout: SETTLE_MS });
  const { links } = await getJson(`${registry}/api/links`);
  created = links.find((l) => l.from_agent_id === from && l.to_agent_id === to);
  assert(created, `no link ${from} -> ${to} in /api/links: ${JSON.stringify(links)}`);
  assert(created.direction === 'one_way' && created.relationship === 'peer' && created.enabled === true, `link as stored: ${JSON.stringify(created)}`);
  await eventually('the new edge on the graph', () =>
    page.evaluate((id) => window.meshDashboard.graph().edges.some((e) => e.id === id && e.direction === 'one_way'), created.id),
  );
});

await check('a link edited in the editor changes in the API; a duplicate shows the API error', async () => {
  assert(created, 'no link was created');
  await page.locator(`#link-table tr[data-link-id="${created.id}"]`).getByRole('button', { name: /^Edit/ }).click();
  await page.getByLabel('Enabled', { exact: true }).uncheck();
  await page.getByLabel('Relationship', { exact: true }).selectOption('superior');
  await page.getByRole('button', { name: 'Save changes' }).click();
  await page.waitForFunction(() => document.getElementById('link-status').textContent.startsWith('Saved'), null, { timeout: SETTLE_MS });
  const stored = await getJson(`${registry}/api/links/${created.id}`);
  assert(stored.enabled === false && stored.relationship === 'superior', `link as stored: ${JSON.stringify(stored)}`);
  await eventually('the edge drawn disabled', () =>
    page.evaluate((id) => window.meshDashboard.graph().edges.some((e) => e.id === id && e.enabled === false && e.relationship === 'superior'), created.id),
  );
  await screenshot(page, '02-link-edited.png');

  // The same ends again: the registry refuses, and the page says why.
  expectedErrors.push({ text: 'status of 409', url: '/api/links' });
  await page.getByLabel('From', { exact: true }).selectOption(created.from_agent_id);
  await page.getByLabel('To', { exact: true }).selectOption(created.to_agent_id);
  await page.getByRole('button', { name: 'Create link' }).click();
  const error = await page.waitForSelector('#link-error:not([hidden])', { timeout: SETTLE_MS });
  const text = await error.textContent();
  assert(text.includes('LINK_EXISTS'), `error shown: ${text}`);
});

await check('the agent panel shows capabilities, card, health history and circuits', async () => {
  const topology = await getJson(`${registry}/api/topology`);
  const agent = topology.agents.find((a) => a.id === 'orchestrator') || topology.agents[0];
  await page.locator(`#agent-list button[data-agent-id="${agent.id}"]`).click();
  await page.waitForSelector('#agent-panel:not([hidden])');
  const chips = await page.$$eval('#agent-capabilities li', (items) => items.map((i) => i.textContent).sort());
  assert(JSON.stringify(chips) === JSON.stringify([...agent.capabilities].sort()), `capabilities ${chips} vs ${agent.capabilities}`);
  const card = await getJson(`${agent.url}/.well-known/agent-card.json`);
  await eventually('the agent card in the panel', async () => (await page.textContent('#agent-card')).includes(card.name));
  await eventually('circuits or their absence in the panel', async () => !(await page.textContent('#agent-circuits')).includes('loading'));
  const history = await page.$$eval('#agent-health-history li', (items) => items.length);
  assert(history >= 1, 'no health history');
  await screenshot(page, '03-agent-panel.png');
});

// Calls reported to the registry as an agent reports them: the page must light their edges and
// list them. Marked by their capability, so the query's check below counts only real calls.
const PROBE_CAPABILITY = 'browser-test-probe';

await check('reported calls light their edges and fill the recent-calls table', async () => {
  const { links } = await getJson(`${registry}/api/topology`);
  const enabled = links.filter((l) => l.enabled);
  assert(enabled.length > 0, 'no enabled link to light');
  const calls = enabled.map((l) => ({ from: l.from, to: l.to, capability: PROBE_CAPABILITY, status: 'SUCCESS', latency_ms: 7 }));
  const accepted = await getJson(`${registry}/api/events/calls`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ calls }),
  });
  assert(accepted.accepted === calls.length, `accepted: ${JSON.stringify(accepted)}`);
  // An edge stays lit for a moment only: look often, and photograph it lit.
  const lit = await eventually(
    'every reported edge lit',
    async () => {
      const shown = await page.evaluate(() => window.meshDashboard.graph().lit);
      return calls.every((c) => shown.some((e) => e.from === c.from && e.to === c.to)) && shown;
    },
    SETTLE_MS,
  );
  // Past the colour transition (250 ms), well within the time an edge stays lit.
  await page.waitForTimeout(400);
  await screenshot(page, '04-calls-lit.png');
  assert(lit.length >= calls.length, `lit: ${JSON.stringify(lit)}`);
  const rows = await page.$$eval('#call-table tbody tr', (trs) => trs.length);
  assert(rows >= calls.length, `${rows} rows in the recent-calls table for ${calls.length} calls`);
});

await check('an agent message over a link shows once in the messages table and in the link\'s history', async () => {
  const { links } = await getJson(`${registry}/api/links`);
  const link = links.find((l) => l.enabled && l.from_agent_id === 'orchestrator') || links.find((l) => l.enabled);
  assert(link, 'no enabled link');
  const text = `status report please (${Date.now()})`;
  // What the sending agent records after sending over the link; the registry announces it twice
  // (sent and received), and the page lists it once.
  await getJson(`${registry}/api/links/${link.id}/messages`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ from_agent_id: link.from_agent_id, to_agent_id: link.to_agent_id, context_id: `link:${link.id}`, text, reply: 'all green', status: 'SUCCESS' }),
  });
  await eventually('the message in the messages table', async () => (await page.$$('#message-table tbody tr')).length > 0);
  await page.waitForTimeout(300);
  const rows = await page.$$eval('#message-table tbody tr', (trs) => trs.map((tr) => tr.textContent));
  assert(rows.length === 1 && rows[0].includes(link.id), `message rows: ${JSON.stringify(rows)}`);
  await page.locator(`#link-table tr[data-link-id="${link.id}"]`).getByRole('button', { name: /^Messages/ }).click();
  await eventually('the message in the link\'s history', async () => (await page.textContent('#link-messages-list')).includes(text));
  const focused = await page.evaluate(() => document.activeElement.id);
  assert(focused === 'link-messages-close', `focus on ${focused} after opening the history`);
  await page.keyboard.press('Enter');
  await page.waitForSelector('#link-messages', { state: 'hidden' });
});

await check('a query reaches the page as call events', async () => {
  const response = await getJson(`${orchestrator}/tasks/send`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', parts: [{ type: 'text', text: 'robots playing soccer' }] }] }),
  });
  assert(response.status === 'SUCCESS' || response.status === 'PARTIAL', `orchestrator answered ${JSON.stringify(response).slice(0, 300)}`);
  // The agents report their calls to the registry (in batches); the page hears of them from it.
  const real = () => page.evaluate((probe) => window.meshDashboard.calls().filter((c) => c.capability !== probe), PROBE_CAPABILITY);
  try {
    await eventually('a call from the orchestrator to search on the page', async () => (await real()).some((c) => c.from === 'orchestrator' && c.to === 'search'), CALL_EVENT_MS);
  } finally {
    await screenshot(page, '05-after-query.png');
  }
  // The orchestrator (in the panel since the agent-panel check) now has circuits to show.
  await eventually('the orchestrator\'s circuit to search in the agent panel', async () => {
    const cells = await page.$$eval('#agent-circuits td', (tds) => tds.map((td) => td.textContent));
    return cells.includes('search');
  });
  const seen = await real();
  const rows = await page.$$eval('#call-table tbody tr[data-from="orchestrator"]', (trs) => trs.length);
  assert(rows >= seen.filter((c) => c.from === 'orchestrator').length, `${rows} table rows for ${JSON.stringify(seen)}`);
});

await check('the org chart view opens by keyboard', async () => {
  await page.focus('#tab-topology');
  await page.keyboard.press('ArrowRight');
  await page.waitForSelector('#view-org:not([hidden])');
  const focused = await page.evaluate(() => document.activeElement.id);
  assert(focused === 'tab-org', `focus on ${focused}`);
  await screenshot(page, '06-org-chart.png');
  await page.keyboard.press('ArrowLeft');
  await page.waitForSelector('#view-topology:not([hidden])');
});

await check('a link deleted in the editor is gone from the API and the graph', async () => {
  assert(created, 'no link was created');
  await page.locator(`#link-table tr[data-link-id="${created.id}"]`).getByRole('button', { name: /^Edit/ }).click();
  await page.getByRole('button', { name: 'Delete link' }).click();
  await page.waitForFunction(() => document.getElementById('link-status').textContent.startsWith('Deleted'), null, { timeout: SETTLE_MS });
  const response = await fetch(`${registry}/api/links/${created.id}`, { headers: authorization });
  assert(response.status === 404, `GET the deleted link answered ${response.status}`);
  await eventually('the edge gone from the graph', () =>
    page.evaluate((id) => !window.meshDashboard.graph().edges.some((e) => e.id === id), created.id),
  );
});

await check('no console error on the page', async () => {
  assert(consoleErrors.length === 0, consoleErrors.join(' | '));
  assert(expectedErrors.length === 0, `expected errors never logged: ${JSON.stringify(expectedErrors)}`);
});

await browser.close();
console.log(`screenshots:\n${screenshots.map((p) => `  ${p}`).join('\n')}`);
const failed = results.filter((r) => !r.ok);
console.log(`${results.length - failed.length} passed, ${failed.length} failed`);
process.exit(failed.length === 0 ? 0 : 1);
