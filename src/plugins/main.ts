import {
  ILabShell,
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, Notification } from '@jupyterlab/apputils';
import { IStatusBar } from '@jupyterlab/statusbar';
import { IConsoleTracker } from '@jupyterlab/console';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';
import { ITranslator, nullTranslator } from '@jupyterlab/translation';

import {
  addControlCommands,
  addExceptionCommands,
  addGradsCommands,
  addMemoryCommands,
  addPanelCommands,
  addRanksCommands,
  CommandIDs,
  ICommandContext,
  PALETTE_CATEGORY
} from '../commands';
import { listenForLoads } from '../connection/announce';
import { TorchDbgConnection } from '../connection/connection';
import { ISessionWidget, KernelTracker } from '../connection/tracker';
import { IException } from '../protocol/messages';
import { EXPORT_ALL_EVENT } from '../panels/series/export';
import { TorchDbgStatus } from '../statusbar';
import { torchDbgIcon } from '../icon';
import { exceptionActions } from './exceptionActions';
import { GradSampling, GradSettingsSync, IGradSettings } from './gradSettings';
import { TorchDbgSidebar } from '../sidebar/sidebar';
import { ITorchDebugger } from '../tokens';

const PLUGIN_ID = 'jupyterlab_torchdbg:plugin';

/**
 * How to hide the right sidebar area: JupyterLab's shell, or Jupyter Notebook
 * 7's (its shell has the same `collapseRight`, without the ILabShell token;
 * read by shape so the extension needs no Notebook package). Undefined where
 * the shell has none: the toggle then only shows the panel.
 */
export function rightCollapser(
  app: JupyterFrontEnd,
  labShell: ILabShell | null
): (() => void) | undefined {
  if (labShell) {
    return () => labShell.collapseRight();
  }
  const shell = app.shell as unknown as { collapseRight?: unknown };
  if (typeof shell.collapseRight === 'function') {
    const collapse = shell.collapseRight as () => void;
    return () => collapse.call(app.shell);
  }
  return undefined;
}

/**
 * Wires the tracker, the sidebar, the palette commands (registered per feature
 * in `src/commands/`) and the settings.
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
    // A restored notebook that never takes focus never becomes the trackers'
    // current widget: while nothing is followed, the first one added (or shown
    // after the layout is restored) is.
    const followIfNone = (widget: unknown) => {
      if (!tracker.currentWidget) {
        follow(widget);
      }
    };
    notebooks?.widgetAdded.connect((_, w) => followIfNone(w));
    consoles?.widgetAdded.connect((_, w) => followIfNone(w));
    // The kernel side announces each load: the panel reattaches after an
    // %unload_ext / %load_ext typed by hand (issue #22).
    const hearLoads = (w: ISessionWidget) =>
      listenForLoads(w.sessionContext, id => tracker.kernelLoaded(id));
    notebooks?.widgetAdded.connect((_, w) => hearLoads(w));
    consoles?.widgetAdded.connect((_, w) => hearLoads(w));
    notebooks?.forEach(hearLoads);
    consoles?.forEach(hearLoads);
    void app.restored.then(() => {
      follow(
        notebooks?.currentWidget ??
          consoles?.currentWidget ??
          labShell?.currentWidget ??
          null
      );
      if (!tracker.currentWidget) {
        followIfNone(notebooks?.find(() => true) ?? null);
      }
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

    const commands: ICommandContext = { app, tracker, trans };
    addPanelCommands(commands, {
      sidebar,
      icon: torchDbgIcon,
      collapseRight: rightCollapser(app, labShell)
    });
    addGradsCommands(commands);
    addExceptionCommands(commands, actions);
    addControlCommands(commands);
    addMemoryCommands(commands);
    addRanksCommands(commands);
    // the Logged series' CSV button: the same command as the palette's
    sidebar.node.addEventListener(EXPORT_ALL_EVENT, () => {
      void app.commands.execute(CommandIDs.exportAll);
    });
    if (palette) {
      for (const command of Object.values(CommandIDs)) {
        palette.addItem({ command, category: PALETTE_CATEGORY });
      }
    }

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
