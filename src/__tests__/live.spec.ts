/**
 * The live clock that paces the panel's re-renders while data streams: at
 * most one tick per interval, the first change after a quiet spell at the next
 * frame, the last change of a burst never lost, nothing while out of sight,
 * and every poked view ticked in the same frame. Driven by a fake clock,
 * timers and frames (no real time passes).
 */
import { LiveClock, LiveTicker } from '../charts/live';

/** Fake time: timers and frames run only when the test says so. */
class FakeTime {
  now = 0;
  timers: { at: number; cb: () => void; id: number }[] = [];
  frames: (() => void)[] = [];
  private _id = 0;

  options() {
    return {
      now: () => this.now,
      setTimer: (cb: () => void, ms: number) => {
        const id = ++this._id;
        this.timers.push({ at: this.now + ms, cb, id });
        return id;
      },
      clearTimer: (id: unknown) => {
        this.timers = this.timers.filter(t => t.id !== id);
      },
      requestFrame: (cb: () => void) => {
        this.frames.push(cb);
        return () => {
          this.frames = this.frames.filter(f => f !== cb);
        };
      }
    };
  }

  /** Let `ms` pass: due timers fire (in order), frames do not run. */
  advance(ms: number): void {
    const end = this.now + ms;
    for (;;) {
      this.timers.sort((a, b) => a.at - b.at);
      const next = this.timers[0];
      if (!next || next.at > end) {
        break;
      }
      this.timers.shift();
      this.now = next.at;
      next.cb();
    }
    this.now = end;
  }

  /** Run the frames requested so far (one animation frame). */
  frame(): void {
    const due = this.frames;
    this.frames = [];
    due.forEach(cb => cb());
  }
}

describe('LiveTicker', () => {
  function make(interval = 200) {
    const time = new FakeTime();
    const ticks: number[] = [];
    const ticker = new LiveTicker({
      interval,
      tick: () => ticks.push(time.now),
      ...time.options()
    });
    return { time, ticks, ticker };
  }

  it('ticks at the next frame after a quiet spell', () => {
    const { time, ticks, ticker } = make();
    ticker.poke();
    expect(ticks).toEqual([]);
    time.frame();
    expect(ticks).toEqual([0]);
    expect(ticker.pending).toBe(false);
  });

  it('ticks once per frame however many pokes came before it', () => {
    const { time, ticks, ticker } = make();
    ticker.poke();
    ticker.poke();
    ticker.poke();
    time.frame();
    expect(ticks.length).toBe(1);
  });

  it('a burst gets at most one tick per interval, and its last change a tick', () => {
    const { time, ticks, ticker } = make(200);
    // 10 messages a second for one second, a frame after each and between
    for (let k = 0; k < 10; k++) {
      ticker.poke();
      time.frame();
      time.advance(50);
      time.frame();
      time.advance(50);
      time.frame();
    }
    // never two ticks within the interval: 5 a second, not 10
    for (let i = 1; i < ticks.length; i++) {
      expect(ticks[i] - ticks[i - 1]).toBeGreaterThanOrEqual(200);
    }
    expect(ticks.length).toBeGreaterThanOrEqual(5);
    expect(ticks.length).toBeLessThanOrEqual(6);
    // a change right after a tick waits for the interval, then is shown
    const before = ticks.length;
    time.advance(1000);
    ticker.poke();
    time.frame();
    expect(ticks.length).toBe(before + 1);
    ticker.poke();
    time.frame();
    time.advance(100);
    time.frame();
    expect(ticks.length).toBe(before + 1);
    expect(ticker.pending).toBe(true);
    time.advance(100);
    time.frame();
    expect(ticks.length).toBe(before + 2);
    expect(ticker.pending).toBe(false);
  });

  it('does not tick while out of sight, and catches up at once when back', () => {
    const { time, ticks, ticker } = make(200);
    ticker.poke();
    time.frame();
    expect(ticks.length).toBe(1);
    ticker.setVisible(false);
    for (let k = 0; k < 20; k++) {
      ticker.poke();
      time.advance(100);
      time.frame();
    }
    expect(ticks.length).toBe(1);
    expect(ticker.pending).toBe(true);
    ticker.setVisible(true);
    time.frame(); // no wait for the interval: what is shown is old
    expect(ticks.length).toBe(2);
    // back in sight with nothing new: no tick
    ticker.setVisible(false);
    ticker.setVisible(true);
    time.advance(1000);
    time.frame();
    expect(ticks.length).toBe(2);
  });

  it('a hidden ticker that was never poked stays quiet when shown', () => {
    const { time, ticks, ticker } = make();
    ticker.setVisible(false);
    ticker.setVisible(true);
    time.advance(500);
    time.frame();
    expect(ticks).toEqual([]);
  });

  it('nothing after dispose', () => {
    const { time, ticks, ticker } = make();
    ticker.poke();
    ticker.dispose();
    time.advance(500);
    time.frame();
    ticker.poke();
    time.frame();
    expect(ticks).toEqual([]);
  });
});

describe('LiveClock', () => {
  function make(interval = 200) {
    const time = new FakeTime();
    const clock = new LiveClock({ interval, ...time.options() });
    return { time, clock };
  }

  it('ticks every poked view in the same frame, the others not', () => {
    const { time, clock } = make();
    const seen: string[] = [];
    const a = clock.subscribe(() => seen.push('a'));
    const b = clock.subscribe(() => seen.push('b'));
    clock.subscribe(() => seen.push('c'));
    a.poke();
    b.poke();
    time.frame();
    expect(seen).toEqual(['a', 'b']);
    expect(clock.ticks).toBe(1);
  });

  it('views poked at different times within an interval share the next tick', () => {
    const { time, clock } = make(200);
    const seen: string[] = [];
    const a = clock.subscribe(() => seen.push(`a@${time.now}`));
    const b = clock.subscribe(() => seen.push(`b@${time.now}`));
    a.poke();
    time.frame(); // a at 0
    time.advance(50);
    b.poke();
    time.advance(50);
    a.poke();
    time.frame(); // within the interval: nothing yet
    expect(seen).toEqual(['a@0']);
    time.advance(100);
    time.frame(); // one tick for both
    expect(seen).toEqual(['a@0', 'a@200', 'b@200']);
  });

  it('a view out of sight is skipped and caught up when back', () => {
    const { time, clock } = make(200);
    const seen: string[] = [];
    const a = clock.subscribe(() => seen.push('a'));
    const b = clock.subscribe(() => seen.push('b'));
    b.setVisible(false);
    a.poke();
    b.poke();
    time.frame();
    expect(seen).toEqual(['a']);
    time.advance(50);
    b.setVisible(true);
    time.frame(); // at once, not after the interval
    expect(seen).toEqual(['a', 'b']);
  });

  it('a disposed view is not ticked; a failing view does not stop the others', () => {
    const { time, clock } = make();
    const seen: string[] = [];
    const error = jest.spyOn(console, 'error').mockImplementation(() => {});
    const a = clock.subscribe(() => {
      throw new Error('boom');
    });
    const b = clock.subscribe(() => seen.push('b'));
    const c = clock.subscribe(() => seen.push('c'));
    c.dispose();
    a.poke();
    b.poke();
    c.poke();
    time.frame();
    expect(seen).toEqual(['b']);
    expect(error).toHaveBeenCalled();
    error.mockRestore();
  });
});
