/**
 * Typed messages of the comm protocol, under the names the panel uses.
 *
 * The JSON Schema in `jupyterlab_torchdbg/protocol/messages.schema.json` is the
 * source of truth: `./generated` is generated from it (`jlpm gen:protocol`,
 * checked in CI by `jlpm gen:protocol:check`). This module only names those
 * types, derives the typed action map from them, and holds the runtime helpers.
 */
import type {
  ActionVariant,
  FiniteOrSpecial,
  IAck,
  IActionEnvelope,
  IActionResults,
  IError
} from './generated';

export type {
  Bytes,
  IAck,
  IActionResults,
  IAlert,
  IAlertItem,
  IAllocationSite,
  IAllocatorCounters,
  IAvailability,
  IBlock,
  ICapabilities,
  IControl,
  ICudaCapability,
  IDiagnosis,
  IError,
  IException,
  IExceptionFrame,
  IExceptionInfo,
  IGradLayer,
  IGradStats,
  IGradThresholds,
  IGradTrack,
  IGrads,
  IHello,
  ILocal,
  IMemory,
  IMemoryBreakdown,
  IMemoryBreakdownRow,
  IMemoryDevice,
  IMemoryRecording,
  IMemorySnapshotSummary,
  INvmlFields,
  IOom,
  IOomRemedy,
  IOomTensor,
  IOpen,
  IRelatedException,
  ISeries,
  ISnapshot,
  ISnapshotBlock,
  IStreamStats,
  KernelMessage,
  PanelMessage
} from './generated';

/** A number, or NaN / infinities encoded as strings (JSON has none). */
export type WireNumber = FiniteOrSpecial;

/** Why the kernel refused or failed a request. */
export type ErrorCode = IError['code'];

/**
 * Argument types of every allowlisted action, by action name: the typed
 * request map (`sendAction<K extends ActionName>(action: K, args: IActionArgs[K])`).
 */
export type IActionArgs = {
  [V in ActionVariant as NonNullable<V['action']>]-?: NonNullable<V['args']>;
};

/** The name of an allowlisted action. */
export type ActionName = keyof IActionArgs;

/** The `result` of an action's `ack` (the schema's `x-result` for that action). */
export type ActionResult<K extends ActionName> = IActionResults[K];

/** The `ack` of one action: its name and its typed result. */
export type ITypedAck<K extends ActionName = ActionName> = Omit<
  IAck,
  'action' | 'result'
> & { action: K; result: ActionResult<K> };

/** An `action` request: the envelope with one action's name and arguments. */
export type IAction<K extends ActionName = ActionName> = IActionEnvelope &
  Extract<ActionVariant, { action?: K }>;

/** Decode a wire number. */
export function wireNumber(v: WireNumber | null | undefined): number {
  if (typeof v === 'number') {
    return v;
  }
  switch (v) {
    case 'Infinity':
      return Infinity;
    case '-Infinity':
      return -Infinity;
    default:
      return NaN;
  }
}
