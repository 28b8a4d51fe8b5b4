import { JupyterFrontEndPlugin } from '@jupyterlab/application';

import { mainPlugin } from './plugins/main';

export * from './tokens';
export { PROTOCOL_VERSION, COMM_TARGET } from './protocol/version';

const plugins: JupyterFrontEndPlugin<unknown>[] = [mainPlugin];
export default plugins;
