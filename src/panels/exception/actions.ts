import { IException, IExceptionFrame } from '../../protocol/messages';

/** What the exception view can ask the application to do. */
export interface IExceptionActions {
  /** Open the notebook cell (or file) of a frame at its line. Resolves to a note for the user. */
  goToFrame(exc: IException, frame: IExceptionFrame): Promise<string>;
  /** Open a console on the same kernel and run `%debug` there. Resolves to a note. */
  debug(exc: IException): Promise<string>;
  /** Copy the report (Markdown) to the clipboard. */
  copyReport(exc: IException): Promise<void>;
}
