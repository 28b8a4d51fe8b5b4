import { ISignal } from '@lumino/signaling';
import { useEffect, useState } from 'react';

/**
 * Re-render when `signal` fires (at most once per animation frame, so a burst of
 * kernel messages costs one render).
 */
export function useSignalRender<T>(signal: ISignal<T, unknown> | null): number {
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (!signal) {
      return;
    }
    let frame: number | null = null;
    const onSignal = () => {
      if (frame === null) {
        frame = requestAnimationFrame(() => {
          frame = null;
          setTick(t => t + 1);
        });
      }
    };
    signal.connect(onSignal);
    return () => {
      signal.disconnect(onSignal);
      if (frame !== null) {
        cancelAnimationFrame(frame);
      }
    };
  }, [signal]);
  return tick;
}
