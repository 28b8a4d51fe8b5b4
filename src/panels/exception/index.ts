export { ExceptionPanel, RichText } from './body';
export type { IExceptionActions } from './body';
export { ExceptionModel } from './model';
export { exceptionReport } from './report';
