module github.com/cqlguard/cqlguard/test/drivers/scyllagocql

go 1.25.0

require github.com/gocql/gocql v1.7.0

require (
	github.com/google/uuid v1.6.0 // indirect
	github.com/klauspost/compress v1.18.6 // indirect
	golang.org/x/sync v0.20.0 // indirect
	gopkg.in/inf.v0 v0.9.1 // indirect
)

// ScyllaDB's fork keeps the upstream module path.
replace github.com/gocql/gocql => github.com/scylladb/gocql v1.18.3
