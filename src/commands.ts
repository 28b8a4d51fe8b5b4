/** Command ids (all in the palette under "Torch Debugger"). */
export namespace CommandIDs {
  export const open = 'torchdbg:open-panel';
  export const load = 'torchdbg:load';
  export const resync = 'torchdbg:resync';
  export const clearSeries = 'torchdbg:clear-series';
}

export const PALETTE_CATEGORY = 'Torch Debugger';
