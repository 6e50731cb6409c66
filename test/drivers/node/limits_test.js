// Floods one partition through a cqlguard that refuses some of its requests,
// with the DataStax Node.js driver, and checks what the driver sees of each
// refused request.
//
// The driver does not opt in to SCYLLA_RATE_LIMIT_ERROR, so a partition
// limit's refusal is Config_error with ScyllaDB's message
// (LIMIT_EXPECT=config_error), and a client class over its request unit
// budget is Config_error naming the class (LIMIT_EXPECT=class_budget): both
// a ResponseError of code configError. The driver must not retry either: the
// statements are marked idempotent, so that any error the driver might retry
// reaches a retry policy that records it and rethrows; the run must end with
// no decision recorded, and speculative executions are off (the driver's
// default). The caller also counts the requests the proxy saw.
//
// Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD, CQL_DC;
// LIMIT_KEYSPACE and LIMIT_TABLE, a table (k int, c int, PRIMARY KEY (k, c));
// LIMIT_KEY, the partition to flood; LIMIT_N, requests per operation (50);
// LIMIT_EXPECT, config_error or class_budget; LIMIT_CLASS, the client class a
// class_budget refusal names.
//
// Prints the first refusal of each operation, then one JSON line:
// {"write": {"accepted": n, "refused": n}, "read": {...}, "retry_decisions":
// n, "seconds": s}; exits 1 on anything unexpected.
'use strict';
const cassandra = require('cassandra-driver');

const ks = process.env.LIMIT_KEYSPACE || 'cqlguard_limits';
const table = process.env.LIMIT_TABLE || 'hot';
const key = Number(process.env.LIMIT_KEY || 60);
const n = Number(process.env.LIMIT_N || 50);
const expect = process.env.LIMIT_EXPECT || 'config_error';
const clientClass = process.env.LIMIT_CLASS || 'default';
if (expect !== 'config_error' && expect !== 'class_budget') {
  console.error(`LIMIT_EXPECT=${expect}: the Node.js driver sees only config_error or class_budget`);
  process.exit(2);
}

function fail(msg) {
  console.log(`FAIL ${msg}`);
  process.exit(1);
}

// RecordingRetryPolicy records each decision the driver asks for, and never
// retries.
class RecordingRetryPolicy extends cassandra.policies.retry.RetryPolicy {
  constructor() {
    super();
    this.decisions = [];
  }

  record(kind) {
    this.decisions.push(kind);
    return this.rethrowResult();
  }

  onReadTimeout() { return this.record('read_timeout'); }

  onWriteTimeout() { return this.record('write_timeout'); }

  onUnavailable() { return this.record('unavailable'); }

  onRequestError(info, consistency, err) { return this.record(`request_error: ${err && err.message}`); }
}

async function main() {
  const retry = new RecordingRetryPolicy();
  const client = new cassandra.Client({
    contactPoints: [process.env.CQL_HOST || '127.0.0.1'],
    protocolOptions: { port: Number(process.env.CQL_PORT || 9042) },
    localDataCenter: process.env.CQL_DC || 'datacenter1',
    authProvider: new cassandra.auth.PlainTextAuthProvider(
      process.env.CQL_USER || 'cassandra', process.env.CQL_PASSWORD || 'cassandra'),
    socketOptions: { connectTimeout: 10000, readTimeout: 20000 },
    policies: { retry },
    queryOptions: { consistency: cassandra.types.consistencies.one, isIdempotent: true },
  });
  await client.connect();

  const insert = `INSERT INTO ${ks}.${table} (k, c) VALUES (?, ?)`;
  // The key inline, so that a read is one QUERY with no values to type.
  const select = `SELECT c FROM ${ks}.${table} WHERE k = ${key} LIMIT 1`;
  const message = expect === 'class_budget'
    ? () => `client class ${clientClass} is over its budget`
    : (op) => `Per-partition rate limit reached for ${op} in table ${ks}.${table}, rejected by coordinator`;
  const ops = [
    ['write', (i) => client.execute(insert, [key, i], { prepare: true })],
    ['read', () => client.execute(select)],
  ];

  const result = {};
  const start = process.hrtime.bigint();
  for (const [op, run] of ops) {
    let accepted = 0;
    let refused = 0;
    for (let i = 0; i < n; i++) {
      try {
        await run(i);
        accepted++;
      } catch (e) {
        if (!(e instanceof cassandra.errors.ResponseError) || e.code !== cassandra.types.responseErrorCodes.configError) {
          fail(`${op}: ${e && e.name} code ${e && e.code}: ${e && e.message}; want a ResponseError of code configError`);
        }
        if (!e.message.includes(message(op))) {
          fail(`${op}: message ${e.message}; want "${message(op)}"`);
        }
        if (refused === 0) {
          console.log(`refused ${op}: ${e.name} code 0x${e.code.toString(16)}: ${e.message}`);
        }
        refused++;
      }
    }
    result[op] = { accepted, refused };
  }
  result.retry_decisions = retry.decisions.length;
  result.seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await client.shutdown();
  console.log(JSON.stringify(result));
  if (retry.decisions.length) {
    fail(`the driver consulted its retry policy: ${retry.decisions.join(', ')}`);
  }
  for (const op of ['write', 'read']) {
    if (result[op].refused === 0) fail(`no ${op} was refused`);
  }
}

main().catch((e) => fail(`${e && e.name}: ${e && e.message}`));
