//go:build !linux

package pinproxy

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/proofkit/nodekit/pinproxy/handover"
)

// Handoff hands the proxy's listeners and connections to another
// process. Off Linux it returns an error that wraps errors.ErrUnsupported
// and changes nothing.
func (p *Proxy) Handoff(ctx context.Context, peer *handover.Peer, extra ...net.Listener) (HandoffResult, error) {
	peer.Close()
	return HandoffResult{}, fmt.Errorf("pinproxy: upgrade: handing connections to another process: %w", errors.ErrUnsupported)
}

// Adopt takes what another process's Handoff hands over. Off Linux it
// returns an error that wraps errors.ErrUnsupported.
func (p *Proxy) Adopt(ctx context.Context, peer *handover.Peer) (*Adopted, error) {
	peer.Close()
	return nil, fmt.Errorf("pinproxy: adopt: taking connections from another process: %w", errors.ErrUnsupported)
}

func (l *link) held() bool { return false } // no hand-over holds a link off Linux
func (l *link) ended()     {}
