import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import {
  ICommandPalette,
  InputDialog,
  Notification
} from '@jupyterlab/apputils';
import { IStatusBar } from '@jupyterlab/statusbar';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import { CommandIDs, PALETTE_CATEGORY } from '../commands';
import { ActionReply, TorchDbgConnection } from '../connection/connection';
import { sendControl } from '../panels/control';
import { formatBytes } from '../panels/memory';
import { ActionName, IActionArgs, IException } from '../protocol/messages';
import { TorchDbgStatus } from '../statusbar';
import { ISessionWidget, KernelTracker } from '../connection/tracker';
import { torchDbgIcon } from '../icon';
import { download, gradsCsv, gradsJson } from '../panels/grads';
import { exceptionActions } from './exceptionActions';
import { GradSampling, GradSettingsSync, IGradSettings } from './gradSettings';
import { TorchDbgSidebar } from '../sidebar/sidebar';
import { ITorchDebugger } from '../tokens';

const PLUGIN_ID = 'jupyterlab_torchdbg:plugin';

/**
 * Wires the tracker, the sidebar, the palette commands and the settings.
 */
export const mainPlugin: JupyterFrontEndPlugin<ITorchDebugger> = {
  id: PLUGIN_ID,
  description: 'A live debugging panel for PyTorch training.',
  autoStart: true,
  provides: ITorchDebugger,
  optional: [
    ILabShell,
    ILayoutRestorer,
    ICommandPalette,
    INotebookTracker,
    IConsoleTracker,
    ISettingRegistry,
    ITranslator,
    IStatusBar
  ],
  activate: (
    app: JupyterFrontEnd,
    labShell: ILabShell | null,
    restorer: ILayoutRestorer | null,
    palette: ICommandPalette | null,
    notebooks: INotebookTracker | null,
    consoles: IConsoleTracker | null,
    settingRegistry: ISettingRegistry | null,
    translator: ITranslator | null,
    statusBar: IStatusBar | null
  ): ITorchDebugger => {
    const trans = (translator ?? nullTranslator).load('jupyterlab_torchdbg');
    const tracker = new KernelTracker({ autoLoad: true });

    const actions = exceptionActions(app, notebooks, tracker, trans);
    const sidebar = new TorchDbgSidebar({ tracker, actions, trans });
    sidebar.title.icon = torchDbgIcon;
    sidebar.title.caption = trans.__('Torch Debugger');
    app.shell.add(sidebar, 'right', { rank: 600 });
    if (restorer) {
      restorer.add(sidebar, 'jupyterlab_torchdbg:sidebar');
    }

    // Follow the active notebook or console (the last one focused stays current
    // while the user is in another kind of widget, e.g. the file browser).
    const follow = (widget: unknown) => {
      const w = widget as ISessionWidget | null;
      if (w && (notebooks?.has(w as never) || consoles?.has(w as never))) {
        tracker.setWidget(w);
      }
    };
    notebooks?.currentChanged.connect((_, w) => follow(w));
    consoles?.currentChanged.connect((_, w) => follow(w));
    labShell?.currentChanged.connect((_, args) => follow(args.newValue));
    void app.restored.then(() => {
      follow(notebooks?.currentWidget ?? consoles?.currentWidget ?? null);
    });

    // Auto-popup: a new (not replayed) exception opens the panel on its view.
    let autoPopup = true;
    let watched: TorchDbgConnection | null = null;
    const onRaised = (_: unknown, exc: IException) => {
      if (autoPopup && !exc.replay) {
        app.shell.activateById(sidebar.id);
        sidebar.node.scrollTop = 0;
      }
    };
    const watch = (conn: TorchDbgConnection | null) => {
      watched?.model.exception.raised.disconnect(onRaised);
      watched = conn;
      conn?.model.exception.raised.connect(onRaised);
    };
    tracker.currentChanged.connect((_, conn) => watch(conn));

    // The user's gradient settings, applied to each kernel as it connects.
    const gradSettings = new GradSettingsSync(message =>
      Notification.warning(message, { autoClose: 8000 })
    );
    tracker.currentChanged.connect((_, conn) => {
      if (conn) {
        gradSettings.track(conn);
      }
    });

    const current = () => tracker.current;
    const lastException = () => current()?.model.exception.current ?? null;
    const report = (reply: ActionReply) => {
      if (reply.method === 'error') {
        Notification.error(reply.message, { autoClose: 5000 });
      }
    };
    const failed = (e: Error) =>
      Notification.warning(e.message, { autoClose: 5000 });

    app.commands.addCommand(CommandIDs.open, {
      label: trans.__('Open Panel'),
      caption: trans.__('Show the Torch Debugger sidebar'),
      icon: torchDbgIcon,
      execute: () => {
        app.shell.activateById(sidebar.id);
      }
    });
    app.commands.addCommand(CommandIDs.load, {
      label: trans.__('Load in Kernel'),
      caption: trans.__(
        'Run %load_ext jupyterlab_torchdbg in the current kernel'
      ),
      isEnabled: () => current() !== null,
      execute: async () => {
        const conn = current();
        if (conn && (await conn.load())) {
          await conn.connect();
        }
      }
    });
    app.commands.addCommand(CommandIDs.resync, {
      label: trans.__('Resync Panel with Kernel'),
      isEnabled: () => current()?.isConnected ?? false,
      execute: () => current()?.sendAction('snapshot', {}).then(report, failed)
    });
    app.commands.addCommand(CommandIDs.clearSeries, {
      label: trans.__('Clear Logged Series'),
      isEnabled: () => current()?.isConnected ?? false,
      execute: () =>
        current()
          ?.sendAction('clear_history', {})
          .then(reply => {
            report(reply);
            if (reply.method === 'ack') {
              current()?.model.clearSeries();
            }
          }, failed)
    });
    app.commands.addCommand(CommandIDs.exportCsv, {
      label: trans.__('Export Gradient Norms as CSV'),
      isEnabled: () => !!current()?.model.grads.status,
      execute: () => {
        const m = current()?.model;
        if (m) {
          download('grad-norms.csv', gradsCsv(m), 'text/csv');
        }
      }
    });
    app.commands.addCommand(CommandIDs.exportJson, {
      label: trans.__('Export Gradient Norms as JSON'),
      isEnabled: () => !!current()?.model.grads.status,
      execute: () => {
        const m = current()?.model;
        if (m) {
          download('grad-norms.json', gradsJson(m), 'application/json');
        }
      }
    });
    app.commands.addCommand(CommandIDs.goToFailingCell, {
      label: trans.__('Go to Failing Cell'),
      isEnabled: () => lastException() !== null,
      execute: async () => {
        const exc = lastException();
        const m = current()?.model;
        if (exc && m) {
          const frame =
            exc.frames[m.exception.frame] ?? exc.frames[exc.focus ?? 0];
          const note = frame ? await actions.goToFrame(exc, frame) : '';
          if (note) {
            Notification.info(note, { autoClose: 4000 });
          }
        }
      }
    });
    app.commands.addCommand(CommandIDs.debugException, {
      label: trans.__('Debug Last Exception (%debug)'),
      isEnabled: () => lastException()?.debuggable ?? false,
      execute: async () => {
        const exc = lastException();
        const note = exc ? await actions.debug(exc) : '';
        if (note) {
          Notification.info(note, { autoClose: 8000 });
        }
      }
    });
    app.commands.addCommand(CommandIDs.copyReport, {
      label: trans.__('Copy Exception Report'),
      isEnabled: () => lastException() !== null,
      execute: () => {
        const exc = lastException();
        return exc ? actions.copyReport(exc) : undefined;
      }
    });
    // Training control (also in the panel's "Training control" section).
    const control = async <K extends ActionName>(
      action: K,
      args: IActionArgs[K]
    ) => {
      const conn = current();
      if (!conn) {
        Notification.warning(trans.__('No kernel: open a notebook first.'));
        return;
      }
      const error = await sendControl(conn, action, args);
      if (error) {
        Notification.error(error, { autoClose: 6000 });
      }
    };
    const connected = () => current()?.isConnected ?? false;
    app.commands.addCommand(CommandIDs.clip, {
      label: trans.__('Clip Gradients…'),
      caption: trans.__(
        'Clip the gradient norm at every optimizer step from the next one'
      ),
      isEnabled: connected,
      execute: async () => {
        const result = await InputDialog.getNumber({
          title: trans.__('Clip gradients at max_norm'),
          value: current()?.model.control.state?.clip ?? 1.0
        });
        if (result.button.accept && result.value !== null) {
          await control('clip', { max_norm: result.value });
        }
      }
    });
    app.commands.addCommand(CommandIDs.unclip, {
      label: trans.__('Stop Clipping'),
      isEnabled: () =>
        connected() && (current()?.model.control.state?.clip ?? null) !== null,
      execute: () => control('unclip', {})
    });
    app.commands.addCommand(CommandIDs.pause, {
      label: trans.__('Pause Training'),
      isEnabled: connected,
      execute: () => control('pause', {})
    });
    app.commands.addCommand(CommandIDs.resume, {
      label: trans.__('Resume Training'),
      isEnabled: connected,
      execute: () => control('resume', {})
    });
    app.commands.addCommand(CommandIDs.step, {
      label: trans.__('Single Step (while paused)'),
      isEnabled: () =>
        connected() && (current()?.model.control.state?.paused ?? false),
      execute: () => control('step', {})
    });
    // Memory actions: the ack says what changed.
    const memoryAction = async <K extends ActionName>(
      action: K,
      args: IActionArgs[K],
      success: (result: { [key: string]: unknown }) => string
    ) => {
      const conn = current();
      if (!conn) {
        return;
      }
      try {
        const reply = await conn.sendAction(action, args);
        if (reply.method === 'error') {
          Notification.error(reply.message, { autoClose: 6000 });
        } else {
          Notification.success(success(reply.result), { autoClose: 6000 });
        }
      } catch (e) {
        Notification.warning((e as Error).message, { autoClose: 5000 });
      }
    };
    app.commands.addCommand(CommandIDs.emptyCache, {
      label: trans.__('Empty CUDA Cache'),
      isEnabled: connected,
      execute: () =>
        memoryAction('empty_cache', {}, r =>
          trans.__(
            'CUDA cache emptied (%1 freed).',
            formatBytes(Number(r.freed_bytes ?? 0))
          )
        )
    });
    app.commands.addCommand(CommandIDs.releaseRefs, {
      label: trans.__('Release References (ends %debug on the last error)'),
      isEnabled: connected,
      execute: () =>
        memoryAction('release_refs', {}, r =>
          typeof r.note === 'string' ? r.note : trans.__('References released.')
        )
    });
    app.commands.addCommand(CommandIDs.recordMemory, {
      label: () =>
        current()?.model.memory.status?.recording.state === 'off' ||
        !current()?.model.memory.status
          ? trans.__('Start Recording Memory History')
          : trans.__('Stop Recording Memory History'),
      isEnabled: connected,
      execute: () => {
        const on =
          (current()?.model.memory.status?.recording.state ?? 'off') !== 'off';
        return memoryAction(
          'record_memory',
          on ? { op: 'stop' } : { op: 'start' },
          r =>
            typeof r.file === 'string'
              ? trans.__('Memory snapshot written to %1.', r.file)
              : trans.__('Recording memory history.')
        );
      }
    });
    app.commands.addCommand(CommandIDs.saveCheckpoint, {
      label: trans.__('Save Checkpoint of Model and Optimizer'),
      isEnabled: connected,
      execute: () =>
        memoryAction('save_checkpoint', {}, r =>
          trans.__('Checkpoint saved: %1', String(r.file ?? r.filename ?? ''))
        )
    });
    if (statusBar) {
      statusBar.registerStatusItem('jupyterlab_torchdbg:status', {
        item: new TorchDbgStatus({
          tracker,
          trans,
          onClick: () => app.shell.activateById(sidebar.id)
        }),
        align: 'left',
        rank: 4,
        isActive: () => true
      });
    }
    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: PALETTE_CATEGORY });
      }
    }

    if (settingRegistry) {
      void settingRegistry
        .load(PLUGIN_ID)
        .then(settings => {
          const apply = () => {
            tracker.autoLoad = settings.get('autoLoad').composite as boolean;
            autoPopup = settings.get('autoPopup').composite as boolean;
            gradSettings.update(
              {
                sampling: settings.get('gradientSampling')
                  .composite as GradSampling,
                thresholds: {
                  ...(settings.get('gradientThresholds').composite as Partial<
                    IGradSettings['thresholds']
                  >)
                }
              },
              tracker.connections
            );
          };
          apply();
          settings.changed.connect(apply);
        })
        .catch(reason => {
          console.warn('jupyterlab_torchdbg: settings failed to load', reason);
        });
    }

    return { tracker };
  }
};
