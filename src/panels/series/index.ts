export { SeriesPanel, formatValue } from './body';
