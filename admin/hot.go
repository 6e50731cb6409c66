package admin

import (
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/cqlguard/cqlguard/schema"
)

// HotPartition is one entry of /hot.
type HotPartition struct {
	Keyspace string `json:"keyspace"`
	Table    string `json:"table"`
	Op       string `json:"op"`
	Token    int64  `json:"token"`
	// Key is the partition key as FormatKey renders it; KeyTruncated says
	// only its start was kept. Keys are user data: they are left out
	// unless admin.show_keys is set.
	Key          string `json:"key,omitempty"`
	KeyTruncated bool   `json:"key_truncated,omitempty"`
	// Rate is operations per second, decayed with a 2 s half-life; the
	// true rate is at least Rate - RateError.
	Rate      float64 `json:"rate"`
	RateError float64 `json:"rate_error"`
	// Limit is the partition's limit for Op now, 0 when unlimited.
	Limit uint32 `json:"limit"`
	// Class is the client class (clients) of the partition's last
	// operation.
	Class string `json:"class,omitempty"`
	// Served says how the partition's reads are served now (hot_reads):
	// "cache" (from the cache, else coalesced), "coalesce", or empty when
	// each is forwarded.
	Served string `json:"served,omitempty"`
}

// FormatKey renders the partition key of a table t for people, as CQL
// would print it: a single text or integer column as its value, anything
// else, and a key of which only the start was kept, as the blob literal
// (0x...) of its serialized bytes.
func FormatKey(t *schema.Table, key []byte, truncated bool) string {
	if len(t.PartitionKey) == 1 && !truncated {
		switch t.PartitionKey[0].Type.Kind {
		case schema.Text, schema.Ascii:
			if utf8.Valid(key) {
				return strconv.Quote(string(key))
			}
		case schema.Int:
			if len(key) == 4 {
				return strconv.FormatInt(int64(int32(binary.BigEndian.Uint32(key))), 10)
			}
		case schema.Bigint:
			if len(key) == 8 {
				return strconv.FormatInt(int64(binary.BigEndian.Uint64(key)), 10)
			}
		}
	}
	return "0x" + hex.EncodeToString(key)
}

// serveHot answers /hot with the source's Hot as JSON; ?n= keeps the
// first n.
func (h *handler) serveHot(w http.ResponseWriter, r *http.Request) {
	if h.cfg.HotPartitions == 0 {
		http.Error(w, "hot partition tracking is off (admin.hot_partitions: 0)", http.StatusNotFound)
		return
	}
	hot := h.src.Hot()
	if s := r.URL.Query().Get("n"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 {
			http.Error(w, "n: want a count", http.StatusBadRequest)
			return
		}
		hot = hot[:min(n, len(hot))]
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(hot)
}
