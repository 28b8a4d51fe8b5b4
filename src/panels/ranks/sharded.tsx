import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import type { IRankJob } from '../../protocol/generated';
import { wireNumber } from '../../protocol/messages';

/** A norm for a sentence: 4 significant digits; NaN and infinities by name. */
export function formatGlobalNorm(v: number): string {
  if (Number.isNaN(v)) {
    return 'NaN';
  }
  if (!Number.isFinite(v)) {
    return v > 0 ? '∞' : '-∞';
  }
  return String(Number(v.toPrecision(4)));
}

/**
 * The global gradient norm of a sharded (FSDP) job, in one line: each rank
 * reads only its own shards, so the grid shows shard norms and this line the
 * norm of the whole gradients at the latest step every rank has read,
 * combined in the kernel from the ranks' shard norms (no collective). Nothing
 * for a job whose gradients are whole.
 */
export function ShardedNorm(props: {
  job: IRankJob | null;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { job, trans } = props;
  const sharded = job?.sharded;
  if (!job || !sharded) {
    return null;
  }
  const shards = trans._n(
    'from %1 rank’s shards',
    'from %1 ranks’ shards',
    job.world_size
  );
  const replicas =
    sharded.replicas > 1
      ? ' ' + trans.__('(each shard on %1 ranks)', String(sharded.replicas))
      : '';
  return (
    <div
      className="jp-TorchDbg-note jp-TorchDbg-ranksGlobalNorm"
      title={trans.__(
        'FSDP: every rank holds a shard of each gradient. The global norm is sqrt(sum of the shard norms² ÷ replicas), combined in this kernel from the norms the ranks sent: nothing is added to their step.'
      )}
    >
      {sharded.global_norm === null || sharded.global_step === null
        ? trans.__(
            'Global gradient norm (FSDP): waiting for every rank to read one same step.'
          )
        : trans.__(
            'Global gradient norm (FSDP, %1%2): %3 at step %4',
            shards,
            replicas,
            formatGlobalNorm(wireNumber(sharded.global_norm)),
            String(sharded.global_step)
          )}
    </div>
  );
}
