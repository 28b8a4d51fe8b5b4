export { MemoryPanel, formatBytes } from './body';
export { MemoryModel } from './model';
