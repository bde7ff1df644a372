package fs

import (
	"context"
	"fmt"

	"ebbfs.dev/ebbfs/internal/keys"
	"ebbfs.dev/ebbfs/objstore"
)

// KDFForTests, when set, replaces the production Argon2id parameters for new
// descriptors. Only tests set it (Argon2id at 64 MiB costs ~100 ms a call).
var KDFForTests func() keys.KDFParams

// Init creates a new filesystem in an empty store: it writes the descriptor
// (put-if-absent) and returns the keys. It fails if the store already holds one.
func Init(ctx context.Context, s objstore.Store, password string) (*keys.Keys, error) {
	return InitCipher(ctx, s, password, keys.DefaultCipher())
}

// InitCipher is Init with the frame cipher chosen (keys.ParseCipher).
func InitCipher(ctx context.Context, s objstore.Store, password string, c keys.Cipher) (*keys.Keys, error) {
	if !c.Valid() {
		return nil, fmt.Errorf("init: unknown cipher %q", c)
	}
	if _, err := s.Head(ctx, keys.DescriptorKey); err == nil {
		return nil, fmt.Errorf("init: the store already holds a filesystem (%s exists)", keys.DescriptorKey)
	} else if !objstore.IsNotFound(err) {
		return nil, fmt.Errorf("init: %w", err)
	}
	kdf := keys.DefaultKDF()
	if KDFForTests != nil {
		kdf = KDFForTests()
	}
	d, k, err := keys.NewDescriptorCipher(password, kdf, c)
	if err != nil {
		return nil, err
	}
	if _, err := s.Put(ctx, keys.DescriptorKey, d.Marshal(), objstore.PutOptions{IfAbsent: true}); err != nil {
		if objstore.IsPreconditionFailed(err) {
			return nil, fmt.Errorf("init: the store already holds a filesystem (%s exists)", keys.DescriptorKey)
		}
		return nil, fmt.Errorf("init: writing %s: %w", keys.DescriptorKey, err)
	}
	return k, nil
}

func readDescriptor(ctx context.Context, s objstore.Store) (*keys.Descriptor, error) {
	b, err := s.Get(ctx, keys.DescriptorKey)
	if err != nil {
		if objstore.IsNotFound(err) {
			return nil, fmt.Errorf("no ebbfs filesystem in this store (%s is missing); run `ebbfs init` first", keys.DescriptorKey)
		}
		return nil, fmt.Errorf("reading %s: %w", keys.DescriptorKey, err)
	}
	d, err := keys.ParseDescriptor(b)
	if err != nil {
		return nil, err
	}
	return d, nil
}

// Unlock reads the descriptor and unwraps the keys with password. A wrong
// password is keys.ErrWrongPassword; nothing is written to the store.
func Unlock(ctx context.Context, s objstore.Store, password string) (*keys.Keys, error) {
	d, err := readDescriptor(ctx, s)
	if err != nil {
		return nil, err
	}
	return d.Unlock(password)
}

// ChangePassword re-wraps the master key under a new password. Data and
// metadata objects are untouched; the descriptor is replaced with a
// conditional PUT so a concurrent change cannot be lost.
func ChangePassword(ctx context.Context, s objstore.Store, oldPassword, newPassword string) error {
	head, err := s.Head(ctx, keys.DescriptorKey)
	if err != nil {
		return fmt.Errorf("change-password: %w", err)
	}
	d, err := readDescriptor(ctx, s)
	if err != nil {
		return err
	}
	kdf := keys.DefaultKDF()
	if KDFForTests != nil {
		kdf = KDFForTests()
	}
	nd, err := d.Rewrap(oldPassword, newPassword, kdf)
	if err != nil {
		return err
	}
	if _, err := s.Put(ctx, keys.DescriptorKey, nd.Marshal(), objstore.PutOptions{IfMatch: head.ETag}); err != nil {
		return fmt.Errorf("change-password: writing %s: %w", keys.DescriptorKey, err)
	}
	return nil
}

// Upgrade moves the filesystem's descriptor to keys.FormatVersion, after
// checking password against it, with a conditional PUT so that a
// concurrent change cannot be lost. It returns the format before and
// after (equal: nothing to do). Data and metadata objects are untouched;
// a writer gets the new format's features from its next start.
func Upgrade(ctx context.Context, s objstore.Store, password string) (from, to int, err error) {
	head, err := s.Head(ctx, keys.DescriptorKey)
	if err != nil {
		return 0, 0, fmt.Errorf("upgrade: %w", err)
	}
	d, err := readDescriptor(ctx, s)
	if err != nil {
		return 0, 0, err
	}
	if _, err := d.Unlock(password); err != nil {
		return d.Format, d.Format, err
	}
	if d.Format >= keys.FormatVersion {
		return d.Format, d.Format, nil
	}
	nd := d.Upgraded()
	if _, err := s.Put(ctx, keys.DescriptorKey, nd.Marshal(), objstore.PutOptions{IfMatch: head.ETag}); err != nil {
		return d.Format, d.Format, fmt.Errorf("upgrade: writing %s: %w", keys.DescriptorKey, err)
	}
	return d.Format, nd.Format, nil
}
