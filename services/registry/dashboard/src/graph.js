// The two graph views, drawn by Cytoscape.js (pinned in ../package-lock.json, embedded by
// build.rs): the topology (agents coloured by health, links as directed edges) and the org chart
// (superiors above subordinates). Layouts are Cytoscape's own.

import cytoscape from './vendor/cytoscape.esm.min.mjs';

const COLOURS = {
  healthy: '#2e9d57',
  unhealthy: '#e0a100',
  unreachable: '#d0342c',
  unknown: '#9aa0a6',
  unregistered: '#ffffff',
  superior: '#1a5fb4',
  subordinate: '#8f5bd6',
  peer: '#6b7280',
  active: '#f59f00',
  message: '#c2255c',
  selected: '#1a5fb4',
};

// How long an edge stays lit after a call or message crosses it.
const FLASH_MS = 1600;

const HEALTH_WORDS = ['healthy', 'unhealthy', 'unreachable', 'unknown'];
export const healthWord = (value) => (HEALTH_WORDS.includes(value) ? value : 'unknown');

// A link may name an agent that has not registered (yet): links come from configuration, and
// `up` configures links to the LLM agents it runs only when an LLM endpoint is set. Both views
// draw such an end as an `unregistered` node, so every link shows and no edge lacks an end.
export const UNREGISTERED = 'unregistered';
export function graphNodes(topology) {
  const nodes = topology.agents.map((agent) => ({ id: agent.id, label: agent.name || agent.id, health: healthWord(agent.health_status) }));
  const known = new Set(nodes.map((node) => node.id));
  for (const link of topology.links) {
    for (const end of [link.from, link.to]) {
      if (known.has(end)) continue;
      known.add(end);
      nodes.push({ id: end, label: `${end} (not registered)`, health: UNREGISTERED });
    }
  }
  return nodes;
}

function lineColour(relationship) {
  return COLOURS[relationship] || COLOURS.peer;
}

const baseStyle = [
  {
    selector: 'node',
    style: {
      label: 'data(label)',
      'background-color': COLOURS.unknown,
      'border-width': 3,
      'border-color': '#ffffff',
      width: 42,
      height: 42,
      color: '#1b1f24',
      'font-size': 13,
      'text-valign': 'bottom',
      'text-margin-y': 6,
      'text-background-color': '#fbfcfd',
      'text-background-opacity': 0.9,
      'text-background-padding': 2,
      'transition-property': 'underlay-opacity',
      'transition-duration': 250,
    },
  },
  ...HEALTH_WORDS.map((word) => ({
    selector: `node[health = "${word}"]`,
    style: { 'background-color': COLOURS[word] },
  })),
  {
    selector: `node[health = "${UNREGISTERED}"]`,
    style: { 'background-color': COLOURS.unregistered, 'border-color': COLOURS.unknown, 'border-style': 'dashed' },
  },
  { selector: 'node:selected', style: { 'border-color': COLOURS.selected, 'border-width': 5 } },
  {
    selector: 'node.active',
    style: { 'underlay-color': COLOURS.active, 'underlay-opacity': 0.45, 'underlay-padding': 10, 'underlay-shape': 'ellipse' },
  },
  {
    selector: 'edge',
    style: {
      'curve-style': 'bezier',
      width: 2.5,
      'line-color': COLOURS.peer,
      'target-arrow-shape': 'triangle',
      'target-arrow-color': COLOURS.peer,
      'source-arrow-color': COLOURS.peer,
      'arrow-scale': 1.3,
      label: 'data(relationship)',
      'font-size': 10,
      color: '#5c6370',
      'text-rotation': 'autorotate',
      'text-background-color': '#fbfcfd',
      'text-background-opacity': 0.9,
      'text-background-padding': 2,
      'transition-property': 'line-color, target-arrow-color, source-arrow-color, width',
      'transition-duration': 250,
    },
  },
  ...['superior', 'subordinate', 'peer'].map((relationship) => ({
    selector: `edge[relationship = "${relationship}"]`,
    style: {
      'line-color': lineColour(relationship),
      'target-arrow-color': lineColour(relationship),
      'source-arrow-color': lineColour(relationship),
      width: relationship === 'peer' ? 2.5 : 3.5,
    },
  })),
  // Both ends may start a conversation over a two-way link.
  { selector: 'edge[direction = "two_way"]', style: { 'source-arrow-shape': 'triangle' } },
  { selector: 'edge[!enabled]', style: { 'line-style': 'dashed', 'line-dash-pattern': [8, 5], opacity: 0.8 } },
  { selector: 'edge:selected', style: { 'overlay-color': COLOURS.selected, 'overlay-opacity': 0.18, 'overlay-padding': 6 } },
  // A call between agents no link joins (the open mode allows it) is drawn for a moment only.
  {
    selector: 'edge.traffic',
    style: { 'line-style': 'dotted', label: '', 'line-color': COLOURS.active, 'target-arrow-color': COLOURS.active, width: 3 },
  },
  {
    selector: 'edge.active',
    style: { 'line-color': COLOURS.active, 'target-arrow-color': COLOURS.active, 'source-arrow-color': COLOURS.active, width: 6 },
  },
  {
    selector: 'edge.message',
    style: { 'line-color': COLOURS.message, 'target-arrow-color': COLOURS.message, 'source-arrow-color': COLOURS.message, width: 6 },
  },
];

const orgStyle = [
  ...baseStyle,
  {
    selector: 'edge.hierarchy',
    style: { label: '', 'target-arrow-shape': 'triangle', 'line-color': COLOURS.superior, 'target-arrow-color': COLOURS.superior, width: 3 },
  },
  { selector: 'edge.peer', style: { label: '', 'line-style': 'dotted', 'target-arrow-shape': 'none', 'source-arrow-shape': 'none' } },
];

// The options both views share. The wheel keeps Cytoscape's default speed: setting another makes
// the library warn on the console.
const common = { minZoom: 0.3, maxZoom: 1.6, boxSelectionEnabled: false };

export class TopologyGraph {
  constructor(container, { onSelectAgent, onSelectLink }) {
    this.cy = cytoscape({ container, style: baseStyle, ...common });
    this.timers = new Map();
    this.cy.on('tap', 'node', (event) => onSelectAgent(event.target.id()));
    this.cy.on('tap', 'edge', (event) => {
      if (!event.target.hasClass('traffic')) onSelectLink(event.target.id());
    });
  }

  // Makes the graph equal to `topology`, keeping positions of agents it already shows; lays out
  // again only when agents or links came or went.
  sync(topology) {
    const cy = this.cy;
    const wanted = new Map();
    for (const node of graphNodes(topology)) wanted.set(node.id, { group: 'nodes', data: node });
    for (const link of topology.links) {
      wanted.set(link.id, {
        group: 'edges',
        data: {
          id: link.id,
          source: link.from,
          target: link.to,
          direction: link.direction,
          relationship: link.relationship,
          enabled: Boolean(link.enabled),
        },
      });
    }
    let changed = false;
    cy.batch(() => {
      cy.elements().not('.traffic').forEach((element) => {
        const next = wanted.get(element.id());
        const moved = next && element.isEdge() && (element.data('source') !== next.data.source || element.data('target') !== next.data.target);
        if (!next || moved) {
          element.remove();
          changed = true;
        }
      });
      // Nodes first: an edge needs both its ends.
      const ordered = [...wanted.values()].sort((a, b) => (a.group === b.group ? 0 : a.group === 'nodes' ? -1 : 1));
      for (const element of ordered) {
        const existing = cy.getElementById(element.data.id);
        if (existing.nonempty()) {
          existing.data(element.data);
        } else if (element.group === 'nodes' || (cy.getElementById(element.data.source).nonempty() && cy.getElementById(element.data.target).nonempty())) {
          cy.add(element);
          changed = true;
        }
      }
    });
    if (changed) this.layout();
  }

  layout() {
    const cy = this.cy;
    if (cy.nodes().empty()) return;
    // Breadth-first from the agents nothing points at: a mesh of callers and workers reads top down.
    cy.elements().not('.traffic').layout({ name: 'breadthfirst', directed: true, spacingFactor: 1.75, padding: 30, animate: false }).run();
  }

  select(agentId) {
    this.cy.$(':selected').unselect();
    if (agentId) this.cy.getElementById(agentId).select();
  }

  // Lights the edge(s) a call or message from `from` to `to` crossed, and both agents.
  flash(from, to, kind) {
    const cy = this.cy;
    const source = cy.getElementById(from);
    const target = cy.getElementById(to);
    if (source.empty() || target.empty()) return;
    const className = kind === 'message' ? 'message' : 'active';
    let edges = cy.edges().not('.traffic').filter((edge) => {
      const s = edge.data('source');
      const t = edge.data('target');
      return (s === from && t === to) || (s === to && t === from);
    });
    if (edges.empty()) {
      const id = `traffic:${from}->${to}`;
      edges = cy.getElementById(id);
      if (edges.empty()) edges = cy.add({ group: 'edges', classes: 'traffic', data: { id, source: from, target: to } });
    }
    for (const element of [...edges, source, target]) this.light(element, element.isNode() ? 'active' : className);
  }

  light(element, className) {
    const key = `${element.id()}|${className}`;
    clearTimeout(this.timers.get(key));
    element.addClass(className);
    this.timers.set(
      key,
      setTimeout(() => {
        this.timers.delete(key);
        if (element.removed()) return;
        element.removeClass(className);
        if (element.hasClass('traffic') && !element.hasClass('active') && !element.hasClass('message')) element.remove();
      }, FLASH_MS),
    );
  }

  // What the graph shows, for the browser test and for anyone scripting the page.
  snapshot() {
    return {
      nodes: this.cy.nodes().map((node) => ({ id: node.id(), health: node.data('health') })),
      edges: this.cy
        .edges()
        .not('.traffic')
        .map((edge) => ({
          id: edge.id(),
          from: edge.data('source'),
          to: edge.data('target'),
          direction: edge.data('direction'),
          relationship: edge.data('relationship'),
          enabled: edge.data('enabled'),
        })),
      lit: this.cy.edges('.active, .message').map((edge) => ({ from: edge.data('source'), to: edge.data('target') })),
    };
  }
}

// Who is above whom, from the enabled links as `/api/agents/{id}/org` reads them: a `superior`
// link puts `from` above `to`; a `subordinate` link reads the other way round; peers share a level
// where the layout allows.
export function orgEdges(links) {
  return links.filter((link) => link.enabled).map((link) => {
    if (link.relationship === 'superior') return { id: link.id, source: link.from, target: link.to, kind: 'hierarchy' };
    if (link.relationship === 'subordinate') return { id: link.id, source: link.to, target: link.from, kind: 'hierarchy' };
    return { id: link.id, source: link.from, target: link.to, kind: 'peer' };
  });
}

export class OrgChart {
  constructor(container, { onSelectAgent }) {
    this.cy = cytoscape({ container, style: orgStyle, ...common });
    this.cy.on('tap', 'node', (event) => onSelectAgent(event.target.id()));
  }

  sync(topology) {
    const cy = this.cy;
    cy.batch(() => {
      cy.elements().remove();
      cy.add(graphNodes(topology).map((node) => ({ group: 'nodes', data: node })));
      cy.add(
        orgEdges(topology.links).map((edge) => ({
          group: 'edges',
          classes: edge.kind === 'peer' ? 'peer' : 'hierarchy',
          data: { id: `org:${edge.id}`, source: edge.source, target: edge.target, enabled: true },
        })),
      );
    });
    this.layout();
  }

  layout() {
    const cy = this.cy;
    if (cy.nodes().empty()) return;
    // Roots: agents nobody is superior to. Peer edges do not shape the hierarchy.
    const hierarchy = cy.elements().not('edge.peer');
    const roots = cy.nodes().filter((node) => node.incomers('edge.hierarchy').empty());
    hierarchy.layout({ name: 'breadthfirst', directed: true, roots, spacingFactor: 1.3, padding: 40, animate: false }).run();
  }

  // A container that was hidden has no size: measure it again when it is shown.
  shown() {
    this.cy.resize();
    this.layout();
  }

  select(agentId) {
    this.cy.$(':selected').unselect();
    if (agentId) this.cy.getElementById(agentId).select();
  }
}
