export { GradsPanel, skipping } from './body';
export { GradsModel } from './model';
export { gradsCsv, gradsJson, download } from './export';
