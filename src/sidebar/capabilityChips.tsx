import type { TranslationBundle } from '@jupyterlab/translation';
import React from 'react';

import { IHello } from '../protocol/messages';

/** What the kernel side can do: torch, CUDA, NVML, subshells (live actions). */
export function CapabilityChips(props: {
  hello: IHello;
  trans: TranslationBundle;
}): JSX.Element {
  const { capabilities: c, package_version } = props.hello;
  const { trans } = props;
  const chips: { label: string; ok: boolean; title: string }[] = [
    {
      label: c.torch.available
        ? trans.__('torch %1', c.torch.version ?? '?')
        : trans.__('no torch'),
      ok: c.torch.available,
      title: c.torch.reason ?? trans.__('torch is available')
    },
    {
      label:
        c.cuda.available === true
          ? trans.__('CUDA ×%1', String(c.cuda.device_count ?? '?'))
          : c.cuda.available === false
            ? trans.__('no CUDA')
            : trans.__('CUDA: not checked'),
      ok: c.cuda.available === true,
      title: c.cuda.reason ?? trans.__('CUDA devices visible')
    },
    {
      label: c.nvml.available ? trans.__('NVML') : trans.__('no NVML'),
      ok: c.nvml.available,
      title: c.nvml.reason ?? trans.__('NVML driver %1', c.nvml.version ?? '')
    },
    {
      label: c.subshells
        ? trans.__('live actions')
        : trans.__('actions wait for cell'),
      ok: c.subshells,
      title: c.subshells
        ? trans.__('The kernel has subshells: actions apply while a cell runs.')
        : trans.__(
            'No kernel subshells (ipykernel < 7): actions wait until the running cell ends.'
          )
    }
  ];
  return (
    <div
      className="jp-TorchDbg-chips"
      title={`jupyterlab_torchdbg ${package_version}`}
    >
      {chips.map(chip => (
        <span
          key={chip.label}
          className={`jp-TorchDbg-chip ${chip.ok ? 'jp-mod-ok' : 'jp-mod-off'}`}
          title={chip.title}
        >
          {chip.label}
        </span>
      ))}
    </div>
  );
}
