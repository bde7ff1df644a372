package telemetry

import (
	"github.com/prometheus/client_golang/prometheus"
)

// haDescs are the standby writers' series (docs/METRICS.md).
type haDescs struct {
	role, silent, armed, failovers, heartbeat, standbys *prometheus.Desc
}

func newHADescs(d func(name, help string, labels ...string) *prometheus.Desc) haDescs {
	return haDescs{
		role:      d("ebbfs_ha_role", "Constant 1, labelled with this process's role in standby writers: writer, standby, replica or fenced (a writer another took over from).", "role"),
		silent:    d("ebbfs_ha_writer_silent_seconds", "Standbys: how long ago this standby last saw a sign of life from the writer (a new journal or a changed lease heartbeat); it takes over at [ha] takeover_after."),
		armed:     d("ebbfs_ha_armed", "Standbys: 1 once the writer heartbeats for this standby (it takes over after takeover_after), 0 before (after the lease TTL)."),
		failovers: d("ebbfs_ha_failovers_total", "Takeovers this process made as a standby."),
		heartbeat: d("ebbfs_lease_heartbeat_interval_seconds", "Writers: the interval of the lease heartbeat now (a quarter of the standbys' takeover_after while one is attached, 10 minutes without)."),
		standbys:  d("ebbfs_ha_standbys", "Writers: the standbys this writer heartbeats for."),
	}
}

// collectHA exports the process's part in standby writers.
func (c *Collector) collectHA(ch chan<- prometheus.Metric) {
	if c.src.HA == nil {
		return
	}
	st := c.src.HA()
	gauge(ch, c.ha.role, 1, st.Role)
	counter(ch, c.ha.failovers, float64(st.Failovers))
	switch st.Role {
	case RoleStandby:
		gauge(ch, c.ha.silent, st.SinceSignOfLifeSec)
		armed := 0.0
		if st.Armed {
			armed = 1
		}
		gauge(ch, c.ha.armed, armed)
	case RoleWriter:
		gauge(ch, c.ha.heartbeat, st.HeartbeatEverySec)
		gauge(ch, c.ha.standbys, float64(len(st.Standbys)))
	}
}
