package daemon

import (
	"encoding/json"
	"net/http"
	"strings"

	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/telemetry"
	"ebbfs.dev/ebbfs/objstore"
)

// traceBuffer is how many requests a slow trace client may fall behind
// before the ones that do not fit are dropped (and counted).
const traceBuffer = 8192

// traceRoute registers GET /v1/trace: the store requests this process
// sends from now on, one telemetry.TraceLine of JSON a line, until the
// client goes away or the process stops. ?purpose=a,b and ?op=x,y keep
// only those.
func (p *process) traceRoute(s *admin.Server) {
	s.HandleFunc("GET "+telemetry.RouteTrace, func(w http.ResponseWriter, r *http.Request) {
		purposes, ops := listParam(r, "purpose"), listParam(r, "op")
		sub := p.traced.Subscribe(traceBuffer)
		defer sub.Close()
		rc := http.NewResponseController(w)
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		_ = rc.Flush()
		enc := json.NewEncoder(w)
		for {
			var ev objstore.TraceEvent
			select {
			case <-r.Context().Done():
				return
			case <-s.Stopping():
				return
			case ev = <-sub.C():
			}
			// Send what has queued up meanwhile, then flush once.
			for more := true; more; {
				if keep(purposes, string(ev.Purpose)) && keep(ops, ev.Op) {
					if enc.Encode(telemetry.TraceLine{TraceEvent: ev, Dropped: sub.Dropped()}) != nil {
						return
					}
				}
				select {
				case ev = <-sub.C():
				default:
					more = false
				}
			}
			if rc.Flush() != nil {
				return
			}
		}
	})
}

// listParam is a comma-separated query parameter as a set (nil: absent).
func listParam(r *http.Request, name string) map[string]bool {
	v := r.URL.Query().Get(name)
	if v == "" {
		return nil
	}
	out := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out[s] = true
		}
	}
	return out
}

// keep reports whether v passes the filter set (nil: everything does).
func keep(set map[string]bool, v string) bool { return set == nil || set[v] }
