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
// A request shed while its node is slow (LIMIT_EXPECT=shed) must be refused
// every time with Overloaded and cqlguard's message for tier LIMIT_TIER and
// node LIMIT_NODE. Here the driver keeps its defaults: statements are not
// idempotent, and the recording policy answers what the default policy
// decides. The driver asks its policy about Overloaded only for idempotent
// statements (the default retries those on the next host), so each shed
// request fails at once with a ResponseError of code overloaded and no
// decision is recorded; had it been retried through the query plan, the
// error would be a NoHostAvailableError holding the ResponseError, which is
// unwrapped and reported as such.
//
// Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD, CQL_DC;
// LIMIT_KEYSPACE and LIMIT_TABLE, a table (k int, c int, PRIMARY KEY (k, c));
// LIMIT_KEY, the partition to flood; LIMIT_N, requests per operation (50);
// LIMIT_EXPECT, config_error, class_budget or shed; LIMIT_CLASS, the client
// class a class_budget refusal names; LIMIT_TIER and LIMIT_NODE, the tier and
// node a shed refusal names.
//
// Prints the first refusal of each operation, then one JSON line:
// {"write": {"accepted": n, "refused": n}, "read": {...}, "retry_consulted":
// n, "retry_decisions": n, "seconds": s}, where retry_decisions counts the
// decisions to retry; in shed mode also "surfaced", what each refusal threw.
// Exits 1 on anything unexpected.
'use strict';
const cassandra = require('cassandra-driver');

const ks = process.env.LIMIT_KEYSPACE || 'cqlguard_limits';
const table = process.env.LIMIT_TABLE || 'hot';
const key = Number(process.env.LIMIT_KEY || 60);
const n = Number(process.env.LIMIT_N || 50);
const expect = process.env.LIMIT_EXPECT || 'config_error';
const clientClass = process.env.LIMIT_CLASS || 'default';
if (!['config_error', 'class_budget', 'shed'].includes(expect)) {
  console.error(`LIMIT_EXPECT=${expect}: the Node.js driver sees only config_error, class_budget or shed`);
  process.exit(2);
}
const shed = expect === 'shed';

function fail(msg) {
  console.log(`FAIL ${msg}`);
  process.exit(1);
}

// RecordingRetryPolicy records each decision the driver asks for. It never
// retries, unless obey is set: then it decides what the default policy (its
// parent) does.
class RecordingRetryPolicy extends cassandra.policies.retry.RetryPolicy {
  constructor(obey) {
    super();
    this.obey = obey;
    this.decisions = [];
  }

  record(kind, byDefault) {
    const d = this.obey ? byDefault() : this.rethrowResult();
    this.decisions.push({ kind, decision: d.decision });
    return d;
  }

  onReadTimeout(...args) { return this.record('read_timeout', () => super.onReadTimeout(...args)); }

  onWriteTimeout(...args) { return this.record('write_timeout', () => super.onWriteTimeout(...args)); }

  onUnavailable(...args) { return this.record('unavailable', () => super.onUnavailable(...args)); }

  onRequestError(info, consistency, err) {
    return this.record(`request_error: ${err && err.message}`, () => super.onRequestError(info, consistency, err));
  }

  // retries returns how many of the decisions were to retry.
  retries() {
    return this.decisions.filter((d) => d.decision === cassandra.policies.retry.RetryPolicy.retryDecision.retry).length;
  }
}

// checkShed fails unless e is a shed request's Overloaded with message want,
// alone or as the error of every host a NoHostAvailableError tried, and
// returns what was thrown.
function checkShed(e, op, want) {
  let what = e && e.name;
  let errors = [e];
  if (e instanceof cassandra.errors.NoHostAvailableError) {
    errors = Object.values(e.innerErrors || {});
    what += `(${errors.map((err) => err && err.name).join(', ')})`;
  }
  if (errors.length === 0) fail(`${op}: ${what}: ${e.message}; want a ResponseError of code overloaded`);
  for (const err of errors) {
    if (!(err instanceof cassandra.errors.ResponseError) || err.code !== cassandra.types.responseErrorCodes.overloaded) {
      fail(`${op}: ${err && err.name} code ${err && err.code}: ${err && err.message}; want a ResponseError of code overloaded`);
    }
    if (err.message !== want) fail(`${op}: message ${err.message}; want "${want}"`);
  }
  return what;
}

async function main() {
  const retry = new RecordingRetryPolicy(shed);
  // Shedding is checked with the driver's defaults; the other refusals with
  // idempotent statements, so that any error the driver might retry reaches
  // the recording policy.
  const queryOptions = { consistency: cassandra.types.consistencies.one };
  if (!shed) queryOptions.isIdempotent = true;
  const client = new cassandra.Client({
    contactPoints: [process.env.CQL_HOST || '127.0.0.1'],
    protocolOptions: { port: Number(process.env.CQL_PORT || 9042) },
    localDataCenter: process.env.CQL_DC || 'datacenter1',
    authProvider: new cassandra.auth.PlainTextAuthProvider(
      process.env.CQL_USER || 'cassandra', process.env.CQL_PASSWORD || 'cassandra'),
    socketOptions: { connectTimeout: 10000, readTimeout: 20000 },
    policies: { retry },
    queryOptions,
  });
  await client.connect();

  const insert = `INSERT INTO ${ks}.${table} (k, c) VALUES (?, ?)`;
  // The key inline, so that a read is one QUERY with no values to type.
  const select = `SELECT c FROM ${ks}.${table} WHERE k = ${key} LIMIT 1`;
  const messages = {
    class_budget: () => `client class ${clientClass} is over its budget`,
    shed: () => `cqlguard: request shed, tier ${process.env.LIMIT_TIER || 1}, while the node ${process.env.LIMIT_NODE || '127.0.0.2:9042'} is slow (shedding); retry later`,
    config_error: (op) => `Per-partition rate limit reached for ${op} in table ${ks}.${table}, rejected by coordinator`,
  };
  const message = messages[expect];
  const surfaced = new Set();
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
        if (shed) {
          surfaced.add(checkShed(e, op, message(op)));
        } else {
          if (!(e instanceof cassandra.errors.ResponseError) || e.code !== cassandra.types.responseErrorCodes.configError) {
            fail(`${op}: ${e && e.name} code ${e && e.code}: ${e && e.message}; want a ResponseError of code configError`);
          }
          if (!e.message.includes(message(op))) {
            fail(`${op}: message ${e.message}; want "${message(op)}"`);
          }
        }
        if (refused === 0) {
          const code = e.code === undefined ? '' : ` code 0x${e.code.toString(16)}`;
          console.log(`refused ${op}: ${e.name}${code}: ${e.message}`);
        }
        refused++;
      }
    }
    result[op] = { accepted, refused };
  }
  result.retry_consulted = retry.decisions.length;
  result.retry_decisions = retry.retries();
  if (shed) result.surfaced = [...surfaced].sort().join(' | ');
  result.seconds = Number(process.hrtime.bigint() - start) / 1e9;
  await client.shutdown();
  console.log(JSON.stringify(result));
  if (shed) {
    if (surfaced.size !== 1) fail(`refusals surfaced as ${result.surfaced}; want one kind`);
    for (const op of ['write', 'read']) {
      if (result[op].accepted !== 0) fail(`${result[op].accepted} ${op}s were not shed`);
    }
  } else if (retry.decisions.length) {
    fail(`the driver consulted its retry policy: ${retry.decisions.map((d) => d.kind).join(', ')}`);
  }
  for (const op of ['write', 'read']) {
    if (result[op].refused === 0) fail(`no ${op} was refused`);
  }
}

main().catch((e) => fail(`${e && e.name}: ${e && e.message}`));
