export { RanksPanel } from './body';
export { RanksModel } from './model';
export type { IRanksNote, IRankSeries, RanksActionName } from './model';
export { describeRanksAck, sendRanksAction } from './send';
