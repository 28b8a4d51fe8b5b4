import { JupyterFrontEnd } from '@jupyterlab/application';
import { Notification } from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import type { TranslationBundle } from '@jupyterlab/translation';

import { download } from '../panels/grads';

/** A file name part made of safe characters (the rest become `_`), at most 60. */
export function safeStem(text: string): string {
  const stem = text.replace(/[^A-Za-z0-9._-]+/g, '_').replace(/^[._]+/, '');
  return stem.slice(0, 60) || 'torchdbg';
}

/** `YYYYMMDD-HHMMSS` of `date`, local time. */
export function stamp(date: Date): string {
  const two = (n: number) => String(n).padStart(2, '0');
  return (
    `${date.getFullYear()}${two(date.getMonth() + 1)}${two(date.getDate())}-` +
    `${two(date.getHours())}${two(date.getMinutes())}${two(date.getSeconds())}`
  );
}

/**
 * Save `text` as a new file in the folder of the document whose kernel the
 * panel follows (a notebook's folder is its kernel's working directory, so
 * `pandas.read_csv(name)` in the notebook finds it), through JupyterLab's
 * contents service; never over an existing file. If the save fails the data is
 * kept: it is downloaded by the browser instead, and the notice says why (R45).
 * Resolves to the saved path, or null when it was downloaded.
 */
export async function saveBesideDocument(
  app: JupyterFrontEnd,
  documentPath: string,
  base: string,
  ext: string,
  text: string,
  mime: string,
  trans: TranslationBundle
): Promise<string | null> {
  const contents = app.serviceManager.contents;
  const dir = documentPath ? PathExt.dirname(documentPath) : '';
  const stem = `${safeStem(base)}-${stamp(new Date())}`;
  let path = '';
  try {
    for (let n = 1; ; n++) {
      const name = n === 1 ? `${stem}.${ext}` : `${stem}-${n}.${ext}`;
      path = dir ? PathExt.join(dir, name) : name;
      const taken = await contents.get(path, { content: false }).then(
        () => true,
        () => false
      );
      if (!taken) {
        break;
      }
      if (n >= 20) {
        throw new Error(trans.__('too many files named %1', stem));
      }
    }
    await contents.save(path, { type: 'file', format: 'text', content: text });
  } catch (e) {
    const name = PathExt.basename(path) || `${stem}.${ext}`;
    download(name, text, mime);
    Notification.warning(
      trans.__(
        'Could not save %1 beside the notebook (%2): the browser downloaded it instead.',
        name,
        (e as Error).message
      ),
      { autoClose: 10000 }
    );
    return null;
  }
  const name = PathExt.basename(path);
  Notification.success(
    trans.__('Saved %1 beside the notebook: pandas.read_csv("%1")', name),
    {
      autoClose: 10000,
      actions: [
        {
          label: trans.__('Open'),
          callback: () => {
            void app.commands.execute('docmanager:open', { path });
          }
        }
      ]
    }
  );
  return path;
}
