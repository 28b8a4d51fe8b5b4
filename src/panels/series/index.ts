export { SeriesPanel } from './body';
export { formatValue } from '../../ui/formatValue';
