package overload

import "fmt"

// MaxNodeLen is the longest node name CheckNode takes.
const MaxNodeLen = 64

// NodeRule says in words which node names CheckNode takes, for errors
// and help texts.
const NodeRule = "1 to 64 of A-Z a-z 0-9 . _ - (not starting with . _ -)"

// CheckNode reports whether name is a node name: 1 to MaxNodeLen
// letters, digits, '.', '_' or '-', the first a letter or a digit. It is
// the rule a platform holds a reading's Node to (the reference platform
// refuses every reading, token line and path whose node breaks it), and
// the one an agent checks its own name against before it reports. A host
// name longer than 64 characters, or one with other characters, breaks
// it. The error says the name and what is wanted.
func CheckNode(name string) error {
	if len(name) == 0 || len(name) > MaxNodeLen || !alnum(name[0]) {
		return fmt.Errorf("node %.80q: want %s", name, NodeRule)
	}
	for i := 1; i < len(name); i++ {
		if c := name[i]; !alnum(c) && c != '.' && c != '_' && c != '-' {
			return fmt.Errorf("node %.80q: want %s", name, NodeRule)
		}
	}
	return nil
}

func alnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
