export { ControlPanel, sendControl } from './body';
export { ControlModel } from './model';
