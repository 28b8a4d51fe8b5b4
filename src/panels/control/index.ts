export { ControlPanel } from './body';
export { sendControl } from './sendControl';
export { ControlModel } from './model';
