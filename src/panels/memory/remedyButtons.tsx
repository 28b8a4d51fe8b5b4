import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { IActionAvailability } from '../../model/availability';
import { ActionName, ActionResult, IActionArgs } from '../../protocol/messages';
import { formatBytes } from './format';

/** Send an action; the ack's result, as `describe` words it, becomes the panel's note. */
export type Act = <K extends ActionName>(
  action: K,
  args: IActionArgs[K],
  describe: (r: ActionResult<K>) => string
) => void;

/**
 * The memory panel's one-click remedies: empty the CUDA cache, release what
 * the last error holds, record the allocator's history, save a checkpoint,
 * measure where activation memory goes. Each is enabled (and its tooltip says
 * why not) as the palette's command is (`model/availability.ts`).
 */
export function RemedyButtons(props: {
  can: IActionAvailability;
  recording: boolean;
  act: Act;
  trans: TranslationBundle;
}): JSX.Element {
  const { can, recording, act, trans } = props;
  return (
    <div className="jp-TorchDbg-controls">
      <button
        className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
        disabled={!can.emptyCache.enabled}
        title={can.emptyCache.why}
        onClick={() =>
          act('empty_cache', {}, r =>
            trans.__('Cache emptied: %1 freed.', formatBytes(r.freed_bytes))
          )
        }
      >
        {trans.__('Empty cache')}
      </button>
      <button
        className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
        disabled={!can.releaseRefs.enabled}
        title={
          can.releaseRefs.why ||
          trans.__(
            'Drop what keeps the last error alive, gc, empty the cache (ends %debug)'
          )
        }
        onClick={() => act('release_refs', {}, r => r.note)}
      >
        {trans.__('Release references')}
      </button>
      <button
        className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
        disabled={!can.recordMemory.enabled}
        title={can.recordMemory.why || undefined}
        onClick={() =>
          act(
            'record_memory',
            recording ? { op: 'stop' } : { op: 'start' },
            r =>
              'file' in r
                ? trans.__(
                    'Memory snapshot saved: its top allocation sites are below.'
                  )
                : (r.note ?? trans.__('Recording memory history.'))
          )
        }
      >
        {recording ? trans.__('Stop recording') : trans.__('Record history')}
      </button>
      <button
        className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small"
        disabled={!can.saveCheckpoint.enabled}
        title={can.saveCheckpoint.why || undefined}
        onClick={() =>
          act('save_checkpoint', {}, r =>
            trans.__('Checkpoint saved: %1', r.file)
          )
        }
      >
        {trans.__('Save checkpoint')}
      </button>
      <button
        className="jp-Button jp-mod-styled jp-mod-reject jp-TorchDbg-small jp-TorchDbg-measureAct"
        disabled={!can.measureActivations.enabled}
        title={
          can.measureActivations.why ||
          trans.__(
            'Bytes each module saves for backward in one forward/backward, and the largest batch that fits'
          )
        }
        onClick={() =>
          act('measure_activations', {}, r =>
            // done or failed: the report below says what was found (or why not)
            r.state === 'armed'
              ? trans.__('Armed: the next forward/backward is measured.')
              : ''
          )
        }
      >
        {trans.__('Where activations go')}
      </button>
    </div>
  );
}
