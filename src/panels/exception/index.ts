export { ExceptionPanel } from './body';
export { RichText } from '../../ui/richText';
export type { IExceptionActions } from './actions';
export { ExceptionModel } from './model';
export { exceptionReport } from './report';
export { debugNote } from './debugNote';
