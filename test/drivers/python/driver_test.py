"""Exercises a CQL endpoint with the DataStax Python driver, as a user would,
and checks what a transparent proxy must preserve: the driver sees only the
expected hosts (the proxy), results, paging, keyspace switching and errors
come through unchanged.

Environment: CQL_HOST (127.0.0.1), CQL_PORT (9042), CQL_USER / CQL_PASSWORD
(cassandra / cassandra), CQL_KEYSPACE (cqlguard_py; dropped and recreated),
EXPECT_HOSTS (comma-separated, default CQL_HOST), CQL_PROTOCOL (optional:
3, 4, 5), CQL_COMPRESSION (none|lz4|snappy; snappy on v5 is turned off by the
driver itself), CQL_TEST_TIMEOUT (seconds for the whole run, 300).

Prints one line per step, the failing step's error, and a closing
"python-driver: N passed, N failed" line; exits 1 on the first failure.
"""
import os
import signal
import sys
import time
import traceback

from cassandra import InvalidRequest
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
from cassandra.concurrent import execute_concurrent_with_args
from cassandra.protocol import SyntaxException
from cassandra.query import BatchStatement, BatchType, SimpleStatement

host = os.environ.get("CQL_HOST", "127.0.0.1")
port = int(os.environ.get("CQL_PORT", "9042"))
ks = os.environ.get("CQL_KEYSPACE", "cqlguard_py")
expect = sorted(h.strip() for h in os.environ.get("EXPECT_HOSTS", host).split(",") if h.strip())
protocol = int(os.environ["CQL_PROTOCOL"]) if os.environ.get("CQL_PROTOCOL") else None
compression = os.environ.get("CQL_COMPRESSION", "none") or "none"
timeout = int(os.environ.get("CQL_TEST_TIMEOUT", "300"))

ROWS, FETCH = 6000, 500
passed, failed = 0, 0
started = time.monotonic()


def finish():
    print(f"python-driver: {passed} passed, {failed} failed", flush=True)
    # os._exit: a stuck driver thread must not keep the process alive.
    os._exit(1 if failed else 0)


def on_timeout(*_):
    global failed
    failed += 1
    print(f"FAIL the whole run took more than {timeout}s (CQL_TEST_TIMEOUT)", flush=True)
    finish()


signal.signal(signal.SIGALRM, on_timeout)
signal.alarm(timeout)


def step(name):
    def run(fn):
        global passed, failed
        t0 = time.monotonic()
        try:
            fn()
        except Exception as e:
            failed += 1
            print(f"FAIL {name}: {type(e).__name__}: {e}", flush=True)
            traceback.print_exc()
            finish()
        passed += 1
        print(f"ok   {name} ({time.monotonic() - t0:.2f}s)", flush=True)
        return fn
    return run


if compression not in ("none", "lz4", "snappy"):
    print(f"CQL_COMPRESSION={compression!r}: want none, lz4 or snappy", file=sys.stderr)
    sys.exit(2)
kwargs = dict(contact_points=[host], port=port, connect_timeout=10,
              auth_provider=PlainTextAuthProvider(os.environ.get("CQL_USER", "cassandra"),
                                                  os.environ.get("CQL_PASSWORD", "cassandra")),
              compression=False if compression == "none" else compression)
if protocol:
    kwargs["protocol_version"] = protocol
cluster = Cluster(**kwargs)
session = None


def open_connections():
    """The driver's open connections: the control connection and the pools'."""
    conns = [cluster.control_connection._connection]
    for pool in session.get_pools():
        conns += [c for c in [getattr(pool, "_connection", None)] + list(getattr(pool, "_connections", [])) if c]
    return [c for c in conns if c and not c.is_closed]


@step("1. connect; the driver's view of the cluster is exactly EXPECT_HOSTS")
def _():
    global session
    session = cluster.connect()
    session.default_timeout = 30
    hosts = sorted(h.address for h in cluster.metadata.all_hosts())
    assert hosts == expect, f"cluster.metadata.all_hosts() lists {hosts}, want {expect}"
    if protocol:
        assert cluster.protocol_version == protocol, \
            f"negotiated protocol v{cluster.protocol_version}, want v{protocol}"
    conns = open_connections()
    want_compression = compression != "none" and not (compression == "snappy" and cluster.protocol_version >= 5)
    for c in conns:
        assert bool(c.compressor) == want_compression, \
            f"connection to {c.endpoint}: compressor {c.compressor}, want compression={want_compression}"
    note = "" if want_compression or compression == "none" else " (the driver turns snappy off on v5)"
    print(f"     protocol v{cluster.protocol_version}, compression {compression}{note}, "
          f"{len(conns)} connections", flush=True)


@step("2. create keyspace (SimpleStrategy rf 1) and table (composite partition key, clustering column)")
def _():
    session.execute(f"DROP KEYSPACE IF EXISTS {ks}")
    session.execute(f"CREATE KEYSPACE {ks} WITH replication = "
                    "{'class': 'SimpleStrategy', 'replication_factor': 1}")
    session.execute(f"CREATE TABLE {ks}.t (a int, b text, c int, v text, PRIMARY KEY ((a, b), c))")
    assert cluster.metadata.keyspaces[ks].tables["t"].partition_key[1].name == "b"


@step("3. insert and select: inline literals and prepared statements")
def _():
    session.execute(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (1, 'x', 1, 'inline')")
    rows = list(session.execute(f"SELECT a, b, c, v FROM {ks}.t WHERE a = 1 AND b = 'x' AND c = 1"))
    assert [tuple(r) for r in rows] == [(1, "x", 1, "inline")], rows
    ins = session.prepare(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)")
    session.execute(ins, (1, "x", 2, "prepared"))
    session.execute(ins, (1, "x", 3, None))
    sel = session.prepare(f"SELECT c, v FROM {ks}.t WHERE a = ? AND b = ?")
    got = [tuple(r) for r in session.execute(sel, (1, "x"))]
    assert got == [(1, "inline"), (2, "prepared"), (3, None)], got
    # a SimpleStatement with bound values (QUERY with values, no PREPARE)
    got = session.execute(f"SELECT v FROM {ks}.t WHERE a = %s AND b = %s AND c = %s", (1, "x", 2)).one()
    assert got.v == "prepared", got


@step("4. batches, unlogged and logged, read back")
def _():
    ins = session.prepare(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (?, ?, ?, ?)")
    for a, typ in ((2, BatchType.UNLOGGED), (3, BatchType.LOGGED)):
        batch = BatchStatement(batch_type=typ)
        for c in range(5):
            batch.add(ins, (a, "batch", c, f"b{c}"))
        # a simple statement inside the batch too
        batch.add(SimpleStatement(f"INSERT INTO {ks}.t (a, b, c, v) VALUES ({a}, 'batch', 5, 'inline')"))
        session.execute(batch)
        got = [tuple(r) for r in session.execute(f"SELECT c, v FROM {ks}.t WHERE a = {a} AND b = 'batch'")]
        want = [(c, f"b{c}") for c in range(5)] + [(5, "inline")]
        assert got == want, f"{typ} batch read back {got}"


@step(f"5. paging: {ROWS} rows in one partition, fetch size {FETCH}")
def _():
    ins = session.prepare(f"INSERT INTO {ks}.t (a, b, c, v) VALUES (9, 'paged', ?, ?)")
    results = execute_concurrent_with_args(session, ins, [(c, f"v{c}") for c in range(ROWS)],
                                           concurrency=64, raise_on_first_error=True)
    assert len(results) == ROWS and all(ok for ok, _ in results), "some inserts failed"
    query = f"SELECT c, v FROM {ks}.t WHERE a = 9 AND b = 'paged'"
    for label, stmt in (("simple", SimpleStatement(query, fetch_size=FETCH)),
                        ("prepared", session.prepare(query))):
        if label == "prepared":
            stmt.fetch_size = FETCH
        rs = session.execute(stmt)
        got, pages = [], 0
        while True:
            page = rs.current_rows
            assert len(page) <= FETCH, f"{label}: a page of {len(page)} rows"
            got += [(r.c, r.v) for r in page]
            pages += 1
            if not rs.has_more_pages:
                break
            rs.fetch_next_page()
        assert len(got) == ROWS, f"{label}: {len(got)} rows over {pages} pages, want {ROWS}"
        assert got == [(c, f"v{c}") for c in range(ROWS)], f"{label}: rows out of order or wrong"
        assert pages >= ROWS // FETCH, f"{label}: {pages} pages"
    # resuming from a saved paging state in a fresh request, as a web app does
    rs = session.execute(SimpleStatement(query, fetch_size=FETCH))
    state = rs.paging_state
    assert state, "no paging state after the first page"
    rs2 = session.execute(SimpleStatement(query, fetch_size=FETCH), paging_state=state)
    assert [r.c for r in rs2.current_rows] == list(range(FETCH, 2 * FETCH)), "resumed page is wrong"
    # the same count, server side
    n = session.execute(f"SELECT count(*) FROM {ks}.t WHERE a = 9 AND b = 'paged'").one()[0]
    assert n == ROWS, f"count(*) = {n}"


@step("6. USE keyspace, then unqualified queries (simple and prepared)")
def _():
    session.execute(f"USE {ks}")
    assert session.execute("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1").one().v == "inline"
    sel = session.prepare("SELECT v FROM t WHERE a = ? AND b = ? AND c = ?")
    assert session.execute(sel, (1, "x", 2)).one().v == "prepared"


@step("7. errors reach the driver unchanged")
def _():
    try:
        session.execute(f"SELECT * FROM {ks}.missing_table")
        raise AssertionError("no error for a missing table")
    except InvalidRequest as e:
        assert "missing_table" in str(e), f"message does not name the table: {e}"
    try:
        session.prepare(f"SELECT * FROM {ks}.missing_table WHERE a = ?")
        raise AssertionError("no error preparing against a missing table")
    except InvalidRequest as e:
        assert "missing_table" in str(e), f"message does not name the table: {e}"
    try:
        session.execute("SELEC nonsense")
        raise AssertionError("no error for a syntax error")
    except SyntaxException as e:
        assert "SELEC" in str(e), f"syntax error message: {e}"
    # the session still works after errors
    assert session.execute("SELECT v FROM t WHERE a = 1 AND b = 'x' AND c = 1").one().v == "inline"


@step("8. drop keyspace")
def _():
    session.execute(f"DROP KEYSPACE {ks}")
    assert ks not in cluster.metadata.keyspaces, "keyspace still in the driver's metadata"


@step("9. after all steps the driver has open connections only to EXPECT_HOSTS; shut down")
def _():
    state = session.get_pool_state()
    pools = sorted(h.address for h in state)
    assert pools == expect, f"connection pools to {pools}, want {expect}"
    for h, s in state.items():
        assert s.get("open_count", 1) >= 1 and not s.get("shutdown"), f"pool to {h.address}: {s}"
    endpoints = sorted({c.endpoint.address for c in open_connections()})
    assert endpoints == expect, f"open connections to {endpoints}, want {expect}"
    hosts = sorted(h.address for h in cluster.metadata.all_hosts())
    assert hosts == expect, f"cluster.metadata.all_hosts() now lists {hosts}, want {expect}"
    cluster.shutdown()


print(f"     total {time.monotonic() - started:.2f}s", flush=True)
finish()
