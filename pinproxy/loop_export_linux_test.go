package pinproxy

// LoopLoadsForTest returns how many connections each of p's event loops
// holds; nil without the loops.
func LoopLoadsForTest(p *Proxy) []int {
	if p.loops == nil {
		return nil
	}
	var n []int
	for _, lp := range p.loops.all() {
		n = append(n, int(lp.load.Load()))
	}
	return n
}
