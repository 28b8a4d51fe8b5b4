/**
 * The TypeScript side's messages and fixtures validated against the one JSON
 * Schema (the Python tests validate real kernel messages against the same file).
 */
import { IAction, IOpen } from '../protocol/messages';
import { PROTOCOL_VERSION, COMM_TARGET } from '../protocol/version';
import { hello } from './fakeKernel';
import { schema, schemaDef } from './schema';

const validate = (def: string, data: unknown) => {
  const v = schemaDef(def);
  const ok = v(data);
  return ok ? null : v.errors;
};

describe('protocol schema', () => {
  it('has the same version and comm target as the TypeScript constants', () => {
    expect(schema['x-protocol-version']).toBe(PROTOCOL_VERSION);
    expect(schema['x-comm-target']).toBe(COMM_TARGET);
  });

  it('accepts the open message the panel sends', () => {
    const open: IOpen = {
      method: 'open',
      protocol_version: PROTOCOL_VERSION,
      client: 'jupyterlab'
    };
    expect(validate('PanelMessage', open)).toBeNull();
  });

  it('accepts every action the panel can build and rejects bad ones', () => {
    const good: IAction[] = [
      { method: 'action', request_id: 'r1', action: 'snapshot', args: {} },
      {
        method: 'action',
        request_id: 'r2',
        action: 'clear_history',
        args: { names: ['loss'] }
      },
      { method: 'action', request_id: 'r3', action: 'clear_history', args: {} }
    ];
    for (const a of good) {
      expect(validate('PanelMessage', a)).toBeNull();
    }
    const bad = [
      { method: 'action', request_id: 'r', action: 'exec', args: {} },
      { method: 'action', request_id: 'r', action: 'snapshot', args: { x: 1 } },
      { method: 'action', request_id: '', action: 'snapshot', args: {} },
      { method: 'action', action: 'snapshot', args: {} }
    ];
    for (const b of bad) {
      expect(validate('PanelMessage', b)).not.toBeNull();
    }
  });

  it('accepts the jest fixtures of kernel messages', () => {
    expect(validate('KernelMessage', hello())).toBeNull();
    expect(
      validate('KernelMessage', {
        method: 'series',
        seq: 3,
        blocks: [
          { id: 1, names: ['loss', 'acc'], count: 10, dropped: 1 },
          { id: 2, count: 3 }
        ]
      })
    ).toBeNull();
    // a snapshot carries the whole name table: every block has its names
    expect(
      validate('KernelMessage', {
        method: 'snapshot',
        seq: 2,
        blocks: [{ id: 1, names: ['loss'], count: 0 }],
        stats: { messages: 2, points: 0, errors: {} }
      })
    ).toBeNull();
    expect(
      validate('KernelMessage', {
        method: 'snapshot',
        seq: 2,
        blocks: [{ id: 1, count: 0 }],
        stats: { messages: 2, points: 0, errors: {} }
      })
    ).not.toBeNull();
    // a block without an id cannot be looked up
    expect(
      validate('KernelMessage', {
        method: 'series',
        seq: 3,
        blocks: [{ names: ['loss'], count: 1 }]
      })
    ).not.toBeNull();
    expect(
      validate('KernelMessage', {
        method: 'error',
        request_id: null,
        code: 'protocol_mismatch',
        message: 'x'
      })
    ).toBeNull();
    expect(
      validate('KernelMessage', { method: 'series', seq: 0, blocks: [] })
    ).not.toBeNull();
  });
});
