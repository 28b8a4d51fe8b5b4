import { IException } from '../../protocol/messages';

/** The diagnosis and stack as Markdown, for a bug report or a colleague. */
export function exceptionReport(exc: IException): string {
  const d = exc.diagnosis;
  const fence = (s: string) => s.replace(/```/g, "'''");
  const lines: string[] = [`### ${d.title}`, ''];
  if (exc.rank) {
    const r = exc.rank;
    lines.push(
      `Rank ${r.rank} of ${r.world_size} · ${r.host} · pid ${r.pid}`,
      ''
    );
  }
  lines.push(d.headline, '');
  const u = exc.unwrapped;
  if (u) {
    lines.push(
      `In ${u.where}; sample index: ${
        u.index_known
          ? JSON.stringify(u.index)
          : `not known (${u.why_unknown ?? ''})`
      }`,
      ''
    );
  }
  if (d.remedy) {
    lines.push(`**Fix:** ${d.remedy}`, '');
  }
  for (const h of d.hints) {
    lines.push(`- ${h}`);
  }
  if (d.culprits.length) {
    lines.push('', '**Involved:**', '');
    for (const c of d.culprits) {
      lines.push(`- \`${c.name ?? '?'}\`: ${c.text}`);
    }
  }
  lines.push(
    '',
    '```text',
    fence(`${exc.exception.type}: ${exc.exception.message}`)
  );
  if (u) {
    lines.push(fence(`${u.exception.type}: ${u.exception.message}`));
  }
  for (const [i, f] of exc.frames.entries()) {
    if (f.process && f.process !== exc.frames[i - 1]?.process) {
      lines.push(fence(`  -- in ${f.process} --`));
    }
    lines.push(fence(`  ${f.file}:${f.lineno} in ${f.function}`));
    if (f.line) {
      lines.push(fence(`    ${f.line}`));
    }
  }
  lines.push('```', '');
  const focus = exc.frames[exc.focus ?? -1];
  if (focus && focus.locals.length) {
    lines.push(`**Locals of \`${focus.function}\`:**`, '');
    for (const l of focus.locals.slice(0, 50)) {
      lines.push(`- \`${l.name ?? ''}\`: ${l.text}`);
    }
    lines.push('');
  }
  return lines.join('\n');
}
