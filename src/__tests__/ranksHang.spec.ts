/**
 * @jest-environment jsdom
 *
 * A hang alarm at the collective (protocol 2.7, R57), as the schema accepts it:
 * the rank alarms list shows which collective the others wait in (op, seq,
 * group, shapes) and which rank never entered it, then the ranks' stacks
 * merged by where each stopped, the rank that never entered marked; an alarm
 * without these fields (an older kernel) shows none of it. All text: no markup
 * from the kernel is ever interpreted.
 */
import { mountEach, React } from './dom';
import { RankAlarms } from '../panels/ranks/alarms';
import type { IRankAlarm } from '../protocol/generated';
import { schemaDef } from './schema';
import { trans } from './translate';

const validate = schemaDef('RankAlarm');

function hang(over: Partial<IRankAlarm> = {}): IRankAlarm {
  const a: IRankAlarm = {
    id: 'h1',
    kind: 'hang',
    rank: 1,
    step: 5,
    time: 1_700_000_010,
    message:
      'Hang: rank 1 has not stepped for 10 s. Ranks 0, 2 are in all_reduce (seq 41, default group, [1024] float32); rank 1 never entered it.',
    stack: ['data.py:31 in __getitem__: time.sleep(60)'],
    stack_user: 1,
    collective: {
      op: 'all_reduce',
      seq: 41,
      group: 'default',
      shapes: '[1024] float32',
      ddp_backward: false,
      ranks_in: [0, 2],
      never_entered: [1],
      source: 'flight_recorder'
    },
    merged: [
      {
        ranks: [0, 2],
        where: 'train.py:40 in step',
        in: 'all_reduce (seq 41, default group, [1024] float32)'
      },
      { ranks: [1], where: '<b>data.py</b>:31 in __getitem__', in: null }
    ],
    ...over
  };
  if (!validate(a)) {
    throw new Error(JSON.stringify(validate.errors, null, 1));
  }
  return a;
}

describe('hang at the collective', () => {
  const dom = mountEach();

  it('names the collective, the rank that never entered it, and merges the stacks', () => {
    dom.render(React.createElement(RankAlarms, { alarms: [hang()], trans }));
    const view = dom.host.querySelector('.jp-TorchDbg-rankHang')!;
    expect(
      view.querySelector('.jp-TorchDbg-rankHangCollective')!.textContent
    ).toBe(
      'ranks 0, 2 wait in all_reduce · seq 41 · default group · [1024] float32'
    );
    expect(
      view.querySelector('.jp-TorchDbg-rankHangMissing')!.textContent
    ).toBe('never entered: rank 1');
    const rows = Array.from(
      view.querySelectorAll('.jp-TorchDbg-rankMerged li')
    );
    expect(rows.map(li => (li as HTMLElement).dataset.ranks)).toEqual([
      '0,2',
      '1'
    ]);
    expect(rows[0].textContent).toBe(
      'ranks 0, 2 train.py:40 in stepin all_reduce (seq 41, default group, [1024] float32)'
    );
    expect(rows[1].classList.contains('jp-mod-missing')).toBe(true);
    expect(rows[0].classList.contains('jp-mod-missing')).toBe(false);
    // the kernel's text stays text
    expect(rows[1].querySelector('b')).toBeNull();
    expect(rows[1].textContent).toContain('<b>data.py</b>:31 in __getitem__');
  });

  it("says DDP's backward, and shows nothing of it for an older kernel's alarm", () => {
    const ddp = hang({
      collective: {
        ...hang().collective!,
        ranks_in: [0],
        never_entered: [1],
        ddp_backward: true,
        shapes: null
      }
    });
    dom.render(React.createElement(RankAlarms, { alarms: [ddp], trans }));
    expect(
      dom.host.querySelector('.jp-TorchDbg-rankHangCollective')!.textContent
    ).toBe(
      'rank 0 waits in all_reduce · seq 41 · default group · DDP backward'
    );
    const old = hang();
    delete old.collective;
    delete old.merged;
    dom.render(React.createElement(RankAlarms, { alarms: [old], trans }));
    expect(dom.host.querySelector('.jp-TorchDbg-rankHang')).toBeNull();
    expect(dom.host.querySelector('.jp-TorchDbg-rankStack')).not.toBeNull();
  });
});
