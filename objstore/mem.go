package objstore

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Mem is an in-memory Store for unit tests.
type Mem struct {
	mu   sync.Mutex
	objs map[string]memObj
}

type memObj struct {
	data []byte
	etag string
	mod  time.Time
}

var _ Store = (*Mem)(nil)

// NewMem returns an empty in-memory store.
func NewMem() *Mem { return &Mem{objs: map[string]memObj{}} }

func etagOf(b []byte) string {
	h := md5.Sum(b)
	return hex.EncodeToString(h[:])
}

func (m *Mem) Put(_ context.Context, key string, data []byte, opts PutOptions) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cur, exists := m.objs[key]
	if opts.IfAbsent && exists {
		return "", fmt.Errorf("put %s: %w", key, ErrPreconditionFailed)
	}
	if opts.IfMatch != "" && (!exists || cur.etag != opts.IfMatch) {
		return "", fmt.Errorf("put %s: %w", key, ErrPreconditionFailed)
	}
	o := memObj{data: append([]byte(nil), data...), etag: etagOf(data), mod: time.Now()}
	m.objs[key] = o
	return o.etag, nil
}

func (m *Mem) Get(_ context.Context, key string) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	return append([]byte(nil), o.data...), nil
}

func (m *Mem) GetRange(_ context.Context, key string, off, length int64) ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if off < 0 || length < 0 || off > int64(len(o.data)) || length > int64(len(o.data))-off {
		return nil, fmt.Errorf("get %s: range [%d,+%d) outside object of %d bytes", key, off, length, len(o.data))
	}
	return append([]byte(nil), o.data[off:off+length]...), nil
}

func (m *Mem) Head(_ context.Context, key string) (ObjectInfo, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[key]
	if !ok {
		return ObjectInfo{}, fmt.Errorf("head %s: %w", key, ErrNotFound)
	}
	return ObjectInfo{Key: key, Size: int64(len(o.data)), ETag: o.etag, ModTime: o.mod}, nil
}

func (m *Mem) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

func (m *Mem) DeleteMany(ctx context.Context, keys []string) error {
	for _, k := range keys {
		_ = m.Delete(ctx, k)
	}
	return nil
}

func (m *Mem) List(_ context.Context, prefix, startAfter string, limit int) (ListPage, error) {
	if limit <= 0 {
		limit = 1000
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []string
	for k := range m.objs {
		if strings.HasPrefix(k, prefix) && k > startAfter {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var p ListPage
	if len(keys) > limit {
		keys, p.More = keys[:limit], true
	}
	for _, k := range keys {
		o := m.objs[k]
		p.Objects = append(p.Objects, ObjectInfo{Key: k, Size: int64(len(o.data)), ETag: o.etag, ModTime: o.mod})
	}
	return p, nil
}
