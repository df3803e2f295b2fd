// The dashboard: the registry's topology drawn live, an agent panel, the link editor, recent calls
// and agent messages. State comes from the registry's API; changes arrive on its event stream
// (`/api/events`), which also lights the edges calls and messages cross.

import { api, EVENT_KINDS, session, streamEvents } from './api.js';
import { OrgChart, TopologyGraph, healthWord } from './graph.js';

// Bounds on what the page keeps: it may stay open for days.
const CALLS_MAX = 200;
const MESSAGES_MAX = 100;
const HEALTH_HISTORY_MAX = 50;
// Events that change the topology often come in bursts (a link created, then updated): fetch once.
const REFRESH_DEBOUNCE_MS = 150;
// After the event stream dropped or was refused, the page connects again after this long.
const EVENTS_RETRY_MS = 5000;
const HTTP_UNAUTHORIZED = 401;
// Calls come in bursts (a query fans out): the panel's circuits are read once the burst is over.
const CIRCUITS_REFRESH_MS = 500;

const $ = (id) => document.getElementById(id);

// Builds an element; children are nodes or text (never parsed as HTML).
function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === 'class') node.className = value;
    else if (key === 'dataset') Object.assign(node.dataset, value);
    else if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? '' : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function time(at) {
  const date = at ? new Date(at) : new Date();
  return Number.isNaN(date.getTime()) ? String(at) : date.toLocaleTimeString();
}

const state = {
  topology: { agents: [], links: [], mode: 'open' },
  links: [],
  selectedAgent: null,
  editing: null,
  openMessagesLink: null,
  calls: [],
  messages: [],
  messageIds: new Set(),
  health: new Map(),
  eventsSeen: 0,
};

const graph = new TopologyGraph($('graph'), { onSelectAgent: selectAgent, onSelectLink: startEdit });
const org = new OrgChart($('org-graph'), { onSelectAgent: selectAgent });

// ---------------------------------------------------------------- topology

let refreshing = null;
let refreshAgain = false;
let refreshTimer = null;

function scheduleRefresh() {
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(refresh, REFRESH_DEBOUNCE_MS);
}

// One fetch at a time; a request while one runs fetches once more after it.
async function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return refreshing;
  }
  refreshing = (async () => {
    try {
      const [topology, links] = await Promise.all([api.topology(), api.links()]);
      state.topology = topology;
      state.links = links.links;
      for (const agent of topology.agents) {
        if (!state.health.has(agent.id)) {
          state.health.set(agent.id, [{ at: agent.last_health_check, to: healthWord(agent.health_status), note: 'when the page loaded' }]);
        }
      }
      render();
      $('load-error').hidden = true;
      document.body.dataset.ready = 'true';
    } catch (error) {
      if (error.status === HTTP_UNAUTHORIZED) askToSignIn(error.message);
      $('load-error').textContent = `Cannot load the topology: ${error.message}`;
      $('load-error').hidden = false;
    }
  })();
  await refreshing;
  refreshing = null;
  if (refreshAgain) {
    refreshAgain = false;
    await refresh();
  }
}

function render() {
  const { topology } = state;
  const mode = $('mode');
  mode.textContent = `mode: ${topology.mode || 'open'}`;
  mode.classList.toggle('enforced', topology.mode === 'enforced');
  graph.sync(topology);
  if (!$('view-org').hidden) org.sync(topology);
  else org.stale = true;
  graph.select(state.selectedAgent);
  renderAgents();
  renderLinks();
  renderLinkChoices();
  if (state.selectedAgent) {
    if (topology.agents.some((a) => a.id === state.selectedAgent)) renderAgentBasics(state.selectedAgent);
    else closeAgentPanel();
  }
  if (state.editing && !state.links.some((l) => l.id === state.editing.id)) {
    resetForm();
    $('link-status').textContent = 'The link being edited was deleted.';
  }
}

// Lists are rebuilt when events arrive: the button that had the keyboard focus gets it back.
function keepFocus(container, rebuild) {
  const active = document.activeElement;
  const keyOf = (button) => button.getAttribute('aria-label') || button.dataset.agentId;
  const key = active && container.contains(active) ? keyOf(active) : null;
  rebuild();
  if (key) [...container.querySelectorAll('button')].find((button) => keyOf(button) === key)?.focus();
}

function agentById(id) {
  return state.topology.agents.find((agent) => agent.id === id);
}

function renderAgents() {
  const agents = [...state.topology.agents].sort((a, b) => a.id.localeCompare(b.id));
  $('agent-count').textContent = `(${agents.length})`;
  keepFocus($('agent-list'), () => $('agent-list').replaceChildren(
    ...agents.map((agent) => {
      const health = healthWord(agent.health_status);
      return el(
        'li',
        {},
        el(
          'button',
          {
            type: 'button',
            class: `health-${health}`,
            'aria-pressed': String(agent.id === state.selectedAgent),
            dataset: { agentId: agent.id },
            onclick: () => selectAgent(agent.id),
          },
          el('span', { class: 'dot', 'aria-hidden': 'true' }),
          el('span', {}, agent.name || agent.id),
          el('span', { class: 'health-word' }, health),
        ),
      );
    }),
  ));
}

const arrow = (link) => `${link.from_agent_id} ${link.direction === 'two_way' ? '↔' : '→'} ${link.to_agent_id}`;

function renderLinks() {
  const links = [...state.links].sort((a, b) => a.from_agent_id.localeCompare(b.from_agent_id) || a.to_agent_id.localeCompare(b.to_agent_id));
  $('link-count').textContent = `(${links.length})`;
  const body = $('link-table').tBodies[0];
  keepFocus(body, () => body.replaceChildren(
    ...links.map((link) =>
      el(
        'tr',
        { dataset: { linkId: link.id, from: link.from_agent_id, to: link.to_agent_id }, 'aria-current': state.editing?.id === link.id ? 'true' : null },
        el('td', { title: link.direction.replace('_', ' ') }, arrow(link)),
        el('td', {}, link.relationship),
        el('td', {}, link.enabled ? 'yes' : 'no'),
        el('td', {}, link.source || ''),
        el(
          'td',
          { class: 'actions' },
          el('button', { type: 'button', 'aria-label': `Edit the link ${arrow(link)}`, onclick: () => startEdit(link.id) }, 'Edit'),
          ' ',
          el('button', { type: 'button', 'aria-label': `Messages over the link ${arrow(link)}`, onclick: () => showLinkMessages(link.id) }, 'Messages'),
        ),
      ),
    ),
  ));
}

function renderLinkChoices() {
  const ids = state.topology.agents.map((agent) => agent.id).sort();
  for (const select of [$('link-from'), $('link-to')]) {
    const chosen = select.value;
    select.replaceChildren(...ids.map((id) => el('option', { value: id }, id)));
    if (ids.includes(chosen)) select.value = chosen;
  }
  if (!state.editing && $('link-from').value === $('link-to').value && ids.length > 1) {
    $('link-to').value = ids.find((id) => id !== $('link-from').value);
  }
}

// ---------------------------------------------------------------- agent panel

let panelToken = 0;

function selectAgent(id) {
  state.selectedAgent = id;
  graph.select(id);
  org.select(id);
  renderAgents();
  $('agent-panel').hidden = false;
  renderAgentBasics(id);
  loadAgentDetails(id);
}

function closeAgentPanel() {
  state.selectedAgent = null;
  panelToken += 1;
  $('agent-panel').hidden = true;
  graph.select(null);
  org.select(null);
  renderAgents();
}

function facts(list, pairs) {
  list.replaceChildren(...pairs.flatMap(([term, value]) => [el('dt', {}, term), el('dd', {}, value)]));
}

function renderAgentBasics(id) {
  const agent = agentById(id);
  if (!agent) {
    // A link's end that has not registered: the org chart and links still load below.
    $('agent-title').textContent = id;
    facts($('agent-facts'), [['Health', 'not registered']]);
    $('agent-capabilities').replaceChildren();
    renderHealthHistory(id);
    return;
  }
  $('agent-title').textContent = agent.name || agent.id;
  facts($('agent-facts'), [
    ['Health', healthWord(agent.health_status)],
    ['URL', agent.url],
    ['Checked', agent.last_health_check ? time(agent.last_health_check) : 'never'],
  ]);
  $('agent-capabilities').replaceChildren(...(agent.capabilities || []).map((c) => el('li', {}, c)));
  renderHealthHistory(id);
}

function renderHealthHistory(id) {
  const history = state.health.get(id) || [];
  $('agent-health-history').replaceChildren(
    ...[...history].reverse().map((entry) =>
      el('li', {}, `${time(entry.at)}: `, entry.from ? `${entry.from} → ${entry.to}` : entry.to, entry.note ? ` (${entry.note})` : ''),
    ),
  );
}

function agentButtons(ids) {
  if (!ids || ids.length === 0) return 'none';
  return ids.map((id) => el('button', { type: 'button', class: 'link-button', onclick: () => selectAgent(id) }, id));
}

async function loadAgentDetails(id) {
  const token = ++panelToken;
  const current = () => token === panelToken;
  $('agent-org').replaceChildren(el('dd', {}, 'loading…'));
  $('agent-card').replaceChildren(el('p', { class: 'note' }, 'loading…'));
  $('agent-circuits').replaceChildren(el('p', { class: 'note' }, 'loading…'));

  const [record, orgChart, card, health] = await Promise.allSettled([api.agent(id), api.org(id), api.agentCard(id), api.agentHealth(id)]);
  if (!current()) return;

  if (record.status === 'fulfilled') {
    const r = record.value;
    facts($('agent-facts'), [
      ['Health', healthWord(r.health_status)],
      ['URL', r.url],
      ['Tasks', r.process_endpoint],
      ['Health check', r.health_endpoint],
      ['Card', r.agent_card_url],
      ['Registered', time(r.registered_at)],
      ['Checked', r.last_health_check ? time(r.last_health_check) : 'never'],
    ]);
  }

  if (orgChart.status === 'fulfilled') {
    const o = orgChart.value;
    facts($('agent-org'), [
      ['Superiors', agentButtons(o.superiors)],
      ['Subordinates', agentButtons(o.subordinates)],
      ['Peers', agentButtons(o.peers)],
    ]);
  } else {
    $('agent-org').replaceChildren(el('dd', { class: 'error' }, orgChart.reason.message));
  }

  if (card.status === 'fulfilled') {
    const c = card.value;
    const skills = c.skills || [];
    $('agent-card').replaceChildren(
      el('dl', { class: 'facts' }, el('dt', {}, 'Name'), el('dd', {}, c.name || ''), el('dt', {}, 'Version'), el('dd', {}, c.version || ''), el('dt', {}, 'About'), el('dd', {}, c.description || '')),
      el('p', { class: 'note' }, `Skills (${skills.length}):`),
      el('ul', { class: 'chips' }, ...skills.map((s) => el('li', { title: s.description || '' }, s.name || s.id))),
      el('details', {}, el('summary', {}, 'The whole card'), el('pre', { class: 'raw' }, JSON.stringify(c, null, 2))),
    );
  } else {
    // The registry's own record (above) still says where the agent lives.
    $('agent-card').replaceChildren(el('p', { class: 'error' }, `The agent's card cannot be read now: ${card.reason.message}`));
  }

  renderCircuits(health);
}

// The agent's circuit breakers, from its own /health (relayed by the registry).
function renderCircuits(health) {
  if (health.status === 'fulfilled') {
    const circuits = health.value.circuits || [];
    $('agent-circuits').replaceChildren(
      circuits.length === 0
        ? el('p', { class: 'note' }, 'No circuit: this agent has not called another one yet.')
        : el(
            'div',
            { class: 'table-wrap' },
            el(
              'table',
              {},
              el('caption', { class: 'visually-hidden' }, 'The circuit breaker of every agent instance this agent called'),
              el('thead', {}, el('tr', {}, el('th', { scope: 'col' }, 'Agent'), el('th', { scope: 'col' }, 'Endpoint'), el('th', { scope: 'col' }, 'State'))),
              el('tbody', {}, ...circuits.map((c) => el('tr', {}, el('td', {}, c.agent), el('td', { class: 'endpoint' }, c.endpoint), el('td', {}, c.state)))),
            ),
          ),
    );
  } else {
    $('agent-circuits').replaceChildren(el('p', { class: 'error' }, `The agent's health cannot be read now: ${health.reason.message}`));
  }
}

let circuitsTimer = null;

// A call by the agent in the panel may have opened or closed one of its circuits: read them again,
// once per burst of calls.
function refreshCircuitsSoon(id) {
  clearTimeout(circuitsTimer);
  circuitsTimer = setTimeout(async () => {
    const token = panelToken;
    const [health] = await Promise.allSettled([api.agentHealth(id)]);
    if (token === panelToken && state.selectedAgent === id) renderCircuits(health);
  }, CIRCUITS_REFRESH_MS);
}

// ---------------------------------------------------------------- link editor

function formValues() {
  return {
    direction: $('link-direction').value,
    relationship: $('link-relationship').value,
    enabled: $('link-enabled').checked,
  };
}

function showFormError(message) {
  $('link-error').textContent = message;
  $('link-error').hidden = !message;
}

function startEdit(linkId) {
  const link = state.links.find((l) => l.id === linkId);
  if (!link) return;
  state.editing = link;
  $('link-form-title').textContent = `Edit link ${arrow(link)}`;
  $('link-from').value = link.from_agent_id;
  $('link-to').value = link.to_agent_id;
  // A link's ends are its identity: the API changes only its properties.
  $('link-from').disabled = true;
  $('link-to').disabled = true;
  $('link-direction').value = link.direction;
  $('link-relationship').value = link.relationship;
  $('link-enabled').checked = Boolean(link.enabled);
  $('link-submit').textContent = 'Save changes';
  $('link-cancel').hidden = false;
  $('link-delete').hidden = false;
  $('link-config-note').hidden = link.source !== 'config';
  showFormError('');
  $('link-status').textContent = '';
  renderLinks();
  graph.cy.$(':selected').unselect();
  graph.cy.getElementById(link.id).select();
  $('link-direction').focus();
}

function resetForm() {
  state.editing = null;
  $('link-form-title').textContent = 'New link';
  $('link-from').disabled = false;
  $('link-to').disabled = false;
  $('link-direction').value = 'two_way';
  $('link-relationship').value = 'peer';
  $('link-enabled').checked = true;
  $('link-submit').textContent = 'Create link';
  $('link-cancel').hidden = true;
  $('link-delete').hidden = true;
  $('link-config-note').hidden = true;
  showFormError('');
  renderLinks();
}

async function submitLink(event) {
  event.preventDefault();
  showFormError('');
  $('link-status').textContent = '';
  const submit = $('link-submit');
  submit.disabled = true;
  try {
    if (state.editing) {
      const link = await api.updateLink(state.editing.id, formValues());
      resetForm();
      $('link-status').textContent = `Saved the link ${arrow(link)}.`;
    } else {
      // The registry checks the ends (unknown agent, self-link, duplicate) and says what is wrong.
      const link = await api.createLink({ from_agent_id: $('link-from').value, to_agent_id: $('link-to').value, ...formValues() });
      resetForm();
      $('link-status').textContent = `Created the link ${arrow(link)}.`;
    }
    await refresh();
  } catch (error) {
    showFormError(error.message);
  } finally {
    submit.disabled = false;
  }
}

async function deleteLink() {
  if (!state.editing) return;
  const link = state.editing;
  showFormError('');
  try {
    await api.deleteLink(link.id);
    resetForm();
    $('link-status').textContent = `Deleted the link ${arrow(link)}.`;
    await refresh();
    $('link-submit').focus();
  } catch (error) {
    showFormError(error.message);
  }
}

async function showLinkMessages(linkId) {
  const link = state.links.find((l) => l.id === linkId);
  state.openMessagesLink = linkId;
  $('link-messages').hidden = false;
  $('link-messages-title').textContent = link ? `Messages ${arrow(link)}` : 'Link messages';
  const list = $('link-messages-list');
  try {
    const { messages } = await api.linkMessages(linkId);
    if (state.openMessagesLink !== linkId) return;
    list.replaceChildren(
      ...(messages.length === 0
        ? [el('li', { class: 'note' }, 'No message over this link yet.')]
        : messages.map((m) =>
            el(
              'li',
              {},
              el('div', { class: 'meta' }, `${time(m.sent_at)} · ${m.from_agent_id} → ${m.to_agent_id} · ${m.status}`),
              el('div', {}, m.text),
              m.reply ? el('div', { class: 'meta' }, `reply: ${m.reply}`) : null,
            ),
          )),
    );
  } catch (error) {
    list.replaceChildren(el('li', { class: 'error' }, error.message));
  }
  $('link-messages-close').focus();
}

// ---------------------------------------------------------------- events

function prependRow(table, row, max) {
  const body = table.tBodies[0];
  body.prepend(row);
  while (body.rows.length > max) body.deleteRow(body.rows.length - 1);
}

function onCall(call) {
  state.calls.unshift(call);
  state.calls.length = Math.min(state.calls.length, CALLS_MAX);
  const status = String(call.status || '').toLowerCase();
  prependRow(
    $('call-table'),
    el(
      'tr',
      { class: 'flash', dataset: { from: call.from, to: call.to } },
      el('td', {}, time(call.at)),
      el('td', {}, call.from),
      el('td', {}, call.to),
      el('td', {}, call.capability || ''),
      el('td', { class: `status-${status}` }, call.status),
      el('td', {}, call.latency_ms ?? ''),
    ),
    CALLS_MAX,
  );
  $('call-count').textContent = `(${state.calls.length})`;
  $('calls-empty').hidden = true;
  graph.flash(call.from, call.to, 'call');
  if (state.selectedAgent === call.from) refreshCircuitsSoon(call.from);
}

// Sender and receiver each report a message: show it once.
function onAgentMessage(message) {
  if (state.messageIds.has(message.message_id)) return;
  state.messageIds.add(message.message_id);
  state.messages.unshift(message);
  if (state.messages.length > MESSAGES_MAX) state.messageIds.delete(state.messages.pop().message_id);
  prependRow(
    $('message-table'),
    el(
      'tr',
      { class: 'flash' },
      el('td', {}, time(message.at)),
      el('td', {}, message.from_agent_id),
      el('td', {}, message.to_agent_id),
      el('td', {}, message.link_id),
      el('td', {}, message.context_id),
    ),
    MESSAGES_MAX,
  );
  $('message-count').textContent = `(${state.messages.length})`;
  graph.flash(message.from_agent_id, message.to_agent_id, 'message');
  if (state.openMessagesLink === message.link_id) showLinkMessages(message.link_id);
}

function onHealthChanged(change) {
  const history = state.health.get(change.agent_id) || [];
  history.push({ at: change.at, from: change.from, to: change.to });
  if (history.length > HEALTH_HISTORY_MAX) history.shift();
  state.health.set(change.agent_id, history);
  const agent = agentById(change.agent_id);
  if (agent) {
    agent.health_status = change.to;
    render();
  } else {
    scheduleRefresh();
  }
}

function onEvent(kind, event) {
  let data;
  try {
    data = JSON.parse(event.data);
  } catch {
    return;
  }
  state.eventsSeen += 1;
  switch (kind) {
    case 'call':
      onCall(data);
      break;
    case 'agent_message_sent':
    case 'agent_message_received':
      onAgentMessage(data);
      break;
    case 'health_changed':
      onHealthChanged(data);
      break;
    default:
      // Registrations, link changes, and a gap in the stream: read the topology again.
      scheduleRefresh();
  }
}

function setStream(word, text) {
  const badge = $('stream');
  badge.textContent = text;
  badge.classList.toggle('live', word === 'live');
  badge.classList.toggle('down', word === 'down');
  document.body.dataset.stream = word;
}

let streaming = false;

// Follows the event stream, connecting again after it drops; a refused stream waits for sign-in.
async function connectEvents() {
  if (streaming) return;
  streaming = true;
  setStream('connecting', 'events: connecting…');
  try {
    await streamEvents({
      onOpen: () => setStream('live', 'events: live'),
      onEvent: (kind, data) => {
        if (EVENT_KINDS.includes(kind)) onEvent(kind, { data });
      },
    });
  } catch (error) {
    if (error.status === HTTP_UNAUTHORIZED) {
      streaming = false;
      setStream('down', 'events: sign in to follow');
      askToSignIn(error.message);
      return;
    }
  }
  streaming = false;
  setStream('down', 'events: disconnected, retrying');
  setTimeout(() => {
    connectEvents();
    // A new stream starts at the newest event: whatever happened in between is read afresh.
    scheduleRefresh();
  }, EVENTS_RETRY_MS);
}

// ---------------------------------------------------------------- sign-in

function askToSignIn(reason) {
  const form = $('signin');
  if (!form.hidden) return;
  $('signin-reason').textContent = reason;
  form.hidden = false;
  $('signin-token').focus();
}

function signIn(event) {
  event.preventDefault();
  const token = $('signin-token').value.trim();
  if (!token) return;
  session.set(token);
  $('signin-token').value = '';
  $('signin').hidden = true;
  refresh();
  connectEvents();
}

// ---------------------------------------------------------------- views and keys

function showView(name) {
  const topology = name === 'topology';
  for (const [tab, view, selected] of [
    ['tab-topology', 'view-topology', topology],
    ['tab-org', 'view-org', !topology],
  ]) {
    $(tab).setAttribute('aria-selected', String(selected));
    $(tab).tabIndex = selected ? 0 : -1;
    $(view).hidden = !selected;
  }
  if (topology) {
    graph.cy.resize();
  } else {
    if (org.stale) {
      org.stale = false;
      org.sync(state.topology);
    }
    org.shown();
    org.select(state.selectedAgent);
  }
}

function wire() {
  $('signin').addEventListener('submit', signIn);
  $('refresh').addEventListener('click', refresh);
  $('agent-close').addEventListener('click', closeAgentPanel);
  $('link-messages-close').addEventListener('click', () => {
    state.openMessagesLink = null;
    $('link-messages').hidden = true;
  });
  $('link-form').addEventListener('submit', submitLink);
  $('link-cancel').addEventListener('click', () => {
    resetForm();
    $('link-from').focus();
  });
  $('link-delete').addEventListener('click', deleteLink);
  $('tab-topology').addEventListener('click', () => showView('topology'));
  $('tab-org').addEventListener('click', () => showView('org'));
  // Arrow keys move between the tabs, as in any tab list.
  for (const tab of ['tab-topology', 'tab-org']) {
    $(tab).addEventListener('keydown', (event) => {
      if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
      const next = tab === 'tab-topology' ? 'tab-org' : 'tab-topology';
      showView(next === 'tab-org' ? 'org' : 'topology');
      $(next).focus();
      event.preventDefault();
    });
  }
  document.addEventListener('keydown', (event) => {
    if (event.key !== 'Escape') return;
    if (state.editing) resetForm();
    else if (!$('agent-panel').hidden) closeAgentPanel();
  });
  window.addEventListener('resize', () => graph.cy.resize());
}

// For the browser test and anyone scripting the page: what it shows, read-only.
window.meshDashboard = {
  graph: () => graph.snapshot(),
  calls: () => state.calls.map((call) => ({ ...call })),
  eventsSeen: () => state.eventsSeen,
};

session.adoptFromLocation();
wire();
connectEvents();
refresh();
