export { RecordPanel } from './view';
export { RecordModel, recordKey } from './model';
