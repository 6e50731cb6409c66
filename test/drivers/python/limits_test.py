"""Floods one partition through a cqlguard that limits it, with the Python
driver, and checks what the driver sees of each refused request.

With ScyllaDB's fork (CQL_PY_DRIVER=scylla), which opts in to
SCYLLA_RATE_LIMIT_ERROR, a refused request raises RateLimitReached with the
operation's type and rejected_by_coordinator set. With the DataStax driver it
raises ConfigurationException (Config_error) with ScyllaDB's message. A
client class over its request unit budget is refused with Config_error
whatever the driver, naming the class (LIMIT_EXPECT=class_budget): both
drivers raise ConfigurationException. Either way the driver must not retry:
a retry policy records every time the driver consults it, and must end with
none; the caller also counts the requests the proxy saw.

Environment: CQL_HOST, CQL_PORT, CQL_USER, CQL_PASSWORD; LIMIT_KEYSPACE and
LIMIT_TABLE, a table (k int, c int, PRIMARY KEY (k, c)) limited for reads
and writes; LIMIT_KEY, the partition to flood; LIMIT_N, requests per
operation (50); LIMIT_EXPECT, rate_limit, config_error or class_budget;
LIMIT_CLASS, the client class a class_budget refusal names.

Prints the first refusal of each operation, then one JSON line: {"write":
{"accepted": n, "refused": n}, "read": {...}, "retry_decisions": n,
"seconds": s}; exits 1 on anything unexpected.
"""
import json
import os
import sys
import time

from cassandra import ConsistencyLevel
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile
from cassandra.policies import RetryPolicy
from cassandra.protocol import ConfigurationException
from cassandra.query import SimpleStatement

host = os.environ.get("CQL_HOST", "127.0.0.1")
port = int(os.environ.get("CQL_PORT", "9042"))
ks = os.environ.get("LIMIT_KEYSPACE", "cqlguard_limits")
table = os.environ.get("LIMIT_TABLE", "hot")
key = int(os.environ.get("LIMIT_KEY", "10"))
n = int(os.environ.get("LIMIT_N", "50"))
expect = os.environ.get("LIMIT_EXPECT", "config_error")
client_class = os.environ.get("LIMIT_CLASS", "default")

if expect == "rate_limit":
    from cassandra import OperationType, RateLimitReached
elif expect not in ("config_error", "class_budget"):
    print(f"LIMIT_EXPECT={expect!r}: want rate_limit, config_error or class_budget", file=sys.stderr)
    sys.exit(2)


class RecordingRetryPolicy(RetryPolicy):
    """Records each decision the driver asks for, and never retries."""

    def __init__(self):
        self.decisions = []

    def _record(self, kind):
        self.decisions.append(kind)
        return self.RETHROW, None

    def on_read_timeout(self, *args, **kwargs):
        return self._record("read_timeout")

    def on_write_timeout(self, *args, **kwargs):
        return self._record("write_timeout")

    def on_unavailable(self, *args, **kwargs):
        return self._record("unavailable")

    def on_request_error(self, *args, **kwargs):
        return self._record("request_error")


def fail(msg):
    print(f"FAIL {msg}", flush=True)
    sys.exit(1)


retry = RecordingRetryPolicy()
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


def check_refusal(e, op):
    """Raises unless e is the refusal this driver should see for op."""
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
result["retry_decisions"] = len(retry.decisions)
result["seconds"] = round(time.monotonic() - start, 3)
cluster.shutdown()
print(json.dumps(result), flush=True)
if retry.decisions:
    fail(f"the driver consulted its retry policy: {retry.decisions}")
for op in ("write", "read"):
    if result[op]["refused"] == 0:
        fail(f"no {op} was refused")
