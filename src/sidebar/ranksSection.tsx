import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import type { TorchDbgConnection } from '../connection/connection';
import { RanksPanel } from '../panels/ranks';
import { useSignalRender } from '../ui/useSignalRender';
import { Section } from './section';

/**
 * The Ranks section, once a torch.distributed job has attached to the kernel
 * (nothing before: most notebooks never start one). Re-rendered by the ranks
 * model alone, so its 10 messages a second do not re-render the other sections.
 */
export function RanksSection(props: {
  conn: TorchDbgConnection;
  trans: TranslationBundle;
}): JSX.Element | null {
  const { conn, trans } = props;
  const ranks = conn.model.ranks;
  useSignalRender(ranks.changed);
  if (!ranks.job) {
    return null;
  }
  const alarms = ranks.alarms.length;
  return (
    <Section
      id="ranks"
      title={trans.__('Ranks')}
      badge={alarms ? String(alarms) : undefined}
      badgeTitle={trans._n(
        '%1 rank alarm in this job',
        '%1 rank alarms in this job',
        alarms
      )}
    >
      <RanksPanel conn={conn} trans={trans} />
    </Section>
  );
}
