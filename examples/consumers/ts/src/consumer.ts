// Follows gpubus's event stream from a start time, decodes every event (msgpack), validates each
// against the published JSON Schema (docs/events/schemas) and prints a summary per node.
//
// The example of how to consume gpubus from TypeScript: a JetStream ordered consumer on stream
// GPUBUS, msgpack bodies, unknown fields ignored, majors newer than the known schemas skipped.
//
//   node dist/consumer.js --nats nats://127.0.0.1:4222 --schemas ../../../docs/events/schemas --since 2026-01-01T00:00:00Z

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";

import { decode } from "@msgpack/msgpack";
import { DeliverPolicy, jetstream, jetstreamManager } from "@nats-io/jetstream";
import { connect } from "@nats-io/transport-node";
import { Ajv2020, type ValidateFunction } from "ajv/dist/2020.js";

const STREAM = "GPUBUS";

/** What every event carries besides its own fields. */
interface Envelope {
  kind: string;
  v: number;
  id: string;
  node: string;
}

// The few kinds the summary reads typed; every kind is validated against its schema first.
interface InventorySnapshot extends Envelope {
  devices: { id: string }[];
}
interface AllocationDecided extends Envelope {
  allocation: { devices: { usedmem: number }[][] };
}
interface DeviceHealth extends Envelope {
  healthy: boolean;
}

interface NodeSummary {
  kinds: Record<string, number>;
  devices: number;
  allocated_mib: number;
  unhealthy: number;
}

interface Summary {
  events: number;
  invalid: number;
  skipped: number;
  nodes: Record<string, NodeSummary>;
}

class Skipped extends Error {}

/** The compiled schema of every kind and major in a folder (`<kind>.v<major>.json`). */
class Schemas {
  private readonly byKey = new Map<string, ValidateFunction>();
  private readonly newest = new Map<string, number>();

  constructor(dir: string) {
    const ajv = new Ajv2020({ allErrors: false });
    for (const file of readdirSync(dir).sort()) {
      const m = /^(.+)\.v(\d+)\.json$/.exec(file);
      if (m === null) continue;
      const [, kind, major] = m;
      this.byKey.set(`${kind}.v${major}`, ajv.compile(JSON.parse(readFileSync(join(dir, file), "utf8"))));
      this.newest.set(kind, Math.max(Number(major), this.newest.get(kind) ?? 0));
    }
    if (this.byKey.size === 0) throw new Error(`no schemas in ${dir}`);
  }

  /** The decoded, validated event; Skipped for a kind or major this build does not know. */
  check(data: Uint8Array): Envelope {
    const decoded: unknown = decode(data);
    if (typeof decoded !== "object" || decoded === null) throw new Error("event body is not a map");
    const body = decoded as Envelope;
    const newest = this.newest.get(body.kind);
    if (newest === undefined || body.v > newest) throw new Skipped(`${body.kind} v${body.v}`);
    const validate = this.byKey.get(`${body.kind}.v${body.v}`);
    if (validate === undefined) throw new Error(`${body.kind}: no schema for v${body.v}`);
    if (!validate(decoded)) {
      throw new Error(`${body.kind} ${body.id}: ${JSON.stringify(validate.errors)}`);
    }
    return body;
  }
}

function add(summary: Summary, event: Envelope): void {
  const name = event.node || "_";
  const node = (summary.nodes[name] ??= { kinds: {}, devices: 0, allocated_mib: 0, unhealthy: 0 });
  node.kinds[event.kind] = (node.kinds[event.kind] ?? 0) + 1;
  summary.events++;
  switch (event.kind) {
    case "inventory.snapshot":
      node.devices = (event as InventorySnapshot).devices.length;
      break;
    case "allocation.decided":
      for (const slot of (event as AllocationDecided).allocation.devices) {
        for (const card of slot) node.allocated_mib += card.usedmem;
      }
      break;
    case "device.health":
      if (!(event as DeviceHealth).healthy) node.unhealthy++;
      break;
  }
}

function parseSince(text: string): Date {
  const seconds = Number(text);
  const when = Number.isFinite(seconds) ? new Date(seconds * 1000) : new Date(text);
  if (Number.isNaN(when.getTime())) throw new Error(`--since ${text}: expected RFC 3339 or unix seconds`);
  return when;
}

async function run(url: string, schemaDir: string, since: Date, follow: boolean): Promise<Summary> {
  const schemas = new Schemas(schemaDir);
  const summary: Summary = { events: 0, invalid: 0, skipped: 0, nodes: {} };
  const nc = await connect({ servers: url, name: "gpubus-example-ts" });
  try {
    const info = await (await jetstreamManager(nc)).streams.info(STREAM);
    if (!follow && (info.state.messages === 0 || new Date(info.state.last_ts) < since)) {
      return summary; // nothing stored at or after the start time
    }
    const consumer = await jetstream(nc).consumers.get(STREAM, {
      filter_subjects: ["gpubus.>"],
      deliver_policy: DeliverPolicy.StartTime,
      opt_start_time: since.toISOString(),
    });
    const messages = await consumer.consume();
    for await (const msg of messages) {
      try {
        add(summary, schemas.check(msg.data));
      } catch (e) {
        if (e instanceof Skipped) {
          summary.skipped++;
        } else {
          summary.invalid++;
          console.error(`invalid on ${msg.subject}: ${(e as Error).message}`);
        }
      }
      if (!follow && msg.info.pending === 0) break;
    }
    return summary;
  } finally {
    await nc.close();
  }
}

function printTable(summary: Summary): void {
  console.log(`${summary.events} events (${summary.invalid} invalid, ${summary.skipped} skipped)`);
  for (const name of Object.keys(summary.nodes).sort()) {
    const n = summary.nodes[name];
    console.log(`${name.padEnd(20)} devices ${n.devices} allocated ${n.allocated_mib} MiB  ` +
      `unhealthy ${n.unhealthy}  events ${JSON.stringify(n.kinds)}`);
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      nats: { type: "string", default: "nats://127.0.0.1:4222" },
      schemas: { type: "string", default: "docs/events/schemas" },
      since: { type: "string", default: "0" },
      follow: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      timeout: { type: "string", default: "60" },
    },
  });
  const since = parseSince(values.since!);
  const timer = values.follow ? undefined : setTimeout(() => {
    console.error(`error: stopped before catching up (--timeout ${values.timeout}s)`);
    process.exit(1);
  }, Number(values.timeout) * 1000);
  const summary = await run(values.nats!, values.schemas!, since, values.follow!);
  clearTimeout(timer);
  if (values.json) console.log(JSON.stringify(summary));
  else printTable(summary);
}

main().catch((e: unknown) => {
  console.error(`error: ${(e as Error).message}`);
  process.exit(1);
});
