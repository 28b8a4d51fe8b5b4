import { LabIcon } from '@jupyterlab/ui-components';

/** The sidebar icon: a flame-like gradient over a pulse line (theme-coloured). */
const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="16" height="16" viewBox="0 0 24 24">
  <g class="jp-icon3" fill="#616161">
    <path d="M12 2c.6 2.4-.4 4-1.7 5.6C9 9.2 8 10.6 8 12.6a4 4 0 0 0 8 0c0-1.2-.4-2.3-1.1-3.2.9 2-.6 3.6-1.6 3.1-1-.5.6-2.4.2-4.9C13.2 5.6 12.8 3.6 12 2z"/>
    <path d="M2 19h4.2l1.6-3 2.4 6 2.6-8 2 5h7.2v-1.8h-6l-3.2-7.9-2.7 8.2-2.3-5.6-2.8 5.3H2z"/>
  </g>
</svg>`;

export const torchDbgIcon = new LabIcon({
  name: 'jupyterlab_torchdbg:icon',
  svgstr: svg
});
