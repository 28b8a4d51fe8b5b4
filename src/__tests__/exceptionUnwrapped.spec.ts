/**
 * @jest-environment jsdom
 *
 * A DataLoader worker's error (issue #22 item 6) in the exception view: the
 * original error first ("ValueError: sample 7 is corrupt", not torch's "Caught
 * ValueError in DataLoader worker process 1"), where it ran and which sample;
 * torch's own message on demand; the worker's frames under a line naming the
 * process, and no locals table for them (the process is another). The report
 * says the same. Kernel strings are rendered as text (S1).
 */
import { mountEach, React } from './dom';
import { TorchDbgModel } from '../model/model';
import type { ExceptionPanel as ExceptionPanelT } from '../panels/exception/body';
import { debugNote } from '../panels/exception/debugNote';
import { exceptionReport } from '../panels/exception/report';
import type { IException } from '../protocol/messages';
import { schemaDef } from './schema';
import { trans } from './translate';

/* eslint-disable @typescript-eslint/no-require-imports */
const {
  ExceptionPanel,
  formatIndex
}: {
  ExceptionPanel: typeof ExceptionPanelT;
  formatIndex: (v: unknown) => string;
} = require('../panels/exception/body');
/* eslint-enable @typescript-eslint/no-require-imports */

const exceptionMessage = schemaDef('Exception');

const raw =
  'Caught ValueError in DataLoader worker process 1.\nOriginal Traceback (most recent call last):\n  File "x.py", line 10, in __getitem__\nValueError: sample 7 is corrupt';

function workerError(over: Partial<IException> = {}): IException {
  const msg = {
    method: 'exception',
    id: 'k-3',
    time: 1,
    replay: false,
    execution_count: 4,
    cell_id: 'c-loop',
    debuggable: true,
    exception: {
      type: 'ValueError',
      module: 'builtins',
      message: raw,
      message_truncated: false
    },
    diagnosis: {
      category: 'data_loader',
      title: 'ValueError in the dataset',
      headline:
        '`ValueError: sample 7 is corrupt` in `Samples.__getitem__` (Cell In[2]:10) in DataLoader worker process 1, for sample index 7 (batch [4, 5, 6, 7]).',
      culprits: [],
      remedy: 'Reproduce it in the notebook.',
      hints: [],
      facts: {},
      confidence: 'certain',
      links: [],
      where: 2
    },
    frames: [
      {
        position: 0,
        origin: 'cell',
        user: true,
        function: '<module>',
        file: 'Cell In[4]',
        lineno: 1,
        cell_id: 'c-loop',
        line: 'for batch in loader:',
        locals: [
          {
            name: 'loader',
            kind: 'object',
            type: 'DataLoader',
            text: 'DataLoader'
          }
        ],
        locals_total: 1,
        locals_truncated: false
      },
      {
        position: 5,
        origin: 'library',
        user: false,
        function: 'fetch',
        file: 'torch/utils/data/_utils/fetch.py',
        lineno: 54,
        line: 'data = [self.dataset[idx] for idx in possibly_batched_index]',
        locals: [],
        locals_total: 0,
        locals_truncated: false,
        process: 'DataLoader worker process 1'
      },
      {
        position: 6,
        origin: 'cell',
        user: true,
        function: '__getitem__',
        file: 'Cell In[2]',
        lineno: 10,
        cell_id: 'c-ds',
        line: 'raise ValueError(f"sample {i} is corrupt")',
        locals: [],
        locals_total: 0,
        locals_truncated: false,
        process: 'DataLoader worker process 1'
      }
    ],
    focus: 2,
    frames_total: 7,
    elided: [],
    chain: [],
    truncated: false,
    unwrapped: {
      where: 'DataLoader worker process 1',
      worker_id: 1,
      pid: 4242,
      exception: {
        type: 'ValueError',
        module: 'builtins',
        message: 'sample 7 is corrupt',
        message_truncated: false
      },
      index_known: true,
      index: 7,
      batch: [4, 5, 6, 7],
      batch_size: 4,
      dataset: 'Samples',
      frame: 2,
      why_unknown: null
    },
    ...over
  };
  if (!exceptionMessage(msg)) {
    throw new Error(JSON.stringify(exceptionMessage.errors, null, 1));
  }
  return msg as IException;
}

const dom = mountEach();
const actions = {
  goToFrame: () => Promise.resolve(''),
  debug: () => Promise.resolve(''),
  copyReport: () => Promise.resolve()
};

function show(exc: IException): TorchDbgModel {
  const model = new TorchDbgModel();
  model.exception.apply(exc);
  dom.render(
    React.createElement(ExceptionPanel, { model, actions, trans } as never)
  );
  return model;
}

const $ = (sel: string) => dom.host.querySelector<HTMLElement>(sel);

describe('a DataLoader worker’s error in the exception view', () => {
  it('shows the original error, where and which sample, torch’s text on demand', () => {
    show(workerError());
    expect($('.jp-TorchDbg-excOrigin')!.textContent).toBe(
      'in DataLoader worker process 1 · sample index 7 · batch (4, 5, 6, 7)'
    );
    const messages = dom.host.querySelectorAll('.jp-TorchDbg-excMessage');
    expect(messages[0].textContent).toBe('ValueError: sample 7 is corrupt');
    const rawBlock = $('.jp-TorchDbg-excRaw')!;
    expect(rawBlock.tagName).toBe('DETAILS');
    expect(rawBlock.textContent).toContain('Caught ValueError in DataLoader');
  });

  it('marks the worker’s frames and shows no locals table for them', () => {
    const model = show(workerError());
    expect(model.exception.frame).toBe(2); // the dataset's frame is the focus
    const marks = dom.host.querySelectorAll('.jp-TorchDbg-frameProcess');
    expect(marks.length).toBe(1);
    expect(marks[0].textContent).toBe(
      'in DataLoader worker process 1 (from its traceback text):'
    );
    expect($('.jp-TorchDbg-frameProcessNote')!.textContent).toContain(
      'ran in DataLoader worker process 1'
    );
    expect($('.jp-TorchDbg-locals')).toBeNull();
  });

  it('says when the sample is not known, and why', () => {
    const exc = workerError();
    show({
      ...exc,
      unwrapped: {
        ...exc.unwrapped!,
        index_known: false,
        index: null,
        batch: null,
        why_unknown: 'the worker sent only its traceback text'
      }
    });
    expect($('.jp-TorchDbg-excOrigin')!.textContent).toBe(
      'in DataLoader worker process 1 · sample not known'
    );
    expect($('.jp-TorchDbg-unwrapped .jp-TorchDbg-note')!.textContent).toBe(
      'The sample is not known: the worker sent only its traceback text.'
    );
  });

  it('renders kernel strings as text (S1)', () => {
    const exc = workerError();
    const evil = '<img src=x onerror=alert(1)>';
    show({
      ...exc,
      unwrapped: { ...exc.unwrapped!, where: evil, index: evil }
    });
    expect(dom.host.querySelector('img')).toBeNull();
    expect($('.jp-TorchDbg-excOrigin')!.textContent).toContain(evil);
  });

  it('formats indices of every shape, and the report names them', () => {
    expect(formatIndex(7)).toBe('7');
    expect(formatIndex('a/b.png')).toBe('"a/b.png"');
    expect(formatIndex([1, 'x'])).toBe('(1, "x")');
    expect(formatIndex({ type: 'Key' })).toBe('(Key)');
    const md = exceptionReport(workerError());
    expect(md).toContain('In DataLoader worker process 1; sample index: 7');
    expect(md).toContain('ValueError: sample 7 is corrupt');
    expect(md).toContain('-- in DataLoader worker process 1 --');
  });

  it('the %debug note counts only this kernel’s frames and says the worker’s are out of reach', () => {
    // frames 0 (the cell) … 4 (reraise) are this kernel's; the focus is the worker's
    const exc = workerError();
    const kernelFrames = [
      exc.frames[0],
      {
        ...exc.frames[1],
        position: 4,
        function: 'reraise',
        file: 'torch/_utils.py',
        process: undefined
      }
    ];
    const withTail = {
      ...exc,
      frames: [...kernelFrames, ...exc.frames.slice(1)],
      focus: 3
    };
    expect(debugNote(withTail, trans)).toBe(
      'ipdb starts in the innermost frame: type u 4 to reach <module> (Cell In[4], line 1). The failing frame ran in DataLoader worker process 1: %debug cannot reach it.'
    );
    // a plain exception: counted against the whole stack as before
    const plain = {
      ...exc,
      unwrapped: undefined,
      frames: [exc.frames[0], { ...kernelFrames[1] }],
      focus: 0,
      frames_total: 5
    };
    expect(debugNote(plain, trans)).toBe(
      'ipdb starts in the innermost frame: type u 4 to reach <module> (Cell In[4], line 1).'
    );
  });
});
