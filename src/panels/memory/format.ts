import { Bytes } from '../../protocol/messages';

/** 1536 -> "1.5 KiB"; null -> "n/a". */
export function formatBytes(v: Bytes | undefined): string {
  if (v === null || v === undefined || !Number.isFinite(v)) {
    return 'n/a';
  }
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let x = v;
  let i = 0;
  while (Math.abs(x) >= 1024 && i < units.length - 1) {
    x /= 1024;
    i++;
  }
  return `${i === 0 ? x : x.toFixed(x >= 100 ? 0 : 1)} ${units[i]}`;
}
