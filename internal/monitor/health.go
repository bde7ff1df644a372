package monitor

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"ebbfs.dev/ebbfs/internal/telemetry"
)

// HealthSep separates the parts of the health line.
const HealthSep = " · "

// HealthParts is the health line `ebbfs status` leads with and the
// monitor shows under its header, as parts that are never split when
// the line is wrapped: role, lease, last barrier, dirty bytes, replicas,
// store, damage, cache disk. A part in capitals is an alarm.
func HealthParts(h telemetry.Health, now time.Time) []string {
	role := h.Role
	if h.Checkpoint != "" {
		role += " of " + h.Checkpoint
	}
	parts := []string{role}
	switch {
	case h.Fenced != "":
		parts = append(parts, "FENCED: another writer took over")
	case h.LeaseEpoch != 0:
		parts = append(parts, fmt.Sprintf("lease epoch %d, heartbeat %s", h.LeaseEpoch, until(h.LeaseHeartbeat, now)))
	default:
		parts = append(parts, "no lease (read-only)")
	}
	parts = append(parts, haParts(h.HA)...)
	if h.LastBarrier.IsZero() {
		parts = append(parts, "no barrier yet")
	} else {
		parts = append(parts, "last barrier "+until(h.LastBarrier, now))
	}
	parts = append(parts, HumanBytes(h.DirtyBytes)+" dirty")
	switch {
	case h.Role == telemetry.RoleReplica || h.Role == telemetry.RoleStandby:
		parts = append(parts, "lag "+secs(h.LagSec))
	case h.Replicas < 0:
		parts = append(parts, "replicas unknown")
	case h.Replicas == 1:
		parts = append(parts, "1 replica")
	default:
		parts = append(parts, fmt.Sprintf("%d replicas", h.Replicas))
	}
	if h.StoreReachable {
		parts = append(parts, "store reachable")
	} else {
		parts = append(parts, "STORE UNREACHABLE for "+secs(now.Sub(h.StoreUnreachableSince).Seconds()))
	}
	if h.Damaged == 0 {
		parts = append(parts, "no damage")
	} else {
		parts = append(parts, fmt.Sprintf("DAMAGE: %d corrupt frames", h.Damaged))
	}
	switch {
	case h.MetadataFailed != "":
		parts = append(parts, "METADATA STORE FAILED")
	case h.ReserveReleased:
		parts = append(parts, "CACHE DISK FULL, reserve in use")
	case h.CacheDirFloor > 0 && h.CacheDirFree < h.CacheDirFloor:
		parts = append(parts, "CACHE DISK FULL: "+HumanBytes(h.CacheDirFree)+" free")
	case h.CacheDirFloor > 0:
		parts = append(parts, "cache disk "+HumanBytes(h.CacheDirFree)+" free")
	}
	return parts
}

// HealthOK reports whether no part of the health line is an alarm.
func HealthOK(h telemetry.Health) bool {
	return h.Fenced == "" && h.StoreReachable && h.Damaged == 0 && h.MetadataFailed == "" &&
		!h.ReserveReleased && (h.CacheDirFloor == 0 || h.CacheDirFree >= h.CacheDirFloor)
}

// FitParts joins parts with sep into lines of at most width columns,
// never breaking a part (one longer than width gets a line of its own,
// cut at a word and continued on the next). Lines after the first start
// with indent.
func FitParts(parts []string, sep, indent string, width int) []string {
	if width <= cols(indent)+8 {
		width = cols(indent) + 8
	}
	var lines []string
	cur := ""
	for _, p := range parts {
		switch {
		case cur == "":
			cur = p
		case cols(cur)+cols(sep)+cols(p) <= width:
			cur += sep + p
		default:
			lines = append(lines, cur)
			cur = indent + p
		}
		for cols(cur) > width {
			head, tail := cutAtWord(cur, width)
			lines = append(lines, head)
			cur = indent + tail
		}
	}
	if cur != "" {
		lines = append(lines, cur)
	}
	return lines
}

func cols(s string) int { return utf8.RuneCountInString(s) }

// cutAtWord splits s at the last space that leaves at most width
// columns before it (at width itself when there is none).
func cutAtWord(s string, width int) (string, string) {
	r := []rune(s)
	cut := width
	for i := width; i > 0; i-- {
		if r[i] == ' ' && strings.TrimSpace(string(r[:i])) != "" {
			cut = i
			break
		}
	}
	return strings.TrimRight(string(r[:cut]), " "), strings.TrimLeft(string(r[cut:]), " ")
}

// haParts is the health line's part on standby writers: a standby's
// watch of the writer, a writer's standbys, failovers.
func haParts(ha *telemetry.HAStatus) []string {
	if ha == nil {
		return nil
	}
	var parts []string
	switch {
	case ha.Role == telemetry.RoleStandby && ha.Armed:
		parts = append(parts, fmt.Sprintf("writer seen %s ago, takeover at %s", secs(ha.SinceSignOfLifeSec), secs(ha.TakeoverAfterSec)))
	case ha.Role == telemetry.RoleStandby:
		parts = append(parts, fmt.Sprintf("writer seen %s ago, not armed yet", secs(ha.SinceSignOfLifeSec)))
	case ha.Role == telemetry.RoleWriter && len(ha.Standbys) == 1:
		parts = append(parts, "1 standby, heartbeat "+secs(ha.HeartbeatEverySec))
	case ha.Role == telemetry.RoleWriter && len(ha.Standbys) > 1:
		parts = append(parts, fmt.Sprintf("%d standbys, heartbeat %s", len(ha.Standbys), secs(ha.HeartbeatEverySec)))
	}
	if ha.Failovers > 0 {
		parts = append(parts, fmt.Sprintf("took over %s", ha.Promoted.Format("15:04:05")))
	}
	if ha.Rejoins > 0 {
		parts = append(parts, "rejoined as a standby after being fenced")
	}
	return parts
}
