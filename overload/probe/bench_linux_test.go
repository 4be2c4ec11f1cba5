package probe

import (
	"fmt"
	"os"
)

func holdConnections() int {
	fmt.Fprintln(os.Stderr, "todo")
	return 1
}
