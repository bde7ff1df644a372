package checkpoint

import (
	"fmt"
	"strings"
	"time"
)

// ReaderPrefix begins the name of every reader's own ephemeral record
// (a replica's, a standby's or a checkpoint reader's), which its Renewer
// keeps alive while the reader runs.
const ReaderPrefix = "reader-"

// servesMark separates a serving reader's id from the checkpoint it
// serves in its record's name.
const servesMark = "-serves-"

// ServingReaderName is the record name of a reader (id: 12 hex digits
// naming its host and cache directory) that serves checkpoint served:
// "reader-<id>-serves-<served>". ok is false when that name would be too
// long (a checkpoint name of more than 101 characters); such a reader
// uses its plain name, and DeleteRisk cannot tell that it serves it.
func ServingReaderName(id, served string) (name string, ok bool) {
	name = ReaderPrefix + id + servesMark + served
	return name, len(id) == 12 && ValidName(name) == nil
}

// ServedBy returns the checkpoint that the reader whose record is named
// name serves, if its name says so.
func ServedBy(name string) (served string, ok bool) {
	rest, ok := strings.CutPrefix(name, ReaderPrefix)
	if !ok || len(rest) < 12 {
		return "", false
	}
	for _, c := range rest[:12] {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return "", false
		}
	}
	served, ok = strings.CutPrefix(rest[12:], servesMark)
	return served, ok && served != ""
}

// DeleteRisk says what deleting the record named name would break, judged
// from recs (every record) at now; "" when nothing known would break.
//
//   - A reader's own record that has not expired belongs to a running
//     replica, standby or checkpoint reader: without it the writer may
//     reclaim segments that reader still reads until its next renewal.
//   - A checkpoint that a live reader serves (`ebbfs run --checkpoint`,
//     known from its record's name, ServingReaderName): once it is gone
//     reclamation may delete the segments that reader reads, and its
//     reads fail.
func DeleteRisk(recs []Record, name string, now time.Time) string {
	var target *Record
	for i := range recs {
		if recs[i].Name == name {
			target = &recs[i]
		}
	}
	if target == nil {
		return ""
	}
	if strings.HasPrefix(name, ReaderPrefix) {
		if target.Kind == Ephemeral && !Expired(*target, now) {
			return fmt.Sprintf("%s is the record of a running replica, standby or checkpoint reader (it renews it; next expiry %s): without it the writer may reclaim segments that reader still reads, whose reads then fail, until it renews the record",
				name, target.ExpireTime.Local().Format(time.RFC3339))
		}
		return ""
	}
	var readers []string
	for _, r := range recs {
		if served, ok := ServedBy(r.Name); ok && served == name && r.Kind == Ephemeral && !Expired(r, now) {
			readers = append(readers, r.Name)
		}
	}
	if len(readers) == 0 {
		return ""
	}
	return fmt.Sprintf("checkpoint %s is being served by `ebbfs run --checkpoint %s` (its record %s): once it is gone reclamation may delete segments that reader reads, and its reads fail",
		name, name, strings.Join(readers, ", "))
}
