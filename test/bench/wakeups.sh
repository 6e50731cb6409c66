#!/usr/bin/env bash
# Counts, in a Go execution trace (runtime/trace: cqlguard's
# /debug/pprof/trace with admin.profiling, or cqlguard-bench relay -trace),
# the events that cost a proxy per request besides its own code: system
# calls, goroutines parking (and why) and waking, and Ps going idle.
# Divide by the requests the trace covers (rate x seconds). cqlguard's
# socket reads and writes on plain TCP are raw system calls
# (transport/sockio.go), which the trace does not show as system calls; count
# those with strace -c -f -p PID instead.
#
#	bash test/bench/wakeups.sh trace.out
set -euo pipefail
trace=${1:?usage: wakeups.sh TRACE}
go tool trace -d=parsed "$trace" | awk '
/^M=/ {
	for (i = 5; i <= NF; i++) if ($i ~ /->/) break
	if (i > NF) next
	t = $i
	reason = ""
	if (match($0, /Reason="[^"]*"/)) reason = substr($0, RSTART + 8, RLENGTH - 9)
	if (t == "Running->Syscall") syscalls++
	else if (t == "Running->Waiting") parks[reason]++
	else if (t == "Waiting->Runnable") wakes++
	else if (t == "Running->Idle") idles++
}
END {
	printf "system calls          %d\n", syscalls
	for (r in parks) printf "goroutine parks       %d (%s)\n", parks[r], r
	printf "goroutine wake-ups    %d\n", wakes
	printf "P idle (thread parks) %d\n", idles
}'
