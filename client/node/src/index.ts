// hookd's Node client: the gRPC API (@grpc/grpc-js over proto/hookd.proto) and an Emitter
// with the Rust client's semantics: a bounded buffer (10,000 events; above 8,000 `emit`
// waits 100 ms first; a full buffer throws BufferFull), background batching into
// EnqueueBatch, an idempotency key per event kept across retries, retries of UNAVAILABLE /
// RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED that honour the server's google.rpc.RetryInfo,
// hookd's throttle hints, counters, and flush / close with a deadline.

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

export const queue = (name: string, payload: EnqueueRequest["payload"], fields: Partial<EnqueueRequest> = {}): EnqueueRequest =>
  ({ ...fields, queue: name, payload });
export const endpoint = (name: string, payload: EnqueueRequest["payload"], fields: Partial<EnqueueRequest> = {}): EnqueueRequest =>
  ({ ...fields, endpoint: name, payload });
export const topic = (name: string, payload: EnqueueRequest["payload"], fields: Partial<EnqueueRequest> = {}): EnqueueRequest =>
  ({ ...fields, topic: name, payload });

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
export class Unflushed extends Error {
  constructor(readonly left: number) {
    super(`${left} events were not yet acknowledged by hookd when the deadline passed`);
  }
}

export interface EmitterConfig {
  capacity: number;
  throttleAt: number;
  throttlePauseMs: number;
  maxBatch: number;
  retryBaseMs: number;
  retryCapMs: number;
  callTimeoutMs: number;
}

export const defaultConfig: EmitterConfig = {
  capacity: 10_000,
  throttleAt: 8_000,
  throttlePauseMs: 100,
  maxBatch: 500,
  retryBaseMs: 50,
  retryCapMs: 5_000,
  callTimeoutMs: 10_000,
};

export interface Counters {
  buffered: number;
  sent: number;
  duplicates: number;
  throttled: number;
  refused: number;
  retries: number;
  failed: number;
}

/** Sends one batch: resolves with EnqueueBatchResponse, rejects with a grpc ServiceError. */
export type Send = (batch: { events: EnqueueRequest[] }, timeoutMs: number) => Promise<any>;

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
  /** Replaces the gRPC call (tests). */
  send?: Send;
  /** Replaces waiting (tests record the pauses instead). */
  sleep?: (ms: number) => Promise<void>;
}

const realSleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

/** Buffers events and sends them to hookd in the background. */
export class Emitter {
  readonly config: EmitterConfig;
  private queue: EnqueueRequest[] = [];
  private sending = 0;
  private closed = false;
  /** close() ran out of time: the sender stops at its next step, leaving the rest unsent. */
  private abandoned = false;
  private hintedUntil = 0;
  private failures = 0;
  private counts = { sent: 0, duplicates: 0, throttled: 0, refused: 0, retries: 0, failed: 0 };
  private wake: (() => void) | undefined;
  private waiters: Array<() => void> = [];
  private readonly send: Send;
  private readonly sleep: (ms: number) => Promise<void>;
  private client: (grpc.Client & Record<string, any>) | undefined;
  private readonly loop: Promise<void>;
  lastError: string | undefined;

  constructor(address = "127.0.0.1:7700", options: EmitterOptions = {}) {
    this.config = { ...defaultConfig, ...options.config };
    this.sleep = options.sleep ?? realSleep;
    if (options.send) {
      this.send = options.send;
    } else {
      const client = hookdClient(address);
      this.client = client;
      this.send = (batch, timeoutMs) =>
        new Promise((resolve, reject) =>
          client.EnqueueBatch(batch, { deadline: Date.now() + timeoutMs }, (err: grpc.ServiceError | null, res: any) =>
            err ? reject(err) : resolve(res),
          ),
        );
    }
    this.loop = this.run();
  }

  private held(): number {
    return this.queue.length + this.sending;
  }

  /** Takes an event: resolves at once, or after one throttle pause; throws BufferFull when
   * the buffer is full and Closed after close(). */
  async emit(event: EnqueueRequest): Promise<void> {
    if (this.closed) throw new Closed();
    if (this.held() >= this.config.throttleAt || this.hintedUntil > Date.now()) {
      this.counts.throttled += 1;
      await this.sleep(this.config.throttlePauseMs);
    }
    if (this.held() >= this.config.capacity) {
      this.counts.refused += 1;
      throw new BufferFull(this.config.capacity);
    }
    const payload = typeof event.payload === "string" ? Buffer.from(event.payload) : event.payload;
    this.queue.push({ ...event, payload, idempotency_key: event.idempotency_key || randomUUID() });
    this.wake?.();
  }

  counters(): Counters {
    return { buffered: this.held(), ...this.counts };
  }

  /** Resolves once every event taken so far is acknowledged; rejects with Unflushed at the deadline. */
  async flush(timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (this.held() > 0) {
      const left = deadline - Date.now();
      if (left <= 0) throw new Unflushed(this.held());
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  /** Refuses new events, sends what is buffered (until the deadline), stops the sender. */
  async close(timeoutMs: number): Promise<void> {
    this.closed = true;
    this.wake?.();
    try {
      await this.flush(timeoutMs);
    } catch (err) {
      this.abandoned = true;
      throw err;
    } finally {
      this.wake?.();
      if (this.held() === 0) await this.loop;
      this.client?.close();
    }
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
    for (;;) {
      if (this.queue.length === 0) {
        this.settled();
        if (this.closed) return;
        await new Promise<void>((resolve) => (this.wake = resolve));
        this.wake = undefined;
        continue;
      }
      let pending = this.queue.splice(0, Math.max(1, this.config.maxBatch));
      this.sending = pending.length;
      let alone = false;
      while (pending.length > 0) {
        if (this.abandoned) return;
        const take = alone ? 1 : pending.length;
        let delay: number | undefined;
        let pause = 0;
        try {
          const response = await this.send({ events: pending.slice(0, take) }, this.config.callTimeoutMs);
          const again: EnqueueRequest[] = [];
          let ok = 0;
          pending.slice(0, take).forEach((event, i) => {
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
          pending = [...again, ...pending.slice(take)];
          this.sending = pending.length;
          this.settled();
          pause = Number(response.throttle_ms ?? 0);
          if (pause > 0) this.hintedUntil = Math.max(this.hintedUntil, Date.now() + pause);
          if (pending.length === 0 || (delay === undefined && ok > 0)) {
            this.failures = 0;
            delay = undefined;
          } else if (delay === undefined) {
            delay = this.backoff();
          }
        } catch (e) {
          const err = e as grpc.ServiceError;
          this.lastError = `${err.code}: ${err.details ?? err.message}`;
          if (RETRYABLE.has(err.code)) {
            delay = retryInfoMs(err) ?? this.backoff();
          } else if (take > 1) {
            alone = true;
          } else {
            pending = pending.slice(1);
            this.counts.failed += 1;
            this.sending = pending.length;
            this.settled();
          }
        }
        if (pause > 0) await this.sleep(pause);
        if (delay !== undefined && pending.length > 0) {
          this.counts.retries += 1;
          await this.sleep(delay);
        }
      }
    }
  }
}
