// hookd's Node client: the gRPC API (@grpc/grpc-js over proto/hookd.proto) and an Emitter
// with the Rust client's semantics: `emit` never waits (a bounded buffer of 10,000 events;
// full, it throws BufferFull at once; from 8,000, or on hookd's throttle hint, `slowDown()`
// is true), background batching into EnqueueBatch, an idempotency key per event kept
// across retries, retries of UNAVAILABLE / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED that
// honour the server's google.rpc.RetryInfo, counters that add up (emitted = sent + failed +
// abandoned + buffered), and flush / close with a deadline that return the events still
// unacknowledged.

import { randomUUID } from "node:crypto";
import { fileURLToPath } from "node:url";
import path from "node:path";
import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const PROTO = path.join(path.dirname(fileURLToPath(import.meta.url)), "..", "proto", "hookd.proto");

export { pick, score } from "./route.js";

/** An event as EnqueueRequest carries it (field names as in the .proto). */
export interface EnqueueRequest {
  queue?: string;
  endpoint?: string;
  url?: string;
  /** Published: one delivery per subscription that takes this topic (the event's type). */
  topic?: string;
  payload: Buffer | Uint8Array | string;
  idempotency_key?: string;
  event_type?: string;
  headers?: Record<string, string>;
  delay_ms?: number | string;
  max_attempts?: number;
}

/** A payload: bytes, text, or a JSON value (an object, an array, a number...), sent as its
 * compact JSON (which push delivery sends as application/json). */
export type Payload = Buffer | Uint8Array | string | number | boolean | null | object;

/** The payload as stored. */
export function payloadBytes(payload: Payload): Buffer | Uint8Array | string {
  if (typeof payload === "string" || payload instanceof Uint8Array) return payload;
  return Buffer.from(JSON.stringify(payload));
}

export const queue = (name: string, payload: Payload, fields: Partial<EnqueueRequest> = {}): EnqueueRequest =>
  ({ ...fields, queue: name, payload: payloadBytes(payload) });
export const endpoint = (name: string, payload: Payload, fields: Partial<EnqueueRequest> = {}): EnqueueRequest =>
  ({ ...fields, endpoint: name, payload: payloadBytes(payload) });
export const topic = (name: string, payload: Payload, fields: Partial<EnqueueRequest> = {}): EnqueueRequest =>
  ({ ...fields, topic: name, payload: payloadBytes(payload) });

/** The header an operator's call names its tenant with. */
export const TENANT_HEADER = "x-hookd-tenant";

/**
 * The gRPC metadata of a call: `authorization: Bearer <token>` when a token is given, and
 * `x-hookd-tenant` when a tenant is. Pass it as a call's metadata argument.
 */
export function metadata(options: { token?: string; tenant?: string } = {}): grpc.Metadata {
  const m = new grpc.Metadata();
  if (options.token) m.set("authorization", `Bearer ${options.token}`);
  if (options.tenant) m.set(TENANT_HEADER, options.tenant);
  return m;
}

/** The generated client constructor (keepCase field names, 64-bit numbers as strings). */
export function hookdClient(address: string, credentials = grpc.credentials.createInsecure()): grpc.Client & Record<string, any> {
  const definition = protoLoader.loadSync(PROTO, { keepCase: true, longs: String, enums: String, defaults: true, oneofs: true });
  const loaded = grpc.loadPackageDefinition(definition) as any;
  return new loaded.hookd.v1.Hookd(address, credentials);
}

// google.rpc.Status and RetryInfo, enough to read a status's details.
const rpc = protobuf.Root.fromJSON({
  nested: {
    google: {
      nested: {
        protobuf: {
          nested: {
            Any: { fields: { type_url: { type: "string", id: 1 }, value: { type: "bytes", id: 2 } } },
            Duration: { fields: { seconds: { type: "int64", id: 1 }, nanos: { type: "int32", id: 2 } } },
          },
        },
        rpc: {
          nested: {
            Status: {
              fields: {
                code: { type: "int32", id: 1 },
                message: { type: "string", id: 2 },
                details: { rule: "repeated", type: "google.protobuf.Any", id: 3 },
              },
            },
            RetryInfo: { fields: { retry_delay: { type: "google.protobuf.Duration", id: 1 } } },
          },
        },
      },
    },
  },
});
const StatusType = rpc.lookupType("google.rpc.Status");
const RetryInfoType = rpc.lookupType("google.rpc.RetryInfo");

/** The server's RetryInfo delay in ms, if the error carries one. */
export function retryInfoMs(error: grpc.ServiceError): number | undefined {
  const raw = error.metadata?.get("grpc-status-details-bin")?.[0];
  if (!raw) return undefined;
  try {
    const status = StatusType.toObject(StatusType.decode(raw as Buffer), { longs: Number }) as any;
    for (const d of status.details ?? []) {
      if (String(d.type_url).endsWith("google.rpc.RetryInfo")) {
        const info = RetryInfoType.toObject(RetryInfoType.decode(d.value), { longs: Number }) as any;
        const delay = info.retry_delay ?? {};
        return Number(delay.seconds ?? 0) * 1000 + Math.round(Number(delay.nanos ?? 0) / 1e6);
      }
    }
  } catch {
    return undefined;
  }
  return undefined;
}

export class EmitError extends Error {}
export class BufferFull extends EmitError {
  constructor(readonly capacity: number) {
    super(`the emitter's buffer is full (${capacity} events); the event was not taken`);
  }
}
export class Closed extends EmitError {
  constructor() {
    super("the emitter is closed");
  }
}
/** flush / close with `strict` ran out of time: `events` were still unacknowledged. */
export class Unflushed extends Error {
  readonly left: number;
  constructor(readonly events: EnqueueRequest[]) {
    super(`${events.length} events were not yet acknowledged by hookd when the deadline passed`);
    this.left = events.length;
  }
}

export interface EmitterConfig {
  capacity: number;
  /** From this many held, slowDown() is true (emit never waits). */
  slowDownAt: number;
  maxBatch: number;
  retryBaseMs: number;
  retryCapMs: number;
  callTimeoutMs: number;
}

export const defaultConfig: EmitterConfig = {
  capacity: 10_000,
  slowDownAt: 8_000,
  maxBatch: 500,
  retryBaseMs: 50,
  retryCapMs: 5_000,
  callTimeoutMs: 10_000,
};

/** A snapshot: emitted = sent + failed + abandoned + buffered. */
export interface Counters {
  /** Events emit() took. */
  emitted: number;
  /** Held now: buffered or being sent. */
  buffered: number;
  /** Acknowledged by hookd (stored, or a duplicate of a stored event). */
  sent: number;
  duplicates: number;
  /** Taken while slowDown() was true. */
  pressured: number;
  /** emit() calls refused: the buffer was full (not in `emitted`). */
  refused: number;
  retries: number;
  /** Refused by hookd for good (dropped; see lastError). */
  failed: number;
  /** Given back unacknowledged by close() at its deadline. */
  abandoned: number;
}

/** Sends one batch: resolves with EnqueueBatchResponse, rejects with a grpc ServiceError.
 * `signal` aborts the call when close() gives the events back. */
export type Send = (batch: { events: EnqueueRequest[] }, timeoutMs: number, signal: AbortSignal) => Promise<any>;

const RETRYABLE = new Set([
  grpc.status.UNAVAILABLE,
  grpc.status.RESOURCE_EXHAUSTED,
  grpc.status.DEADLINE_EXCEEDED,
  grpc.status.ABORTED,
  grpc.status.UNKNOWN,
  grpc.status.CANCELLED,
]);

export interface EmitterOptions {
  config?: Partial<EmitterConfig>;
  /** Sent as `authorization: Bearer <token>` (a hookd with authentication needs one). */
  token?: string;
  /** Sent as `x-hookd-tenant`: an operator's token acting on that tenant (a tenant's own token needs none). */
  tenant?: string;
  /** Replaces the gRPC call (tests). */
  send?: Send;
  /** Replaces waiting (tests record the pauses instead). */
  sleep?: (ms: number) => Promise<void>;
}

export interface FlushOptions {
  /** Reject with Unflushed (carrying the events) instead of resolving with them. */
  strict?: boolean;
}

/** Buffers events and sends them to hookd in the background; emit() never waits. */
export class Emitter {
  readonly config: EmitterConfig;
  private queue: EnqueueRequest[] = [];
  /** Taken by the sender, not yet acknowledged, in order (the front is sent first). */
  private inflight: EnqueueRequest[] = [];
  private closed = false;
  /** close() gave the held events back: the sender stops and ignores a late answer. */
  private abandoned = false;
  private readonly stop = new AbortController();
  private hintedUntil = 0;
  private failures = 0;
  private counts = { emitted: 0, sent: 0, duplicates: 0, pressured: 0, refused: 0, retries: 0, failed: 0, abandoned: 0 };
  private wake: (() => void) | undefined;
  private waiters: Array<() => void> = [];
  private readonly send: Send;
  private readonly sleep: (ms: number) => Promise<void>;
  private client: (grpc.Client & Record<string, any>) | undefined;
  private readonly loop: Promise<void>;
  lastError: string | undefined;

  constructor(address = "127.0.0.1:7700", options: EmitterOptions = {}) {
    this.config = { ...defaultConfig, ...options.config };
    this.sleep = options.sleep ?? ((ms) => this.pause(ms));
    if (options.send) {
      this.send = options.send;
    } else {
      const client = hookdClient(address);
      this.client = client;
      const headers = metadata({ token: options.token, tenant: options.tenant });
      this.send = (batch, timeoutMs, signal) =>
        new Promise((resolve, reject) => {
          const call = client.EnqueueBatch(batch, headers, { deadline: Date.now() + timeoutMs }, (err: grpc.ServiceError | null, res: any) =>
            err ? reject(err) : resolve(res),
          );
          signal.addEventListener("abort", () => call.cancel(), { once: true });
        });
    }
    this.loop = this.run();
  }

  /** Waits `ms`, or less when close() gives the events back. */
  private pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.stop.signal.addEventListener(
        "abort",
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
  }

  private held(): number {
    return this.queue.length + this.inflight.length;
  }

  /** True while the buffer is at or above slowDownAt or hookd asked producers to slow
   * down: an agent that can produce less should. emit() takes events regardless. */
  slowDown(): boolean {
    return this.held() >= this.config.slowDownAt || this.hintedUntil > Date.now();
  }

  /** Takes an event, or throws BufferFull (buffer full) or Closed (after close()) at once.
   * Never waits for hookd (it returns nothing to await). */
  emit(event: EnqueueRequest): void {
    if (this.closed) throw new Closed();
    if (this.held() >= this.config.capacity) {
      this.counts.refused += 1;
      throw new BufferFull(this.config.capacity);
    }
    if (this.slowDown()) this.counts.pressured += 1;
    const payload = typeof event.payload === "string" ? Buffer.from(event.payload) : event.payload;
    this.queue.push({ ...event, payload, idempotency_key: event.idempotency_key || randomUUID() });
    this.counts.emitted += 1;
    this.wake?.();
  }

  counters(): Counters {
    return { ...this.counts, buffered: this.held() };
  }

  private heldEvents(): EnqueueRequest[] {
    return [...this.inflight, ...this.queue].map((e) => ({ ...e }));
  }

  /** Resolves once every event taken so far is acknowledged (or refused for good), or at
   * the deadline, with copies of the events still unacknowledged (empty when none; they
   * stay buffered). With `strict`, rejects with Unflushed instead. */
  async flush(timeoutMs: number, options: FlushOptions = {}): Promise<EnqueueRequest[]> {
    const deadline = Date.now() + timeoutMs;
    while (this.held() > 0 && !this.abandoned) {
      const left = deadline - Date.now();
      if (left <= 0) {
        const events = this.heldEvents();
        if (options.strict) throw new Unflushed(events);
        return events;
      }
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    return [];
  }

  /** Refuses new events, sends what is held until the deadline, and stops the sender.
   * Resolves with the events still unacknowledged then (empty when none): they leave the
   * emitter (counted in `abandoned`); their idempotency keys make sending them again later
   * safe. With `strict`, rejects with Unflushed instead. */
  async close(timeoutMs: number, options: FlushOptions = {}): Promise<EnqueueRequest[]> {
    this.closed = true;
    this.wake?.();
    let left = await this.flush(timeoutMs);
    if (left.length > 0) {
      left = [...this.inflight, ...this.queue];
      this.inflight = [];
      this.queue = [];
      this.abandoned = true;
      this.counts.abandoned += left.length;
      this.stop.abort();
    }
    this.wake?.();
    // Abandoned, the sender stops at its next step (a call in flight is cancelled).
    if (!this.abandoned) await this.loop;
    this.client?.close();
    if (options.strict && left.length > 0) throw new Unflushed(left);
    return left;
  }

  private settled(): void {
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) w();
  }

  private backoff(): number {
    const ceiling = Math.min(this.config.retryCapMs, this.config.retryBaseMs * 2 ** Math.min(this.failures, 20));
    this.failures += 1;
    return Math.random() * ceiling;
  }

  private async run(): Promise<void> {
    let alone = false;
    for (;;) {
      if (this.abandoned) return;
      if (this.inflight.length === 0) {
        alone = false;
        this.inflight = this.queue.splice(0, Math.max(1, this.config.maxBatch));
      }
      if (this.inflight.length === 0) {
        this.settled();
        if (this.closed) return;
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
        continue;
      }
      const take = alone ? 1 : this.inflight.length;
      const batch = this.inflight.slice(0, take);
      let delay: number | undefined;
      let pause = 0;
      let retry = false;
      try {
        const response = await this.send({ events: batch }, this.config.callTimeoutMs, this.stop.signal);
        if (this.abandoned) return; // given back: not ours to count
        const again: EnqueueRequest[] = [];
        let ok = 0;
        batch.forEach((event, i) => {
          const r = response.results?.[i];
          if (r?.ok) {
            ok += 1;
            this.counts.sent += 1;
            if (r.ok.duplicate) this.counts.duplicates += 1;
          } else if (r?.error && RETRYABLE.has(r.error.code)) {
            const ms = Number(r.error.retry_after_ms ?? 0);
            if (ms > 0) delay = Math.max(delay ?? 0, ms);
            this.lastError = r.error.message;
            again.push(event);
          } else if (r?.error) {
            this.counts.failed += 1;
            this.lastError = r.error.message;
          } else {
            again.push(event); // no answer for it: its key makes a resend safe
          }
        });
        this.inflight = [...again, ...this.inflight.slice(take)];
        pause = Number(response.throttle_ms ?? 0);
        if (pause > 0) this.hintedUntil = Math.max(this.hintedUntil, Date.now() + pause);
        retry = this.inflight.length > 0 && (delay !== undefined || ok === 0);
      } catch (e) {
        if (this.abandoned) return;
        const err = e as grpc.ServiceError;
        this.lastError = `${err.code}: ${err.details ?? err.message}`;
        if (RETRYABLE.has(err.code)) {
          delay = retryInfoMs(err);
          retry = true;
        } else if (take > 1) {
          alone = true;
        } else {
          this.inflight = this.inflight.slice(1);
          this.counts.failed += 1;
        }
      }
      this.settled();
      let wait = pause;
      if (retry) {
        this.counts.retries += 1;
        wait += delay ?? this.backoff();
      } else {
        this.failures = 0;
      }
      if (wait > 0) await this.sleep(wait);
    }
  }
}
