#!/usr/bin/env bash
# Counts the read, write and epoll system calls a running cqlguard makes
# over SECONDS, by the path that made them, from perf's system-call
# tracepoints and each call's stack: the request path (serveRequests),
# the response path of a session's first connection (serveResponses), the
# response paths of its connections to other nodes and shards (serveLeg),
# a writer's flush loop on a goroutine of its own, and the scheduler's
# poll for ready sockets (netpoll). With ADMIN, the admin address, it also
# divides each count by the requests the proxy forwarded or answered over
# the same time (cqlguard_frames_total's requests), for per-request figures
# that compare two builds, or the pinned and routed paths, under the same
# load:
#
#	bin/cqlguard-bench suite -only 'gocql saturated' -gocql-paths cqlguard,routed ... &
#	bash test/bench/syscalls.sh $(pgrep -f 'cqlguard-routed.yaml') 4 127.0.0.1:ADMINPORT
#
# Tracing every call slows the proxy while it runs: the counts per
# request hold, its throughput meanwhile does not. Needs perf (linux-perf)
# and root, or a perf_event_paranoid that allows tracepoints.
set -euo pipefail
pid=${1:?usage: syscalls.sh PID SECONDS [ADMIN]}
secs=${2:?usage: syscalls.sh PID SECONDS [ADMIN]}
admin=${3:-}
command -v perf >/dev/null || { echo "syscalls.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
requests() {
	curl -fsS "http://$admin/metrics" |
		awk '/^cqlguard_frames_total\{/ && /direction="request"/ { n += $NF } END { printf "%d\n", n }'
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
[ -z "$admin" ] || before=$(requests)
perf record -q -e syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_epoll_pwait \
	-g -p "$pid" -o "$out/perf.data" -- sleep "$secs" >/dev/null 2>&1
[ -z "$admin" ] || after=$(requests)
# One line per call: its tracepoint, then the functions of its stack.
perf script -i "$out/perf.data" 2>/dev/null |
	awk '/syscalls:sys_enter_/ { if (s != "") print s; s = $0; sub(/.*syscalls:sys_enter_/, "", s); sub(/:.*/, "", s); next }
	     NF >= 2 { s = s " " $2 }
	     END { if (s != "") print s }' >"$out/calls"
n=0
[ -z "$admin" ] || n=$((after - before))
awk -v n="$n" '
	{ path = "other" }
	/serveRequests/ { path = "request path" }
	/serveResponses/ { path = "response path, first connection" }
	/serveLeg/ { path = "response path, other connections" }
	/Writer\)\.loop/ && !/serve(Requests|Responses|Leg)/ { path = "flush loop" }
	/runtime\.netpoll/ { path = "scheduler" }
	{ count[path " " $1]++; total[$1]++ }
	END {
		if (n > 0) printf "%d requests\n", n
		for (k in count) printf "%-44s %9d%s\n", k, count[k], (n > 0 ? sprintf("  %.3f per request", count[k] / n) : "")
		for (k in total) printf "%-44s %9d%s\n", "all " k, total[k], (n > 0 ? sprintf("  %.3f per request", total[k] / n) : "")
	}' "$out/calls" | sort
