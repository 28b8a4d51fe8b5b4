import { formatBytes } from './format';

/** Memory timelines: x is Unix time in seconds, y bytes. */
export const TIMELINE = {
  time: true,
  yFormat: (v: number) => formatBytes(v),
  ySize: 64 // "1023 MiB"
};
