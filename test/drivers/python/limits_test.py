"""Floods one partition through a cqlguard that refuses its requests, with
the Python driver, and checks what the driver sees of each refused request.

With ScyllaDB's fork (CQL_PY_DRIVER=scylla), which opts in to
SCYLLA_RATE_LIMIT_ERROR, a refused request raises RateLimitReached with the
operation's type and rejected_by_coordinator set. With the DataStax driver it
raises ConfigurationException (Config_error) with ScyllaDB's message. A
client class over its request unit budget is refused with Config_error
whatever the driver, naming the class (LIMIT_EXPECT=class_budget): both
drivers raise ConfigurationException. Either way the driver must not retry:
a retry policy records every time the driver consults it, and must end with
none; the caller also counts the requests the proxy saw.

A request shed while its node is slow (LIMIT_EXPECT=shed) must be refused
every time with Overloaded and cqlguard's message for tier LIMIT_TIER and
node LIMIT_NODE. Here the driver keeps its default retry policy, which the
recording policy asks and obeys: it retries Overloaded on the next host of
the query plan whether or not the statement is idempotent, so with the one
host a proxy advertises the request fails at once with NoHostAvailable
holding the OverloadedErrorMessage, after one retry decision per request.

Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD; LIMIT_KEYSPACE and
LIMIT_TABLE, a table (k int, c int, PRIMARY KEY (k, c)) limited for reads
and writes; LIMIT_KEY, the partition to flood; LIMIT_N, requests per
operation (50); LIMIT_EXPECT, rate_limit, config_error, class_budget or shed;
LIMIT_CLASS, the client class a class_budget refusal names; LIMIT_TIER and
LIMIT_NODE, the tier and node a shed refusal names.

Prints the first refusal of each operation, then one JSON line: {"write":
{"accepted": n, "refused": n}, "read": {...}, "retry_consulted": n,
"retry_decisions": n, "seconds": s}, where retry_decisions counts the
decisions to retry; in shed mode also "surfaced", what each refusal raised.
Exits 1 on anything unexpected.
"""
import json
import os
import sys
import time

from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import RetryPolicy
from cassandra.protocol import ConfigurationException, OverloadedErrorMessage
from cassandra.query import SimpleStatement

host = os.environ.get("CQL_HOST", "127.0.0.1")
port = int(os.environ.get("CQL_PORT", "9042"))
ks = os.environ.get("LIMIT_KEYSPACE", "cqlguard_limits")
table = os.environ.get("LIMIT_TABLE", "hot")
key = int(os.environ.get("LIMIT_KEY", "10"))
n = int(os.environ.get("LIMIT_N", "50"))
expect = os.environ.get("LIMIT_EXPECT", "config_error")
client_class = os.environ.get("LIMIT_CLASS", "default")
shed_tier = os.environ.get("LIMIT_TIER", "1")
shed_node = os.environ.get("LIMIT_NODE", "127.0.0.2:9042")

if expect == "rate_limit":
    from cassandra import OperationType, RateLimitReached
elif expect == "shed":
    from cassandra.cluster import NoHostAvailable
elif expect not in ("config_error", "class_budget"):
    print(f"LIMIT_EXPECT={expect!r}: want rate_limit, config_error, class_budget or shed", file=sys.stderr)
    sys.exit(2)


class RecordingRetryPolicy(RetryPolicy):
    """Records each decision the driver asks for. It never retries, unless
    obey is set: then it decides what the default policy (its parent) does."""

    def __init__(self, obey=False):
        self.obey = obey
        self.decisions = []

    def _record(self, kind, default, *args, **kwargs):
        decision = default(*args, **kwargs) if self.obey else (self.RETHROW, None)
        self.decisions.append((kind, decision[0]))
        return decision

    def on_read_timeout(self, *args, **kwargs):
        return self._record("read_timeout", super().on_read_timeout, *args, **kwargs)

    def on_write_timeout(self, *args, **kwargs):
        return self._record("write_timeout", super().on_write_timeout, *args, **kwargs)

    def on_unavailable(self, *args, **kwargs):
        return self._record("unavailable", super().on_unavailable, *args, **kwargs)

    def on_request_error(self, *args, **kwargs):
        return self._record("request_error", super().on_request_error, *args, **kwargs)

    def retries(self):
        """How many of the decisions were to retry."""
        return sum(1 for _, d in self.decisions if d in (self.RETRY, self.RETRY_NEXT_HOST))


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    sys.exit(1)


retry = RecordingRetryPolicy(obey=expect == "shed")
profile = ExecutionProfile(retry_policy=retry, consistency_level=ConsistencyLevel.ONE, request_timeout=20)
cluster = Cluster(contact_points=[host], port=port, connect_timeout=10,
                  auth_provider=PlainTextAuthProvider(os.environ.get("CQL_USER", "cassandra"),
                                                      os.environ.get("CQL_PASSWORD", "cassandra")),
                  execution_profiles={EXEC_PROFILE_DEFAULT: profile})
session = cluster.connect()

insert = session.prepare(f"INSERT INTO {ks}.{table} (k, c) VALUES (?, ?)")
select = SimpleStatement(f"SELECT c FROM {ks}.{table} WHERE k = %s LIMIT 1")
message = "Per-partition rate limit reached for {op} in table " + f"{ks}.{table}, rejected by coordinator"
if expect == "class_budget":
    message = f"client class {client_class} is over its budget"
elif expect == "shed":
    message = f"cqlguard: request shed, tier {shed_tier}, while the node {shed_node} is slow (shedding); retry later"
surfaced = set()


def check_shed(e, op):
    """Raises unless e is a shed request's Overloaded as this driver
    surfaces it, and notes how it was surfaced."""
    what, errors = type(e).__name__, [e]
    if isinstance(e, NoHostAvailable):
        errors = list(e.errors.values())
        what += "(" + ", ".join(type(err).__name__ for err in errors) + ")"
    for err in errors:
        if not isinstance(err, OverloadedErrorMessage) or err.code != 0x1001:
            fail(f"{op}: {type(e).__name__}: {e}; want OverloadedErrorMessage (0x1001)")
        if err.message != message:
            fail(f"{op}: message {err.message!r}; want {message!r}")
    surfaced.add(what)


def check_refusal(e, op):
    """Raises unless e is the refusal this driver should see for op."""
    if expect == "shed":
        check_shed(e, op)
        return
    if expect == "rate_limit":
        if not isinstance(e, RateLimitReached):
            fail(f"{op}: {type(e).__name__}: {e}; want RateLimitReached")
        want = OperationType.Write if op == "write" else OperationType.Read
        if e.op_type != want or e.rejected_by_coordinator is not True:
            fail(f"{op}: RateLimitReached op_type={e.op_type} rejected_by_coordinator={e.rejected_by_coordinator}")
        return
    if type(e) is not ConfigurationException:
        fail(f"{op}: {type(e).__name__}: {e}; want ConfigurationException")
    if message.format(op=op) not in str(e):
        fail(f"{op}: message {e}; want {message.format(op=op)!r}")


result = {}
start = time.monotonic()
for op, run in (("write", lambda i: session.execute(insert, (key, i))),
                ("read", lambda i: session.execute(select, (key,)))):
    accepted = refused = 0
    for i in range(n):
        try:
            run(i)
            accepted += 1
        except Exception as e:  # noqa: BLE001 - each is checked
            check_refusal(e, op)
            if refused == 0:
                print(f"refused {op}: {type(e).__module__}.{type(e).__name__}: {e}", flush=True)
            refused += 1
    result[op] = {"accepted": accepted, "refused": refused}
result["retry_consulted"] = len(retry.decisions)
result["retry_decisions"] = retry.retries()
result["seconds"] = round(time.monotonic() - start, 3)
if expect == "shed":
    result["surfaced"] = " | ".join(sorted(surfaced))
cluster.shutdown()
print(json.dumps(result), flush=True)
if expect == "shed":
    if len(surfaced) != 1:
        fail(f"refusals surfaced as {sorted(surfaced)}; want one kind")
    for op in ("write", "read"):
        if result[op]["accepted"] != 0:
            fail(f"{result[op]['accepted']} {op}s were not shed")
elif retry.decisions:
    fail(f"the driver consulted its retry policy: {retry.decisions}")
for op in ("write", "read"):
    if result[op]["refused"] == 0:
        fail(f"no {op} was refused")
