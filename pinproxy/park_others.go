//go:build !linux

package pinproxy

import (
	"net"
	"time"
)

// parker is nil off Linux: connections never park.
type parker struct{ lps *loops }

type parkedLink struct{}

func newParker(time.Duration, func(net.Conn), time.Time, *memoryGate) *parker { return nil }

func (pk *parker) add(*link)            {}
func (pk *parker) remove(*link)         {}
func (pk *parker) park(*link) bool      { return false }
func (pk *parker) unpause(l *link) bool { l.setState(linkActive); return true }
func (pk *parker) closed(net.Conn)      {}
func (pk *parker) parkedNow() int       { return 0 }
