import { ExceptionModel } from '../panels/exception/model';
import { exceptionReport } from '../panels/exception/report';
import { GradsModel } from '../panels/grads/model';
import { IAlert, IException, IGrads } from '../protocol/messages';
import { schemaDef } from './schema';
import { gradTrack } from './fixtures';

const kernelMessage = schemaDef('KernelMessage');

const thresholds = {
  explode_abs: null,
  explode_factor: 50,
  explode_warmup: 20,
  vanish_floor: 1e-7,
  vanish_ratio: 1e-6,
  vanish_steps: 50,
  amp_skips: 5,
  amp_min_scale: 1
};

function grads(layers = true): IGrads {
  return {
    method: 'grads',
    state: 'active',
    reason: null,
    mode: 'auto',
    stride: 4,
    budget: 0.01,
    thresholds,
    alerts: 0,
    tracks: [
      gradTrack('opt', {
        step: 10,
        sampled: 3,
        stride: 4,
        ...(layers
          ? {
              layers: [
                {
                  name: 'model.fc',
                  series: 'grad/opt/model.fc',
                  param_series: 'param/opt/model.fc',
                  numel: 10,
                  params: [{ name: 'weight', shape: [2, 5], dtype: 'float32' }]
                }
              ]
            }
          : {})
      })
    ]
  };
}

const alert = (id: string): IAlert => ({
  method: 'alert',
  alerts: [
    {
      id,
      source: 'grads',
      kind: 'non_finite',
      severity: 'error',
      step: 7,
      layer: 'model.fc',
      message: 'non-finite gradient in `model.fc`',
      remedy: 'lower the learning rate',
      track: 'opt',
      value: 'NaN',
      time: 1
    }
  ]
});

describe('GradsModel', () => {
  it('keeps the layer list across status messages that omit it', () => {
    expect(kernelMessage(grads())).toBe(true);
    expect(kernelMessage(grads(false))).toBe(true);
    const m = new GradsModel();
    m.apply(grads());
    m.apply(grads(false));
    expect(m.layers(m.status!.tracks[0]).map(l => l.name)).toEqual([
      'model.fc'
    ]);
  });

  it('dedupes alarms by id and marks replays', () => {
    expect(kernelMessage(alert('a1'))).toBe(true);
    const m = new GradsModel();
    const seen: boolean[] = [];
    m.alerted.connect((_, e) => seen.push(e.replay));
    m.applyAlert(alert('a1'));
    m.applyAlert({ ...alert('a1'), replay: true });
    m.applyAlert({ ...alert('a2'), replay: true });
    expect(m.alerts.map(a => a.id)).toEqual(['a1', 'a2']);
    expect(seen).toEqual([false, true]);
  });
});

const exception: IException = {
  method: 'exception',
  id: 's-1',
  time: 1,
  replay: false,
  execution_count: 2,
  cell_id: 'c1',
  debuggable: true,
  exception: {
    type: 'RuntimeError',
    module: 'builtins',
    message: 'boom',
    message_truncated: false
  },
  diagnosis: {
    category: 'device_mismatch',
    title: 'Device mismatch',
    headline: '`x` is on cpu',
    culprits: [
      { name: 'x', kind: 'tensor', type: 'Tensor', text: 'float32[3] cpu' }
    ],
    remedy: 'move it',
    hints: [],
    facts: {},
    confidence: 'certain',
    links: [],
    where: 0
  },
  frames: [
    {
      position: 0,
      origin: 'cell',
      user: true,
      function: '<module>',
      file: 'Cell In[2]',
      lineno: 2,
      cell_id: 'c1',
      line: 'y = model(x)',
      locals: [],
      locals_total: 0,
      locals_truncated: false
    },
    {
      position: 1,
      origin: 'library',
      user: false,
      function: 'forward',
      file: 'torch/nn/modules/linear.py',
      lineno: 125,
      line: 'return F.linear(input, self.weight, self.bias)',
      locals: [],
      locals_total: 0,
      locals_truncated: false
    }
  ],
  focus: 0,
  frames_total: 2,
  elided: [],
  chain: [],
  truncated: false
};

describe('ExceptionModel', () => {
  it('validates, selects the diagnosis frame and clamps navigation', () => {
    expect(kernelMessage(exception)).toBe(true);
    const m = new ExceptionModel();
    const raised: boolean[] = [];
    m.raised.connect((_, e) => raised.push(e.replay));
    m.apply(exception);
    m.apply(exception); // the same id again (a snapshot replay) is ignored
    expect(raised).toEqual([false]);
    expect(m.frame).toBe(0);
    m.frame = -3;
    expect(m.frame).toBe(0);
    m.frame = 10;
    expect(m.frame).toBe(1);
  });

  it('writes a Markdown report with the stack and the culprit', () => {
    const md = exceptionReport(exception);
    expect(md).toContain('### Device mismatch');
    expect(md).toContain('RuntimeError: boom');
    expect(md).toContain('Cell In[2]:2 in <module>');
    expect(md).toContain('`x`: float32[3] cpu');
  });
});

describe('memory panel helpers', () => {
  it('formats bytes and says n/a for unknown', () => {
    // imported lazily: the body pulls in React only
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const { formatBytes } = require('../panels/memory/body');
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(2 * 1024 ** 3)).toBe('2.0 GiB');
    expect(formatBytes(null)).toBe('n/a');
  });
});
