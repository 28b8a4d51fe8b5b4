export { ControlPanel } from './body';
export { sendControl } from './sendControl';
export { ControlModel } from './model';
export { formatLr, parseLr, MAX_LR } from './lr';
