package overload

import (
	"strings"
	"testing"
)

func TestCheckNode(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"eu-01", true},
		{"n1.example.com", true},
		{"A_b-9", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"-eu", false},
		{".eu", false},
		{"_eu", false},
		{"eu 01", false},
		{"eu/01", false},
		{"nœud", false},
		{"eu\x0001", false},
	} {
		err := CheckNode(tt.name)
		if (err == nil) != tt.ok {
			t.Errorf("CheckNode(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "want 1 to 64 of A-Z a-z 0-9 . _ -") {
			t.Errorf("CheckNode(%q) = %v: does not say the rule", tt.name, err)
		}
	}
}
