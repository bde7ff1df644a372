package objstore

import "context"

// LockKeyForTests takes key's lock in l as a Put would, for tests of what
// a process holding it does to others.
func LockKeyForTests(ctx context.Context, l *Local, key string) (unlock func(), err error) {
	return l.lock(ctx, key)
}
