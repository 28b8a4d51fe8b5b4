/**
 * Names in a narrow column (issue #22, item 9): shortened so that two names
 * never look the same. Distinct names give distinct labels whatever the width
 * (checked on real model layer lists and on generated ones), the shared dotted
 * prefix is left out, the tail keeps a whole component where it can.
 */
import { commonPrefix, ELLIPSIS, shortNames } from '../ui/shortNames';

/** Every label distinct, and within `max` characters when one could be. */
function expectDistinct(names: string[], max: number): Map<string, string> {
  const { labels } = shortNames(names, max);
  expect(labels.size).toBe(new Set(names).size);
  const shown = [...labels.values()];
  expect(new Set(shown).size).toBe(shown.length);
  return labels;
}

/** GPT-2's modules from a 12-layer config (as the monitor names layers). */
function gpt2(layers = 12): string[] {
  const out = ['transformer.wte', 'transformer.wpe'];
  for (let i = 0; i < layers; i++) {
    for (const m of [
      'ln_1',
      'attn.c_attn',
      'attn.c_proj',
      'ln_2',
      'mlp.c_fc',
      'mlp.c_proj'
    ]) {
      out.push(`transformer.h.${i}.${m}`);
    }
  }
  return [...out, 'transformer.ln_f', 'lm_head'];
}

describe('shortNames: distinct names stay distinct', () => {
  it('rnn_model.encoder.weight and rnn_model.decoder.weight do not both become rnn_m…', () => {
    const names = ['rnn_model.encoder.weight', 'rnn_model.decoder.weight'];
    const { labels, prefix } = shortNames(names, 12);
    expect(prefix).toBe('rnn_model.');
    expect(labels.get(names[0])).toBe(`encod${ELLIPSIS}weight`);
    expect(labels.get(names[1])).toBe(`decod${ELLIPSIS}weight`);
    // room for the part after the prefix: it is shown whole
    expect(shortNames(names, 14).labels.get(names[0])).toBe('encoder.weight');
  });

  it('shows names whole when they all fit (no prefix left out)', () => {
    const names = ['model.rnn', 'model.head'];
    const { labels, prefix } = shortNames(names, 20);
    expect(prefix).toBe('');
    expect([...labels.values()]).toEqual(names);
  });

  it('keeps the layer number of GPT-2 blocks that differ only there', () => {
    const names = gpt2();
    for (const max of [6, 8, 10, 12, 14, 18, 24]) {
      expectDistinct(names, max);
    }
    const labels = shortNames(names, 14).labels;
    const l11 = labels.get('transformer.h.11.mlp.c_proj')!;
    const l1 = labels.get('transformer.h.1.mlp.c_proj')!;
    expect(l11).not.toBe(l1);
    expect(l11.length).toBeLessThanOrEqual(14);
    expect(l11).toContain('11');
    expect(l11.endsWith('c_proj')).toBe(true);
  });

  it('is distinct for any width on many generated names (prefixes of each other, shared tails)', () => {
    const parts = ['a', 'enc', 'dec', 'layer', 'self_attn', 'out_proj', 'w'];
    const names = new Set<string>();
    let seed = 7;
    const rand = (n: number) => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    while (names.size < 300) {
      const k = 1 + rand(5);
      names.add(
        Array.from({ length: k }, () =>
          rand(3) ? parts[rand(parts.length)] : String(rand(30))
        ).join('.')
      );
    }
    for (const max of [1, 2, 3, 5, 8, 13, 21, 40]) {
      expectDistinct([...names], max);
    }
  });

  it('takes a measured width (a predicate) and fits it where a telling label exists', () => {
    const names = gpt2(4);
    // 15 characters: "…11.mlp.c_proj" (14) tells block 11 from block 1
    const narrow = (label: string) => label.length * 6 <= 90;
    const { labels } = shortNames(names, narrow);
    for (const label of labels.values()) {
      expect(narrow(label)).toBe(true);
    }
    expect(new Set(labels.values()).size).toBe(names.length);
    // narrower than any telling label: the shortest that tells them apart
    const tiny = shortNames(names, (label: string) => label.length <= 4).labels;
    expect(tiny.get('transformer.h.3.mlp.c_proj')).toBe(
      `${ELLIPSIS}3.mlp.c_proj`
    );
    expect(new Set(tiny.values()).size).toBe(names.length);
  });

  it('names holding the ellipsis themselves never pass for another name', () => {
    const names = [
      `a.b${ELLIPSIS}z`,
      'a.bxxxxz',
      'a.byyyyz',
      `a.q${ELLIPSIS}r`
    ];
    for (const max of [2, 3, 4, 5, 6]) {
      expectDistinct(names, max);
    }
  });

  it('leaves out whole dotted components only, never a whole name', () => {
    expect(commonPrefix(['model.rnn', 'model.rnn.cell'])).toBe('model.');
    expect(commonPrefix(['model.rnn.a', 'model.rnn.b'])).toBe('model.rnn.');
    expect(commonPrefix(['modelA.x', 'modelB.x'])).toBe('');
    expect(commonPrefix(['model.x'])).toBe('');
    expect(commonPrefix(['a.b', 'a.b'])).toBe('a.');
  });
});
