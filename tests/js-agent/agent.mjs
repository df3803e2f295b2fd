// An official JS SDK agent (@a2a-js/sdk 1.3.0, Express) for the gateway's tests: it echoes each
// message as a task, "echo: TEXT" in one artifact, over JSON-RPC (at /) and HTTP+JSON (under
// /rest), in A2A 1.0 and, through the SDK's compatibility layer, 0.3. It binds a free port on
// 127.0.0.1 itself and prints `PORT <n>` once listening.
//
//     node agent.mjs --name js-echo

import { randomUUID } from 'node:crypto';
import { parseArgs } from 'node:util';

import express from 'express';
import { TaskState } from '@a2a-js/sdk';
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from '@a2a-js/sdk/server';
import { UserBuilder, agentCardHandler, jsonRpcHandler, restHandler } from '@a2a-js/sdk/server/express';

const { values: args } = parseArgs({ options: { name: { type: 'string', default: 'js-echo' } } });

const status = (state) => ({ state, message: undefined, timestamp: new Date().toISOString() });

const executor = {
  async execute(context, bus) {
    const { taskId, contextId } = context;
    const text = context.userMessage.parts
      .map((part) => (part.content?.$case === 'text' ? part.content.value : ''))
      .join('');
    if (!context.task) {
      bus.publish(AgentEvent.task({
        id: taskId,
        contextId,
        status: status(TaskState.TASK_STATE_SUBMITTED),
        artifacts: [],
        history: [context.userMessage],
        metadata: undefined,
      }));
    }
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: status(TaskState.TASK_STATE_WORKING), metadata: undefined }));
    bus.publish(AgentEvent.artifactUpdate({
      taskId,
      contextId,
      artifact: {
        artifactId: randomUUID(),
        name: 'echo',
        description: '',
        parts: [{ content: { $case: 'text', value: `echo: ${text}` }, metadata: undefined, filename: '', mediaType: 'text/plain' }],
        metadata: undefined,
        extensions: [],
      },
      append: false,
      lastChunk: true,
      metadata: undefined,
    }));
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId, status: status(TaskState.TASK_STATE_COMPLETED), metadata: undefined }));
    bus.finished();
  },
  async cancelTask(taskId, bus) {
    bus.publish(AgentEvent.statusUpdate({ taskId, contextId: '', status: status(TaskState.TASK_STATE_CANCELED), metadata: undefined }));
    bus.finished();
  },
};

const app = express();
const server = app.listen(0, '127.0.0.1', () => {
  const { port } = server.address();
  const base = `http://127.0.0.1:${port}`;
  const interfaces = ['1.0', '0.3'].flatMap((protocolVersion) => [
    { url: `${base}/`, protocolBinding: 'JSONRPC', protocolVersion, tenant: '' },
    { url: `${base}/rest`, protocolBinding: 'HTTP+JSON', protocolVersion, tenant: '' },
  ]);
  const card = {
    name: args.name,
    description: 'Echoes text back (the official JS SDK)',
    supportedInterfaces: interfaces,
    provider: undefined,
    version: '0.0.1',
    capabilities: { streaming: true, pushNotifications: false, extensions: [] },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ['text/plain'],
    defaultOutputModes: ['text/plain'],
    skills: [{ id: 'echo', name: 'Echo', description: 'Echo input', tags: ['echo'], examples: [], inputModes: [], outputModes: [], securityRequirements: [] }],
    signatures: [],
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), executor);
  const compat = { enabled: true };
  // The card is always the 1.0 one (it lists the 0.3 interfaces too): the SDK's compatibility
  // card would answer a reader sending no A2A-Version, as the gateway is, in the 0.3 shape.
  app.use('/.well-known/agent-card.json', agentCardHandler({ agentCardProvider: async () => card }));
  app.use('/rest', restHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: compat }));
  app.use('/', jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: compat }));
  console.log(`PORT ${port}`);
});
