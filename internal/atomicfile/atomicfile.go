// Package atomicfile writes a file so that a reader, or the next start
// after a crash, sees either the old content or the new one, never a part.
//
// It is the one implementation behind the agent's queue and state, the
// sysctl.d fallback file and the example platform's file store.
//
// Crash semantics: the data goes to a temporary file in the same
// directory, which is synced, renamed over the target, and then the
// directory is synced so the rename itself survives a power loss. A
// process killed at any point leaves the target untouched or replaced; at
// worst a temporary file named ".NAME.*.tmp" is left beside it, which the
// next WriteFile does not read and RemoveTemps removes.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WriteFile writes data to path atomically with permissions perm.
// Errors name the path and the step that failed.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return fmt.Errorf("atomicfile: writing %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	step := func(what string, e error) error {
		if e != nil {
			return fmt.Errorf("atomicfile: writing %s: %s: %w", path, what, e)
		}
		return nil
	}
	if err = step("chmod", tmp.Chmod(perm)); err != nil {
		return err
	}
	if _, werr := tmp.Write(data); werr != nil {
		return step("write", werr)
	}
	if err = step("sync", tmp.Sync()); err != nil {
		return err
	}
	if err = step("close", tmp.Close()); err != nil {
		return err
	}
	if err = step("rename", os.Rename(tmp.Name(), path)); err != nil {
		return err
	}
	return step("sync directory", SyncDir(dir))
}

// SyncDir makes a rename or a creation in dir durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// RemoveTemps removes the temporary files a killed WriteFile of path may
// have left beside it.
func RemoveTemps(path string) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	prefix := "." + base + "."
	var first error
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, prefix) && strings.HasSuffix(n, ".tmp") {
			if err := os.Remove(filepath.Join(dir, n)); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}
