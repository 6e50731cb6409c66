"""Reads a hot partition through a cqlguard that serves hot reads (coalescing
and a short cache) with the DataStax Python driver, and checks that every
answer decodes as a direct read's does, and that a client reads back each of
its writes while others read the same row.

1. Reference: SELECT * FROM kv WHERE k = 1 (fetch size 10) and k = 2 (fetch
   size 100, only tombstones: Cassandra warns) read directly from the node,
   every page, as a simple and as a prepared statement: each page's rows,
   paging state, column names and types, and warnings.
2. The same reads through the proxy, 200 in flight at once with
   execute_async in several rounds, each page of all of them sent together
   (half by the future's start_fetching_next_page, half by a new
   execute_async with the paging state), then from several threads at once
   with execute; every page must equal the reference's page.
3. Read-your-writes: threads keep reading SELECT v FROM kv WHERE k = 1 AND
   c = 0 (prepared) through the proxy while a writer updates v 200 times,
   each time reading it back with the same statement: a read back that does
   not give the value just written is stale.

Environment: CQL_HOST / CQL_PORT (the proxy), DIRECT_HOST / DIRECT_PORT (the
node itself), CQL_USER / CQL_PASSWORD (cassandra / cassandra), CQL_PROTOCOL
(optional: 4, 5), CQL_COMPRESSION (none|lz4|snappy), HOT_KEYSPACE
(cqlguard_hot; the table kv must exist, filled as described), HOT_ROUNDS
(rounds of 200 concurrent reads, 5), CQL_TEST_TIMEOUT (seconds, 300).

Prints one JSON line: {"reads": n, "pages": n, "warnings": n, "writes": n,
"stale": n, ...}; exits 1 with a FAIL line on the first difference.
"""
import json
import os
import signal
import sys
import threading
import time

from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import Cluster
from cassandra.query import SimpleStatement

proxy_host = os.environ.get("CQL_HOST", "127.0.0.1")
proxy_port = int(os.environ.get("CQL_PORT", "9042"))
direct_host = os.environ.get("DIRECT_HOST", "127.0.0.2")
direct_port = int(os.environ.get("DIRECT_PORT", "9042"))
ks = os.environ.get("HOT_KEYSPACE", "cqlguard_hot")
protocol = int(os.environ["CQL_PROTOCOL"]) if os.environ.get("CQL_PROTOCOL") else None
compression = os.environ.get("CQL_COMPRESSION", "none") or "none"
rounds = int(os.environ.get("HOT_ROUNDS", "5"))
timeout = int(os.environ.get("CQL_TEST_TIMEOUT", "300"))

IN_FLIGHT = 200
THREADS, THREAD_READS = 8, 10
READERS, WRITES = 8, 200
READ_ONE = "SELECT v FROM kv WHERE k = 1 AND c = 0"


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    # os._exit: the driver's threads must not keep a failed run alive.
    os._exit(1)


signal.signal(signal.SIGALRM, lambda *_: fail(f"the whole run took more than {timeout}s (CQL_TEST_TIMEOUT)"))
signal.alarm(timeout)

if compression not in ("none", "lz4", "snappy"):
    print(f"CQL_COMPRESSION={compression!r}: want none, lz4 or snappy", file=sys.stderr)
    sys.exit(2)


def connect(host, port):
    kwargs = dict(contact_points=[host], port=port, connect_timeout=10,
                  auth_provider=PlainTextAuthProvider(os.environ.get("CQL_USER", "cassandra"),
                                                      os.environ.get("CQL_PASSWORD", "cassandra")),
                  compression=False if compression == "none" else compression)
    if protocol:
        kwargs["protocol_version"] = protocol
    cluster = Cluster(**kwargs)
    session = cluster.connect(ks)
    session.default_timeout = 30
    if protocol and cluster.protocol_version != protocol:
        fail(f"{host}:{port}: negotiated protocol v{cluster.protocol_version}, want v{protocol}")
    return cluster, session


def page_of(rs):
    """What the driver decoded of one page: rows, paging state, columns, warnings."""
    return {
        "rows": [tuple(r) for r in rs.current_rows],
        "paging_state": rs.paging_state,
        "columns": list(zip(rs.column_names or [], [t.cql_parameterized_type() for t in rs.column_types or []])),
        "warnings": rs.response_future.warnings,
    }


def read_pages(session, stmt, args):
    """Reads every page of stmt with execute, passing each paging state on."""
    pages, state = [], None
    while True:
        rs = session.execute(stmt, args, paging_state=state)
        pages.append(page_of(rs))
        state = rs.paging_state
        if state is None:
            return pages


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.reads = self.pages = self.warnings = 0

    def add(self, reads=0, pages=0, warnings=0):
        with self.lock:
            self.reads += reads
            self.pages += pages
            self.warnings += warnings


counts = Counts()


def compare(what, i, got, want):
    """Fails on the first field of page i that differs from the reference."""
    for field in ("rows", "paging_state", "columns", "warnings"):
        if got[field] != want[field]:
            fail(f"{what}: page {i} through the proxy differs in {field}:\n"
                 f"  proxy:  {got[field]!r}\n  direct: {want[field]!r}")
    counts.add(pages=1, warnings=1 if want["warnings"] else 0)


def compare_all(what, got, want):
    if len(got) != len(want):
        fail(f"{what}: {len(got)} pages through the proxy, {len(want)} directly")
    for i, (g, w) in enumerate(zip(got, want)):
        compare(what, i, g, w)
    counts.add(reads=1)


def statements(session):
    """The reads compared: (name, statement, values) for each partition,
    simple and prepared."""
    out = []
    p = session.prepare("SELECT * FROM kv WHERE k = ?")
    for k, fetch in ((1, 10), (2, 100)):
        out.append((f"simple k={k}", SimpleStatement(f"SELECT * FROM kv WHERE k = {k}", fetch_size=fetch), None))
        b = p.bind((k,))
        b.fetch_size = fetch
        out.append((f"prepared k={k}", b, None))
    return out


started = time.monotonic()
direct_cluster, direct = connect(direct_host, direct_port)
proxy_cluster, proxy = connect(proxy_host, proxy_port)

# 1. The reference, read directly.
reference = {}
for name, stmt, args in statements(direct):
    reference[name] = read_pages(direct, stmt, args)
if len(reference["simple k=1"]) != 3:
    fail(f"direct read of k = 1: {len(reference['simple k=1'])} pages, want 3 (25 rows, 10 a page)")
if not any(p["warnings"] for p in reference["simple k=2"]):
    fail("no tombstone warning reading partition 2 directly")
print(f"reference: protocol v{direct_cluster.protocol_version}, compression {compression}, "
      f"pages {[(n, len(p)) for n, p in reference.items()]}", flush=True)

reads = statements(proxy)

# 2a. Rounds of IN_FLIGHT reads at once, each page of all of them together.
for r in range(rounds):
    live = []  # (name, index of the read, future, pages so far, args, statement)
    for i in range(IN_FLIGHT):
        name, stmt, args = reads[i % len(reads)]
        live.append([name, i, proxy.execute_async(stmt, args), [], args, stmt])
    while live:
        more = []
        for entry in live:
            name, i, fut, pages, args, stmt = entry
            try:
                rs = fut.result()
            except Exception as e:  # noqa: BLE001 - any error fails the run
                fail(f"{name}: round {r} read {i} page {len(pages)}: {type(e).__name__}: {e}")
            got = page_of(rs)
            want = reference[name]
            if len(pages) >= len(want):
                fail(f"{name}: more than {len(want)} pages through the proxy")
            compare(f"{name} (round {r}, read {i})", len(pages), got, want[len(pages)])
            pages.append(got)
            if rs.paging_state is None:
                if len(pages) != len(want):
                    fail(f"{name}: {len(pages)} pages through the proxy, {len(want)} directly")
                counts.add(reads=1)
                continue
            if i % 2 == 0:
                fut.start_fetching_next_page()
            else:
                entry[2] = proxy.execute_async(stmt, args, paging_state=rs.paging_state)
            more.append(entry)
        live = more

# 2b. Threads, each reading every page with execute.
def reader(t):
    for n in range(THREAD_READS):
        name, stmt, args = reads[(t + n) % len(reads)]
        compare_all(f"{name} (thread {t})", read_pages(proxy, stmt, args), reference[name])


threads = [threading.Thread(target=reader, args=(t,)) for t in range(THREADS)]
for th in threads:
    th.start()
for th in threads:
    th.join()

# 3. Read-your-writes among concurrent reads of the same statement.
select = proxy.prepare(READ_ONE)
update = proxy.prepare("UPDATE kv SET v = ? WHERE k = 1 AND c = 0")
stop = threading.Event()
background = Counts()
errors = []


def keep_reading():
    while not stop.is_set():
        try:
            proxy.execute(select)
        except Exception as e:  # noqa: BLE001 - reported by the writer
            errors.append(f"{type(e).__name__}: {e}")
            return
        background.add(reads=1)


readers = [threading.Thread(target=keep_reading) for _ in range(READERS)]
for th in readers:
    th.start()
stale, first_stale = 0, None
for i in range(WRITES):
    want = f"python write {i} at {time.time_ns()}"
    proxy.execute(update, (want,))
    row = proxy.execute(select).one()
    got = row.v if row else None
    if got != want:
        stale += 1
        first_stale = first_stale or f"read back {got!r} after writing {want!r}"
stop.set()
for th in readers:
    th.join()
if errors:
    fail(f"a concurrent read of {READ_ONE!r} failed: {errors[0]}")

summary = {
    "protocol": proxy_cluster.protocol_version, "compression": compression,
    "reads": counts.reads, "pages": counts.pages, "warnings": counts.warnings,
    "writes": WRITES, "stale": stale, "concurrent_reads": background.reads,
    "seconds": round(time.monotonic() - started, 3),
}
print(json.dumps(summary), flush=True)
proxy_cluster.shutdown()
direct_cluster.shutdown()
if stale:
    fail(f"{stale} of {WRITES} writes not read back: first, {first_stale}")
