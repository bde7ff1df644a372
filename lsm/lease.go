package lsm

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"syscall"
	"time"

	"ebbfs.dev/ebbfs/internal/failpoint"
	"ebbfs.dev/ebbfs/internal/worker"
	"ebbfs.dev/ebbfs/objstore"
)

// ErrLeaseHeld is wrapped by Open when another live writer holds
// writer.lease. The message names the holder.
var ErrLeaseHeld = errors.New("a writer holds the lease")

// ErrFenced means another writer took over: this writer must not
// acknowledge anything any more. Every Commit, Barrier and Publish after
// fencing fails with it.
var ErrFenced = errors.New("lsm: writer fenced: another writer took over the filesystem")

// ErrReadOnly is returned by writes on a read-only DB.
var ErrReadOnly = errors.New("lsm: database is read-only")

// Lease is the plaintext JSON record at writer.lease.
type Lease struct {
	Format    int       `json:"format"` // 1
	Epoch     uint64    `json:"epoch"`
	Holder    string    `json:"holder"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	Heartbeat time.Time `json:"heartbeat"`
	// Instance is random per process: a record with this host and pid but
	// another instance was left by an earlier process that had our pid
	// (containers restart as pid 1), so it is dead.
	Instance string `json:"instance,omitempty"`
	// Released is set by a clean Close: the next writer may take over at once.
	Released bool `json:"released,omitempty"`
	// Standbys are the standby writers attached (ha.go): while one is
	// listed and renews its entry, the holder heartbeats often enough for
	// its takeover_after.
	Standbys []StandbyEntry `json:"standbys,omitempty"`
	// HandoverTo names the standby (its StandbyEntry ID) that asked for
	// a planned switch-over (`ebbfs promote`); the writer answers by
	// making everything durable and releasing the lease with it set.
	HandoverTo string `json:"handover_to,omitempty"`
}

var processInstance = func() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}()

// ParseLease decodes and validates a lease record.
func ParseLease(b []byte) (Lease, error) {
	var l Lease
	if err := json.Unmarshal(b, &l); err != nil {
		return Lease{}, fmt.Errorf("%s is malformed: %v", leaseKey, err)
	}
	if l.Format != 1 {
		return Lease{}, fmt.Errorf("%s has format %d, this build reads 1", leaseKey, l.Format)
	}
	if l.Epoch == 0 {
		return Lease{}, fmt.Errorf("%s has epoch 0", leaseKey)
	}
	return l, nil
}

func (l Lease) marshal() []byte {
	b, _ := json.Marshal(l)
	return append(b, '\n')
}

// pidAlive reports whether a process with this pid exists on this host.
func pidAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// acquireLease takes writer.lease for a new epoch, or fails with
// ErrLeaseHeld. It returns the record written and its ETag.
func (db *DB) acquireLease(ctx context.Context) (Lease, string, error) {
	o := &db.opts
	mine := Lease{Format: 1, Holder: o.Holder, Host: o.Host, PID: o.PID, Instance: processInstance}
	for attempt := 0; attempt < 5; attempt++ {
		info, err := o.Store.Head(ctx, leaseKey)
		if objstore.IsNotFound(err) {
			mine.Epoch = 1
			mine.Heartbeat = o.Clock.Now().UTC()
			etag, err := o.Store.Put(ctx, leaseKey, mine.marshal(), objstore.PutOptions{IfAbsent: true})
			if objstore.IsPreconditionFailed(err) {
				continue // someone created it meanwhile: look again
			}
			if err != nil {
				return Lease{}, "", fmt.Errorf("lsm: create %s: %w", leaseKey, err)
			}
			return mine, etag, nil
		}
		if err != nil {
			return Lease{}, "", fmt.Errorf("lsm: read %s: %w", leaseKey, err)
		}
		b, err := o.Store.Get(ctx, leaseKey)
		if objstore.IsNotFound(err) {
			continue
		}
		if err != nil {
			return Lease{}, "", fmt.Errorf("lsm: read %s: %w", leaseKey, err)
		}
		cur, err := ParseLease(b)
		if err != nil {
			return Lease{}, "", fmt.Errorf("lsm: %w (refusing to take over an unreadable lease)", err)
		}
		age := o.Clock.Now().Sub(cur.Heartbeat)
		switch {
		case cur.Released:
		case cur.Host == o.Host && cur.Host != "" && !pidAlive(cur.PID):
			o.Logger.Info("lsm: lease holder on this host is dead; taking over", "holder", cur.Holder, "pid", cur.PID, "epoch", cur.Epoch)
		case cur.Host == o.Host && cur.Host != "" && cur.PID == o.PID && cur.Instance != processInstance:
			o.Logger.Info("lsm: lease left by an earlier process with our pid; taking over", "holder", cur.Holder, "epoch", cur.Epoch)
		case o.TakeOver:
			o.Logger.Warn("lsm: TAKING OVER the lease from a holder that may still run; it is fenced at its next barrier and acknowledges nothing after it",
				"holder", cur.Holder, "heartbeat_age", age.Round(time.Second), "epoch", cur.Epoch)
		case cur.Host == o.Host && cur.Host != "":
			return Lease{}, "", fmt.Errorf("lsm: %w: holder %q (pid %d on this host is running, epoch %d)", ErrLeaseHeld, cur.Holder, cur.PID, cur.Epoch)
		case age <= o.LeaseTTL:
			return Lease{}, "", fmt.Errorf("lsm: %w: holder %q, last heartbeat %s ago (epoch %d); it may be taken over once the heartbeat is %s old",
				ErrLeaseHeld, cur.Holder, age.Round(time.Millisecond), cur.Epoch, o.LeaseTTL)
		default:
			o.Logger.Warn("lsm: lease heartbeat expired; taking over", "holder", cur.Holder, "age", age, "epoch", cur.Epoch)
		}
		mine.Epoch = cur.Epoch + 1
		mine.Heartbeat = o.Clock.Now().UTC()
		mine.Standbys = withoutStandby(cur.Standbys, o.StandbyID)
		etag, err := o.Store.Put(ctx, leaseKey, mine.marshal(), objstore.PutOptions{IfMatch: info.ETag})
		if objstore.IsPreconditionFailed(err) {
			continue
		}
		if err != nil {
			return Lease{}, "", fmt.Errorf("lsm: take over %s: %w", leaseKey, err)
		}
		failpoint.Hit("lsm.lease.taken-over")
		return mine, etag, nil
	}
	return Lease{}, "", fmt.Errorf("lsm: %w: %s keeps changing under us; another writer is starting", ErrLeaseHeld, leaseKey)
}

// heartbeatLoop renews the lease every LeaseTTL/3, or at the standbys'
// pace while any is attached (ha.go), until Close. Losing the IfMatch race
// fences the writer.
func (db *DB) heartbeatLoop(w *worker.Worker) {
	o := &db.opts
	for db.loopWait(w, db.heartbeatWait()) {
		if !db.heartbeatDue() {
			continue
		}
		if err := db.renewLease(false); err != nil {
			if errors.Is(err, ErrFenced) {
				return
			}
			o.Logger.Warn("lsm: lease heartbeat failed; will retry", "err", err)
		}
	}
}

// renewLease rewrites the lease with a fresh heartbeat (or released).
func (db *DB) renewLease(release bool) error {
	db.leaseMu.Lock()
	defer db.leaseMu.Unlock()
	if db.isFenced() {
		return ErrFenced
	}
	o := &db.opts
	l := db.lease
	l.Heartbeat = o.Clock.Now().UTC()
	l.Released = release
	ctx, cancel := context.WithTimeout(objstore.WithPurpose(context.Background(), objstore.PurposeHeartbeat), o.LeaseTTL/3)
	defer cancel()
	l.Standbys = db.liveStandbys()
	db.leaseLooked = o.Clock.Mono()
	etag, err := o.Store.Put(ctx, leaseKey, l.marshal(), objstore.PutOptions{IfMatch: db.leaseETag})
	if objstore.IsPreconditionFailed(err) {
		// An earlier renewal may have succeeded without us hearing back,
		// or a standby announced itself (ha.go): if the record is still
		// ours, adopt its ETag and its standbys, and write once more.
		cetag, cur, ok := db.leaseStillOurs(ctx)
		if !ok || cur.Released && !release {
			// Another process took the lease, or released it for us (only
			// the holder's Close does; anyone else who did means the
			// next writer may start at once): this writer's tenure is over.
			db.fence(fmt.Sprintf("%s changed under us (heartbeat lost)", leaseKey))
			return ErrFenced
		}
		db.leaseETag = cetag
		db.noteStandbys(cur.Standbys)
		l.Standbys = db.liveStandbys()
		if cur.HandoverTo != "" && !release {
			l.HandoverTo = cur.HandoverTo
			db.handover.Store(&cur.HandoverTo)
		}
		etag, err = o.Store.Put(ctx, leaseKey, l.marshal(), objstore.PutOptions{IfMatch: db.leaseETag})
		if objstore.IsPreconditionFailed(err) {
			return fmt.Errorf("lsm: lease ETag resynchronised after an ambiguous renewal or a standby's announcement")
		}
	}
	if err != nil {
		return err
	}
	db.lease, db.leaseETag = l, etag
	db.leaseWritten = o.Clock.Mono()
	db.beats.Add(1)
	return nil
}

func (db *DB) leaseStillOurs(ctx context.Context) (string, Lease, bool) {
	s := db.opts.Store
	info, err := s.Head(ctx, leaseKey)
	if err != nil {
		return "", Lease{}, false
	}
	b, err := s.Get(ctx, leaseKey)
	if err != nil {
		return "", Lease{}, false
	}
	cur, err := ParseLease(b)
	if err != nil || cur.Epoch != db.lease.Epoch || cur.Host != db.lease.Host || cur.PID != db.lease.PID || cur.Holder != db.lease.Holder {
		return "", Lease{}, false
	}
	return info.ETag, cur, true
}

// LeaseKey is the object key of the writer's lease record.
const LeaseKey = leaseKey

// ReadLease reads the lease record from st; found is false when there is
// none (a filesystem no writer has opened yet, or only readers).
func ReadLease(ctx context.Context, st objstore.Store) (l Lease, found bool, err error) {
	b, err := st.Get(ctx, leaseKey)
	if objstore.IsNotFound(err) {
		return Lease{}, false, nil
	}
	if err != nil {
		return Lease{}, false, fmt.Errorf("lsm: read %s: %w", leaseKey, err)
	}
	l, err = ParseLease(b)
	return l, err == nil, err
}

// HolderAlive reports whether the process that holds l still runs, as far
// as this host can tell: known is false when l was taken on another host.
func (l Lease) HolderAlive(host string) (alive, known bool) {
	if l.Host == "" || l.Host != host {
		return false, false
	}
	return pidAlive(l.PID), true
}

// LeaseHeld is this writer's lease as last written (ok false on a
// read-only DB) and the lease's time to live.
func (db *DB) LeaseHeld() (l Lease, ttl time.Duration, ok bool) {
	db.leaseMu.Lock()
	defer db.leaseMu.Unlock()
	return db.lease, db.opts.LeaseTTL, db.lease.Epoch != 0
}
