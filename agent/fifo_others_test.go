//go:build !unix

package agent

import "errors"

func mkfifo(string) error { return errors.ErrUnsupported }
