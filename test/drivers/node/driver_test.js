// Exercises a CQL endpoint with the DataStax Node.js driver, as a user would,
// and checks that the driver sees only the expected hosts (the proxy).
//
// Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD, CQL_KEYSPACE,
// EXPECT_HOSTS (comma-separated). Prints one line per step and a closing
// "N passed, N failed" line.
'use strict';
const assert = require('node:assert/strict');
const cassandra = require('cassandra-driver');

const host = process.env.CQL_HOST || '127.0.0.1';
const port = Number(process.env.CQL_PORT || 9042);
const ks = process.env.CQL_KEYSPACE || 'cqlguard_node';
const expect = (process.env.EXPECT_HOSTS || host).split(',').sort();

const client = new cassandra.Client({
  contactPoints: [host],
  protocolOptions: { port },
  localDataCenter: process.env.CQL_DC || 'datacenter1',
  authProvider: new cassandra.auth.PlainTextAuthProvider(
    process.env.CQL_USER || 'cassandra', process.env.CQL_PASSWORD || 'cassandra'),
  socketOptions: { readTimeout: 30000 },
});

let passed = 0;
let failed = 0;

function finish() {
  console.log(`node-driver: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

async function step(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}`);
    console.log(e && e.stack ? e.stack : e);
    await client.shutdown().catch(() => {});
    finish();
  }
}

const addressesOf = (hosts) => hosts.map((h) => h.address.replace(/:\d+$/, '')).sort();

async function main() {
  await step("connect; the driver's view of the cluster is the expected hosts", async () => {
    await client.connect();
    assert.deepEqual(addressesOf(client.hosts.values()), expect);
  });

  await step('create keyspace and table', async () => {
    await client.execute(`DROP KEYSPACE IF EXISTS ${ks}`);
    await client.execute(`CREATE KEYSPACE ${ks} WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}`);
    await client.execute(`CREATE TABLE ${ks}.t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))`);
  });

  await step('insert and select: inline literals and prepared statements', async () => {
    await client.execute(`INSERT INTO ${ks}.t (a, b, c, v) VALUES (1, 'x', 1, 'inline')`);
    let rs = await client.execute(`SELECT v FROM ${ks}.t WHERE a = 1 AND b = 'x' AND c = 1`);
    assert.equal(rs.first().v, 'inline');
    await client.execute(`INSERT INTO ${ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)`, [1, 'x', 2, 'prepared'], { prepare: true });
    rs = await client.execute(`SELECT v FROM ${ks}.t WHERE a = ? AND b = ? AND c = ?`, [1, 'x', 2], { prepare: true });
    assert.equal(rs.first().v, 'prepared');
  });

  await step('batches, unlogged and logged', async () => {
    for (const [a, logged] of [[2, false], [3, true]]) {
      const queries = [];
      for (let c = 0; c < 5; c++) {
        queries.push({ query: `INSERT INTO ${ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)`, params: [a, 'batch', c, `b${c}`] });
      }
      await client.batch(queries, { prepare: true, logged });
      const rs = await client.execute(`SELECT count(*) AS n FROM ${ks}.t WHERE a = ${a} AND b = 'batch'`);
      assert.equal(Number(rs.first().n), 5, `batch logged=${logged}`);
    }
  });

  await step('paging over 6,000 rows', async () => {
    const params = [];
    for (let c = 0; c < 6000; c++) params.push([c]);
    await cassandra.concurrent.executeConcurrent(client,
      `INSERT INTO ${ks}.t (a, b, c, v) VALUES (9, 'paged', ?, 'p')`, params, { concurrencyLevel: 64, prepare: true });
    const got = [];
    for await (const row of client.stream(`SELECT c FROM ${ks}.t WHERE a = 9 AND b = 'paged'`, [], { fetchSize: 500, prepare: true })) {
      got.push(row.c);
    }
    assert.equal(got.length, 6000);
    got.forEach((c, i) => assert.equal(c, i, `row ${i}`));
  });

  await step('USE keyspace, then an unqualified query', async () => {
    await client.execute(`USE ${ks}`);
    const rs = await client.execute('SELECT v FROM t WHERE a = 1 AND b = \'x\' AND c = 1');
    assert.equal(rs.first().v, 'inline');
  });

  await step('errors reach the driver unchanged', async () => {
    await assert.rejects(client.execute(`SELECT * FROM ${ks}.missing_table`), (e) => {
      assert.equal(e.code, cassandra.types.responseErrorCodes.invalid);
      assert.match(e.message, /missing_table/);
      return true;
    });
    await assert.rejects(client.execute('SELEC nonsense'), (e) => {
      assert.equal(e.code, cassandra.types.responseErrorCodes.syntaxError);
      return true;
    });
  });

  await step('drop keyspace', async () => {
    await client.execute(`DROP KEYSPACE ${ks}`);
  });

  await step('the driver holds connections only to the expected hosts', async () => {
    const state = client.getState();
    assert.deepEqual(addressesOf(state.getConnectedHosts()), expect);
    assert.deepEqual(addressesOf(client.hosts.values()), expect);
    await client.shutdown();
  });

  finish();
}

main();
