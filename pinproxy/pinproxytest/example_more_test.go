package pinproxytest_test

import (
	"bufio"
	"fmt"
	"net"

	"github.com/proofkit/nodekit/pinproxy/pinproxytest"
)

// Line is what a test node speaks: each line a client sends comes back
// prefixed with the node's name, so a client can tell which upstream the
// proxy pinned it to.
func ExampleLine() {
	client, server := net.Pipe()
	defer client.Close()
	node := &pinproxytest.Node{Name: "eu-01"}
	go pinproxytest.Line(node, server)

	r := bufio.NewReader(client)
	for _, msg := range []string{"ping", "block 3202027"} {
		fmt.Fprintln(client, msg)
		answer, err := r.ReadString('\n')
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Print(answer)
	}
	// Output:
	// eu-01 ping
	// eu-01 block 3202027
}
