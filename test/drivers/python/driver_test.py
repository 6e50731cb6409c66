"""Exercises a CQL endpoint with the DataStax Python driver, as a user would,
and checks that the driver sees only the expected hosts (the proxy).

Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD, CQL_KEYSPACE,
EXPECT_HOSTS (comma-separated), CQL_PROTOCOL, CQL_COMPRESSION (none|lz4|snappy).
Prints one line per step and a closing "N passed, N failed" line.
"""
import os
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor

from cassandra import InvalidRequest
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.protocol import SyntaxException
from cassandra.query import BatchStatement, BatchType, SimpleStatement

host = os.environ.get("CQL_HOST", "127.0.0.1")
port = int(os.environ.get("CQL_PORT", "9042"))
ks = os.environ.get("CQL_KEYSPACE", "cqlguard_py")
expect = sorted(os.environ.get("EXPECT_HOSTS", host).split(","))
protocol = os.environ.get("CQL_PROTOCOL")
compression = os.environ.get("CQL_COMPRESSION", "none")

passed, failed = 0, 0


def step(name):
    def run(fn):
        global passed, failed
        try:
            fn()
            passed += 1
            print(f"ok   {name}", flush=True)
        except Exception:
            failed += 1
            print(f"FAIL {name}", flush=True)
            traceback.print_exc()
            finish()
        return fn
    return run


def finish():
    print(f"python-driver: {passed} passed, {failed} failed", flush=True)
    sys.exit(1 if failed else 0)


kwargs = dict(contact_points=[host], port=port,
              auth_provider=PlainTextAuthProvider(os.environ.get("CQL_USER", "cassandra"),
                                                  os.environ.get("CQL_PASSWORD", "cassandra")),
              compression={"none": False, "lz4": "lz4", "snappy": "snappy"}[compression])
if protocol:
    kwargs["protocol_version"] = int(protocol)
cluster = Cluster(**kwargs)
session = None


@step("connect; the driver's view of the cluster is the expected hosts")
def _():
    global session
    session = cluster.connect()
    session.default_timeout = 30
    hosts = sorted(h.address for h in cluster.metadata.all_hosts())
    assert hosts == expect, f"cluster metadata lists {hosts}, want {expect}"
    if protocol:
        assert cluster.protocol_version == int(protocol), f"negotiated v{cluster.protocol_version}"


@step("create keyspace and table")
def _():
    session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
    session.execute(f"CREATE KEYSPACE {ks} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute(f"CREATE TABLE {ks}.t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))")


@step("insert and select: inline literals and prepared statements")
def _():
    session.execute(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (1, 'x', 1, 'inline')")
    row = session.execute(f"SELECT v FROM {ks}.t WHERE a = 1 AND b = 'x' AND c = 1").one()
    assert row.v == "inline", row
    ins = session.prepare(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)")
    session.execute(ins, (1, "x", 2, "prepared"))
    sel = session.prepare(f"SELECT v FROM {ks}.t WHERE a = ? AND b = ? AND c = ?")
    assert session.execute(sel, (1, "x", 2)).one().v == "prepared"


@step("batches, unlogged and logged")
def _():
    ins = session.prepare(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)")
    for a, typ in ((2, BatchType.UNLOGGED), (3, BatchType.LOGGED)):
        batch = BatchStatement(batch_type=typ)
        for c in range(5):
            batch.add(ins, (a, "batch", c, f"b{c}"))
        session.execute(batch)
        n = session.execute(f"SELECT count(*) FROM {ks}.t WHERE a = {a} AND b = 'batch'").one()[0]
        assert n == 5, f"batch {typ}: {n} rows"


@step("paging over 6,000 rows")
def _():
    ins = session.prepare(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (9, 'paged', ?, 'p')")
    results = execute_concurrent_with_args(session, ins, [(c,) for c in range(6000)], concurrency=64)
    assert all(ok for ok, _ in results), "some inserts failed"
    stmt = SimpleStatement(f"SELECT c FROM {ks}.t WHERE a = 9 AND b = 'paged'", fetch_size=500)
    rs = session.execute(stmt)
    got = [r.c for r in rs]
    assert got == list(range(6000)), f"{len(got)} rows, in order: {got == sorted(got)}"


@step("USE keyspace, then an unqualified query")
def _():
    session.execute(f"USE {ks}")
    assert session.execute("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1").one().v == "inline"


@step("errors reach the driver unchanged")
def _():
    try:
        session.execute(f"SELECT * FROM {ks}.missing_table")
        raise AssertionError("no error for a missing table")
    except InvalidRequest as e:
        assert "missing_table" in str(e), str(e)
    try:
        session.execute("SELEC nonsense")
        raise AssertionError("no error for a syntax error")
    except SyntaxException:
        pass


@step("drop keyspace")
def _():
    session.execute(f"DROP KEYSPACE {ks}")


@step("the driver holds connections only to the expected hosts")
def _():
    pools = sorted(h.address for h in session.get_pool_state().keys())
    assert pools == expect, f"connection pools to {pools}, want {expect}"
    cluster.shutdown()


finish()
