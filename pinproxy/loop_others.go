//go:build !linux

package pinproxy

import (
	"net"
	"time"
)

// loops is nil off Linux: connections copy with goroutines.
type loops struct{}

type loopState struct{}

func newLoops(bool, time.Duration, net.KeepAliveConfig, *memoryGate) *loops { return nil }

func (ls *loops) attach(*link, [2]bool) bool { return false }
func (ls *loops) reattach(*link) bool        { return false }
func (ls *loops) stop()                      {}
func (ls *loops) idle() int                  { return 0 }
func (l *link) kill() bool                   { return false }
