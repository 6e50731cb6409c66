// Exercises a CQL endpoint with the DataStax Node.js driver, as a user would,
// and checks what a transparent proxy must preserve: the driver sees only the
// expected hosts (the proxy), results, paging, keyspace switching and errors
// come through unchanged.
//
// Environment: CQL_HOST (127.0.0.1), CQL_PORT (9042), CQL_USER / CQL_PASSWORD
// (cassandra / cassandra), CQL_KEYSPACE (cqlguard_node; dropped and recreated),
// EXPECT_HOSTS (comma-separated, default CQL_HOST), CQL_PROTOCOL (optional
// maximum protocol version: 3 or 4; this driver does not speak v5 to Cassandra),
// CQL_DC (local data center, datacenter1), CQL_TEST_TIMEOUT (seconds, 300).
//
// Prints one line per step, the failing step's error, and a closing
// "node-driver: N passed, N failed" line; exits 1 on the first failure.
'use strict';
const assert = require('node:assert/strict');
const cassandra = require('cassandra-driver');

const host = process.env.CQL_HOST || '127.0.0.1';
const port = Number(process.env.CQL_PORT || 9042);
const ks = process.env.CQL_KEYSPACE || 'cqlguard_node';
const expect = (process.env.EXPECT_HOSTS || host).split(',').map((h) => h.trim()).filter(Boolean).sort();
const protocol = process.env.CQL_PROTOCOL ? Number(process.env.CQL_PROTOCOL) : 0;
const timeout = Number(process.env.CQL_TEST_TIMEOUT || 300);
const ROWS = 6000;
const FETCH = 500;
const { responseErrorCodes } = cassandra.types;

const protocolOptions = { port };
if (protocol) protocolOptions.maxVersion = protocol;
let client;
try {
  client = new cassandra.Client({
    contactPoints: [host],
    protocolOptions,
    localDataCenter: process.env.CQL_DC || 'datacenter1',
    authProvider: new cassandra.auth.PlainTextAuthProvider(
      process.env.CQL_USER || 'cassandra', process.env.CQL_PASSWORD || 'cassandra'),
    socketOptions: { connectTimeout: 10000, readTimeout: 30000 },
  });
} catch (e) {
  // e.g. CQL_PROTOCOL=5: the driver accepts only versions it speaks (up to 4).
  console.log(`FAIL 1. connect: client options rejected (CQL_PROTOCOL=${process.env.CQL_PROTOCOL || ''}): ${e.message}`);
  console.log('node-driver: 0 passed, 1 failed');
  process.exit(1);
}

let passed = 0;
let failed = 0;
const started = Date.now();

function finish() {
  console.log(`node-driver: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

setTimeout(() => {
  failed++;
  console.log(`FAIL the whole run took more than ${timeout}s (CQL_TEST_TIMEOUT)`);
  finish();
}, timeout * 1000).unref();

async function step(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: ${e && e.name}: ${e && e.message}`);
    console.log(e && e.stack ? e.stack : e);
    await Promise.race([client.shutdown().catch(() => {}), new Promise((r) => setTimeout(r, 2000))]);
    finish();
  }
  passed++;
  console.log(`ok   ${name} (${((Date.now() - t0) / 1000).toFixed(2)}s)`);
}

// Host addresses are "ip:port".
const addressesOf = (hosts) => hosts.map((h) => h.address.replace(/:\d+$/, '')).sort();

// expectError runs fn, which must fail with a ResponseError of the given code
// whose message matches re.
async function expectError(what, fn, code, re) {
  let err;
  try {
    await fn();
  } catch (e) {
    err = e;
  }
  assert.ok(err, `no error for ${what}`);
  assert.ok(err instanceof cassandra.errors.ResponseError,
    `${what}: got ${err.name} (${err.message}), want a ResponseError`);
  assert.equal(err.code, code,
    `${what}: code 0x${err.code.toString(16)} (${err.message}), want 0x${code.toString(16)}`);
  assert.match(err.message, re, `${what}: message`);
}

async function main() {
  await step("1. connect; the driver's view of the cluster is exactly EXPECT_HOSTS", async () => {
    await client.connect();
    assert.deepEqual(addressesOf(client.hosts.values()), expect, 'client.hosts');
    const version = client.controlConnection.protocolVersion;
    if (protocol) assert.equal(version, protocol, 'negotiated protocol version');
    console.log(`     protocol v${version}, ${client.hosts.length} host(s)`);
  });

  await step('2. create keyspace (SimpleStrategy rf 1) and table (composite partition key, clustering column)', async () => {
    await client.execute(`DROP KEYSPACE IF EXISTS ${ks}`);
    await client.execute(`CREATE KEYSPACE ${ks} WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`);
    await client.execute(`CREATE TABLE ${ks}.t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))`);
    const table = await client.metadata.getTable(ks, 't');
    assert.deepEqual(table.partitionKeys.map((c) => c.name), ['a', 'b']);
    assert.deepEqual(table.clusteringKeys.map((c) => c.name), ['c']);
  });

  await step('3. insert and select: inline literals and prepared statements', async () => {
    await client.execute(`INSERT INTO ${ks}.t (a, b, c, v) VALUES (1, 'x', 1, 'inline')`);
    let rs = await client.execute(`SELECT a, b, c, v FROM ${ks}.t WHERE a = 1 AND b = 'x' AND c = 1`);
    assert.deepEqual(rs.rows.map((r) => [r.a, r.b, r.c, r.v]), [[1, 'x', 1, 'inline']]);
    const ins = `INSERT INTO ${ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)`;
    await client.execute(ins, [1, 'x', 2, 'prepared'], { prepare: true });
    await client.execute(ins, [1, 'x', 3, null], { prepare: true });
    rs = await client.execute(`SELECT c, v FROM ${ks}.t WHERE a = ? AND b = ?`, [1, 'x'], { prepare: true });
    assert.deepEqual(rs.rows.map((r) => [r.c, r.v]), [[1, 'inline'], [2, 'prepared'], [3, null]]);
    // bound values without PREPARE (QUERY with values), with type hints
    rs = await client.execute(`SELECT v FROM ${ks}.t WHERE a = ? AND b = ? AND c = ?`, [1, 'x', 2],
      { hints: ['int', 'text', 'int'] });
    assert.equal(rs.first().v, 'prepared');
  });

  await step('4. batches, unlogged and logged, read back', async () => {
    for (const [a, logged] of [[2, false], [3, true]]) {
      const queries = [];
      for (let c = 0; c < 5; c++) {
        queries.push({ query: `INSERT INTO ${ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)`, params: [a, 'batch', c, `b${c}`] });
      }
      await client.batch(queries, { prepare: true, logged });
      // and an all-literal batch, not prepared
      await client.batch([`INSERT INTO ${ks}.t (a, b, c, v) VALUES (${a}, 'batch', 5, 'inline')`], { logged });
      const rs = await client.execute(`SELECT c, v FROM ${ks}.t WHERE a = ${a} AND b = 'batch'`);
      const want = [0, 1, 2, 3, 4].map((c) => [c, `b${c}`]).concat([[5, 'inline']]);
      assert.deepEqual(rs.rows.map((r) => [r.c, r.v]), want, `batch logged=${logged}`);
    }
  });

  await step(`5. paging: ${ROWS} rows in one partition, fetch size ${FETCH}`, async () => {
    const params = [];
    for (let c = 0; c < ROWS; c++) params.push([c, `v${c}`]);
    const res = await cassandra.concurrent.executeConcurrent(client,
      `INSERT INTO ${ks}.t (a, b, c, v) VALUES (9, 'paged', ?, ?)`, params, { concurrencyLevel: 64, prepare: true });
    assert.equal(res.errors.length, 0, 'insert errors');
    const query = `SELECT c, v FROM ${ks}.t WHERE a = 9 AND b = 'paged'`;
    const want = params.map(([c, v]) => `${c}:${v}`);
    for (const prepare of [false, true]) {
      // page by page with the paging state, as a web app does
      const got = [];
      let pageState;
      let pages = 0;
      do {
        const rs = await client.execute(query, [], { prepare, fetchSize: FETCH, pageState });
        assert.ok(rs.rows.length <= FETCH, `a page of ${rs.rows.length} rows`);
        for (const r of rs.rows) got.push(`${r.c}:${r.v}`);
        pageState = rs.pageState;
        pages++;
      } while (pageState);
      assert.equal(got.length, ROWS, `prepare=${prepare}: ${got.length} rows over ${pages} pages`);
      assert.deepEqual(got, want, `prepare=${prepare}: rows out of order or wrong`);
      assert.ok(pages >= ROWS / FETCH, `prepare=${prepare}: ${pages} pages`);
    }
    // automatic paging (the driver fetches the next pages itself)
    let n = 0;
    for await (const row of client.stream(query, [], { prepare: true, fetchSize: FETCH })) {
      assert.equal(row.c, n, `streamed row ${n}`);
      n++;
    }
    assert.equal(n, ROWS, 'streamed rows');
    const rs = await client.execute(`SELECT count(*) AS n FROM ${ks}.t WHERE a = 9 AND b = 'paged'`);
    assert.equal(Number(rs.first().n), ROWS, 'count(*)');
  });

  await step('6. USE keyspace, then unqualified queries (simple and prepared)', async () => {
    await client.execute(`USE ${ks}`);
    let rs = await client.execute('SELECT v FROM t WHERE a = 1 AND b = \'x\' AND c = 1');
    assert.equal(rs.first().v, 'inline');
    rs = await client.execute('SELECT v FROM t WHERE a = ? AND b = ? AND c = ?', [1, 'x', 2], { prepare: true });
    assert.equal(rs.first().v, 'prepared');
  });

  await step('7. errors reach the driver unchanged', async () => {
    await expectError('SELECT from a missing table', () => client.execute(`SELECT * FROM ${ks}.missing_table`),
      responseErrorCodes.invalid, /missing_table/);
    await expectError('PREPARE against a missing table',
      () => client.execute(`SELECT * FROM ${ks}.missing_table WHERE a = ?`, [1], { prepare: true }),
      responseErrorCodes.invalid, /missing_table/);
    await expectError('a syntax error', () => client.execute('SELEC nonsense'),
      responseErrorCodes.syntaxError, /SELEC/);
    // the client still works after errors
    const rs = await client.execute('SELECT v FROM t WHERE a = 1 AND b = \'x\' AND c = 1');
    assert.equal(rs.first().v, 'inline');
  });

  await step('8. drop keyspace', async () => {
    await client.execute(`DROP KEYSPACE ${ks}`);
  });

  await step('9. after all steps the driver has open connections only to EXPECT_HOSTS; shut down', async () => {
    const state = client.getState();
    const connected = state.getConnectedHosts();
    assert.deepEqual(addressesOf(connected), expect, 'getState().getConnectedHosts()');
    for (const h of connected) assert.ok(state.getOpenConnections(h) >= 1, `no open connection to ${h.address}`);
    assert.deepEqual(addressesOf(client.hosts.values()), expect, 'client.hosts');
    await client.shutdown();
  });

  console.log(`     total ${((Date.now() - started) / 1000).toFixed(2)}s`);
  finish();
}

main();
