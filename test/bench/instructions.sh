#!/usr/bin/env bash
# Counts the instructions a benchmark of a Go test binary spends per
# operation, under valgrind's callgrind: the difference between runs of
# N1 and N2 operations, divided by N2 - N1, so that start-up cancels out.
# Instruction counts do not depend on what else the machine is doing, so
# two builds compare on a busy machine where timings move by ±15%.
#
#	go test -c -o /tmp/proxy.test ./proxy
#	bash test/bench/instructions.sh /tmp/proxy.test 'BenchmarkForwardExecute/v4$' [N1 N2]
set -euo pipefail
bin=${1:?usage: instructions.sh TEST_BINARY BENCHMARK [N1 N2]}
bench=${2:?usage: instructions.sh TEST_BINARY BENCHMARK [N1 N2]}
n1=${3:-2000}
n2=${4:-6000}
command -v valgrind >/dev/null || { echo "instructions.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
collected() {
	GOMAXPROCS=1 GOGC=off GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
		"$bin" -test.run '^$' -test.bench "$bench" -test.benchtime "${1}x" -test.count 1 2>&1 |
		awk '/Collected/ { gsub(",", "", $4); print $4 }'
}
a=$(collected "$n1")
b=$(collected "$n2")
echo "$bench: $(( (b - a) / (n2 - n1) )) instructions per operation ($a at $n1, $b at $n2)"
