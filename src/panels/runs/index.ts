export { RunsBar, pickableRuns, runLabel, runTitle } from './bar';
export { MAX_RUNS, NO_RUN, RunsModel } from './model';
