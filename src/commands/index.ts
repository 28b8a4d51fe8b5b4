export { CommandIDs, PALETTE_CATEGORY } from './ids';
export type { ICommandContext } from './context';
export { addControlCommands } from './control';
export { addExceptionCommands } from './exception';
export { addGradsCommands } from './grads';
export { addMemoryCommands } from './memory';
export { addPanelCommands } from './panel';
export { addRanksCommands } from './ranks';
