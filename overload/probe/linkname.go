package probe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// LinkName is a network link's name as a reading gives it: the kernel's,
// or, when that is not UTF-8 (the kernel takes any bytes but /, : and
// white space), with each byte that is not written \xNN, so that two such
// links keep two names in the reading's JSON and a Prometheus label (which
// must be UTF-8) can carry them. The kernel's name stays the one sysfs is
// read by.
func LinkName(name string) string {
	if utf8.ValidString(name) {
		return name
	}
	var b strings.Builder
	for len(name) > 0 {
		r, n := utf8.DecodeRuneInString(name)
		if r == utf8.RuneError && n == 1 {
			fmt.Fprintf(&b, `\x%02x`, name[0])
		} else {
			b.WriteString(name[:n])
		}
		name = name[n:]
	}
	return b.String()
}
