package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cqlguard/cqlguard/shed"
)

// ShedTrace is a node's last shedding updates, as /shed/trace shows them.
type ShedTrace struct {
	Node  string        // the node's address
	Every time.Duration // the time between two updates
	Ticks []shed.Tick   // oldest first
}

// ErrShedOff is the error of a Source's ShedTrace when shedding is off.
var ErrShedOff = errors.New("shedding is off")

// UnknownNodeError is the error of a Source's ShedTrace when asked for a
// node it sheds nothing for, or for none when it has several.
type UnknownNodeError struct {
	Node  string   // the node asked for; empty for none
	Nodes []string // the nodes there are, sorted
}

func (e *UnknownNodeError) Error() string {
	return fmt.Sprintf("no node %q; ?node= one of %v", e.Node, e.Nodes)
}

// serveShedTrace answers /shed/trace with a node's last controller updates
// (shed.WriteTrace): the signals it was given and the pressure it came to,
// to be replayed in a test. ?node=ADDR picks the node; it may be left out
// when there is only one.
func (h *handler) serveShedTrace(w http.ResponseWriter, r *http.Request) {
	t, err := h.src.ShedTrace(r.URL.Query().Get("node"))
	switch {
	case errors.Is(err, ErrShedOff):
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	case err != nil:
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "# node %s, an update every %v\n", t.Node, t.Every)
	if err := shed.WriteTrace(w, t.Ticks); err != nil {
		h.log.Debug().Err(err).Msg("writing /shed/trace")
	}
}
