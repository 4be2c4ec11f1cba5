package btcdlab

import (
	"bytes"
	"encoding/hex"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/btcsuite/btcd/wire"
)

// litecoinMain is Litecoin's mainnet magic, as btcd's wire writes it.
const litecoinMain wire.BitcoinNet = 0xdbb6c0fb

// checkSend is the exchange docs/pinproxy.md gives for -check-send: a
// version message (protocol 70015, no services, timestamp 0, empty
// addresses, nonce "pinproxy", user agent "/pinproxy-check/", height 0,
// no relay) and a verack, for the network net.
func checkSend(t testing.TB, net wire.BitcoinNet) []byte {
	t.Helper()
	zero := &wire.NetAddress{Timestamp: time.Unix(0, 0)}
	v := wire.NewMsgVersion(zero, zero, 0x79786f72706e6970, 0) // "pinproxy", little-endian
	v.ProtocolVersion = 70015
	v.Timestamp = time.Unix(0, 0)
	v.UserAgent = "/pinproxy-check/"
	v.DisableRelayTx = true
	var b bytes.Buffer
	if err := wire.WriteMessage(&b, v, 70015, net); err != nil {
		t.Fatal(err)
	}
	if err := wire.WriteMessage(&b, wire.NewMsgVerAck(), 70015, net); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// checkExpect is what -check-expect gives for the network net: its magic
// and the command "version", the header of the node's own version.
func checkExpect(net wire.BitcoinNet) []byte {
	b := []byte{byte(net), byte(net >> 8), byte(net >> 16), byte(net >> 24)}
	return append(b, "version\x00\x00\x00\x00\x00"...)
}

// The bytes docs/pinproxy.md gives for a Litecoin node's check are what
// btcd's wire package encodes.
func TestDocumentedCheckBytes(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/pinproxy.md")
	if err != nil {
		t.Fatal(err)
	}
	for flag, want := range map[string][]byte{
		"-check-send":   checkSend(t, litecoinMain),
		"-check-expect": checkExpect(litecoinMain),
	} {
		m := regexp.MustCompile(regexp.QuoteMeta(flag) + ` ([0-9a-f]+)`).FindSubmatch(doc)
		if m == nil {
			t.Errorf("docs/pinproxy.md gives no %s example", flag)
			continue
		}
		if got := string(m[1]); got != hex.EncodeToString(want) {
			t.Errorf("docs/pinproxy.md %s\n%s\nwant (btcd's wire encoding)\n%x", flag, got, want)
		}
	}
}
