/** The JSON records the Python engines write: the same shapes as the TypedDicts in
 * jupyter_sandbox/records.py (tests/test_records_contract.py checks the keys agree). */

/** Present while the cell runs (jupyter_sandbox/display/_live.py): the live headline. The
 * live record is bounded: the latest calls only, counted here. */
export interface ILive {
  summary: string;
  calls?: number;
  running?: number;
  queued?: number;
  failed?: number;
}

export interface ICallRecord {
  call_id: number;
  tool: string;
  args: string[];
  kwargs: Record<string, string>;
  result: string | null;
  error: string | null;
  host_traceback: string | null;
  start: number;
  end: number | null;
  /** Seconds a sandbox tool's call waited for a concurrency slot (null: still waiting). */
  queued?: number | null;
  /** The run stopped before this call finished. */
  cancelled?: boolean;
  line: number | null;
  column: number | null;
  replayed: boolean;
  children: IRecord[];
  /** A pending call's digest: `%orchestrate_approve RUN --expect DIGEST` makes the call only
   * if it is still this one. A pending call's args and kwargs are whole reprs, not previews. */
  digest?: string;
  /** A pending call's arguments not shown whole (by index or keyword): each one's length. */
  cut?: Record<string, number>;
  /** A pending call's tool's parameters its positional arguments fill, in order (from its
   * signature): what the panel labels them by. */
  params?: string[];
  /** A pending call's tool's docstring, its first line. */
  doc?: string;
  /** The notebook variables a pending call's handle arguments bind to after a restart. */
  bindings?: IBinding[];
  /** Lines the cell had printed when the call started (a cell's record only). */
  printed?: number;
  /** Lines the cell printed since the call before (absent when none, and in older records). */
  printed_since?: number;
  /** The first of those lines (at most two, each clipped). */
  printed_first?: string[];
}

/** A notebook variable a paused call's handle argument is bound to after a restart. */
export interface IBinding {
  variable: string;
  type: string;
}

/** One tool's calls over the whole run (jupyter_sandbox/_shared/_bounds.py `ToolStats`). */
export interface IToolRow {
  tool: string;
  calls: number;
  errors: number;
  total: number;
  p50: number | null;
  p95: number | null;
}

/** Where a fork branched off: calls before `call` answered from run `run_id`'s records. */
export interface IForkedFrom {
  run_id: string;
  call: number;
}

/** The orchestrator call a notebook cell's record shows (`Caller` in
 * jupyter_sandbox/records.py): `calls` of it the cell made, this one the first. */
export interface ICaller {
  call: string;
  calls: number;
}

/** How a paused run was answered (`Answered` in jupyter_sandbox/records.py): approved or
 * rejected in the cell numbered `cell`, or `elsewhere` (the store says it is no longer paused). */
export interface IAnswered {
  how: 'approved' | 'rejected' | 'elsewhere';
  reason: string | null;
  cell: number | null;
  /** `elsewhere` only: the run's status in the store when it was asked. */
  status?: string;
}

/** A trace's words, worded once in Python (`TraceSummary` in jupyter_sandbox/records.py):
 * drawn as given. Absent in records saved before it (see `legacyTraceSummary`). */
export interface ITraceSummary {
  headline: string;
  notes: string[];
  /** Which calls a long trace's record lists, in one line (null: all of them). */
  kept: string | null;
  /** Whether the per-tool table is worth showing. */
  tools: boolean;
  /** By call id: the cell's output printed between the call before and this one, as the
   * trace shows it above that call. */
  marks: Record<string, string>;
  /** Older records only: a line about the output after the last call, no longer drawn. */
  after?: string | null;
}

/** A sandbox run's words, worded once in Python (`RunSummary`). */
export interface IRunSummary {
  headline: string;
  /** `image TAG: built in 12.30 s (6 steps)`; null without a build. */
  build: string | null;
  /** The error line the record shows (null: none, or the cell's error output has it). */
  error: string | null;
  /** `3 requests: 2 allowed, 1 refused: evil.example:443 not on the list`; absent: no allow-list. */
  requests?: string;
}

/** One request an allow-listed run sent to its proxy: no body, no header; query and secrets
 * masked (`RequestRow` in records.py). */
export interface IRequestRow {
  /** When it started, epoch seconds. */
  time: number;
  method: string;
  host: string;
  port: number;
  /** The path, its query shown as `?***`; empty for a tunnel (`CONNECT`). */
  path: string;
  /** The HTTP status the proxy answered (0: none). */
  status: number;
  sent: number;
  received: number;
  allowed: boolean;
  /** Why it was refused, or why an allowed one failed at the proxy. */
  why: string | null;
}

/** Every request an allow-listed run made: counts of all, the first rows. */
export interface IRequestLogRecord {
  total: number;
  allowed: number;
  refused: number;
  /** `host:port` -> why, each refused destination once. */
  refusals: Record<string, string>;
  rows: IRequestRow[];
}

export interface ITraceRecord {
  version: number;
  kind: 'orchestrate';
  code: string;
  /** `paused`: a durable run waits for a person to approve or reject its `pending` calls. */
  status: 'ok' | 'error' | 'interrupted' | 'running' | 'paused';
  value: string | null;
  stdout: string;
  error: string | null;
  sandbox_traceback: string | null;
  /** The magic raised the error: the cell's error output shows it, so the record does not. */
  raised?: boolean;
  duration: number;
  calls: ICallRecord[];
  /** Calls a long trace did not keep (its ends and failures are kept); absent before 0.1. */
  dropped?: number;
  /** The per-tool summary over every call, dropped ones included; absent in older records. */
  tools?: IToolRow[];
  /** Size of the whole stdout; `stdout` is its tail (the cell's stream outputs hold it). */
  stdout_chars?: number;
  live?: ILive;
  /** The durable run's id in the store (absent when the run had no store). */
  run_id?: string;
  /** A paused run's calls that wait for approval. */
  pending?: ICallRecord[];
  /** The run and call this run was forked from. */
  forked_from?: IForkedFrom;
  caller?: ICaller;
  /** The `--session` name whose variables the run kept. */
  session?: string;
  /** How the paused run was answered (absent while it waits). */
  answered?: IAnswered;
  /** How the pause this run was continued from was answered (a run a magic continued). */
  answer?: IAnswered;
  /** Lines the cell printed in all (a cell's record only). */
  printed?: number;
  /** How to go on after an interrupt or an error (`--resume`), when the cell can. */
  advice?: string;
  /** The renderers' words (absent in older records). */
  summary?: ITraceSummary;
  /** The OpenTelemetry trace id (32 hex digits) of the run's spans, when tracing was on. */
  trace_id?: string;
}

export interface IBuildRecord {
  tag: string;
  cached: boolean;
  seconds: number;
  steps: string[];
  /** Docker's step count; absent in records saved before it was kept, 0 when cached. */
  total_steps?: number;
  log: string;
  error: string | null;
  /** Live records only: the build is still going, and its latest whole output line. */
  running?: boolean;
  line?: string;
}

/** A `File`/`Dir` output the magic linked beside the notebook (`FileLink` in records.py). */
export interface IFileLink {
  /** Relative to the notebook's folder, under `sandbox-outputs/`. */
  path: string;
  name: string;
  size: number;
  kind: 'file' | 'dir';
}

export interface ITypedValue {
  type: string;
  preview: string;
  /** Where the magic linked a `File`/`Dir` output (absent from the Python API's records). */
  link?: IFileLink;
  /** Why a `File`/`Dir` output was not linked, in one line. */
  note?: string;
}

export interface IRunRecord {
  version: number;
  kind: 'sandbox';
  name: string;
  image: string;
  status: 'ok' | 'error' | 'interrupted' | 'running';
  error: string | null;
  /** The magic raised the error: the cell's error output shows it, so the record does not. */
  raised?: boolean;
  duration: number;
  exit_code: number | null;
  attempts: number;
  cached: boolean;
  build: IBuildRecord | null;
  stdout: string;
  stderr: string;
  /** Sizes of the whole streams; `stdout`/`stderr` are their tails. */
  stdout_chars?: number;
  stderr_chars?: number;
  outputs: Record<string, ITypedValue>;
  inputs: Record<string, ITypedValue>;
  live?: ILive;
  /** The Dask worker that ran it (`create(cluster=...)`); absent for a local run. */
  worker?: string;
  /** The sandbox session that ran the cell (`%%sandbox --session NAME`); absent: one-shot. */
  session?: string;
  /** The cell's number in that session (with `session` only). */
  session_cell?: number;
  /** Why the result was not kept in the result cache asked for (it held a secret's value). */
  uncached?: string;
  /** The renderers' words (absent in older records). */
  summary?: IRunSummary;
  /** The OpenTelemetry trace id (32 hex digits) of the run's spans, when tracing was on. */
  trace_id?: string;
  /** What an allow-listed run sent out, through its proxy; absent for any other network. */
  requests?: IRequestLogRecord;
}

/** One thing a `%%sandbox` cell displayed (`DisplayRecord` in records.py): MIME type -> data,
 * its HTML, Markdown and SVG the container's own untrusted markup (display.ts sanitises). */
export interface IDisplayRecord {
  version: number;
  data: Record<string, unknown>;
}

export type IRecord = ITraceRecord | IRunRecord;

export type CallStatus = 'queued' | 'running' | 'ok' | 'error' | 'abandoned';

/** The same rule as `ToolCall.status` (records from before `queued` count as running), in a
 * person's words: a call the run stopped before it finished was abandoned, it did not fail
 * (`call_status` in jupyter_sandbox/display/_format.py). */
export function callStatus(call: ICallRecord): CallStatus {
  if (call.end === null || call.end === undefined) {
    return call.queued === null ? 'queued' : 'running';
  }
  if (call.cancelled) {
    return 'abandoned';
  }
  return call.error !== null && call.error !== undefined ? 'error' : 'ok';
}

/** A call as a trace row shows it: in a paused run nothing unfinished runs, it waits until
 * the run is approved or rejected and continues (`row_status` in display/_format.py). */
export function rowStatus(call: ICallRecord, record: ITraceRecord): CallStatus | 'waiting' {
  const status = callStatus(call);
  const unfinished = status === 'running' || status === 'queued';
  return record.status === 'paused' && unfinished ? 'waiting' : status;
}

/** The tool's own time: a wait for a concurrency slot is not in it. */
export function callDuration(call: ICallRecord): number | null {
  return call.end === null || call.end === undefined
    ? null
    : call.end - call.start - (call.queued ?? 0);
}

/** `tool(arg, key=value)` from a call record's previews (`call_signature` in _format.py). */
export function signature(call: ICallRecord): string {
  const kwargs = Object.entries(call.kwargs ?? {}).map(([k, v]) => `${k}=${v}`);
  return `${call.tool}(${[...(call.args ?? []), ...kwargs].join(', ')})`;
}
