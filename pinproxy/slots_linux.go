package pinproxy

// slotTable holds links by slot for an epoll set: an event carries a key,
// gen<<32 | slot, and finds its link only while the slot still holds the
// generation it was armed with, so a stale event (its link gone, the slot
// reused since) finds nothing. Generations are 31 bits, never 0: bit 63 of
// a key is free for the event loops' side, and 0 is no key. The event
// loops and the parker each keep one, under their own lock.
type slotTable struct {
	slots []slot
	free  []uint32 // free slots
}

// slot is one link's place in a slotTable.
type slot struct {
	l   *link
	gen uint32
}

// take puts l in a free slot and returns its key.
func (t *slotTable) take(l *link) uint64 {
	var i uint32
	if n := len(t.free); n > 0 {
		i, t.free = t.free[n-1], t.free[:n-1]
	} else {
		i = uint32(len(t.slots))
		t.slots = append(t.slots, slot{})
	}
	s := &t.slots[i]
	s.l, s.gen = l, (s.gen+1)&0x7fffffff
	if s.gen == 0 {
		s.gen = 1
	}
	return uint64(s.gen)<<32 | uint64(i)
}

// lookup returns the link key names, or nil.
func (t *slotTable) lookup(key uint64) *link {
	i, gen := uint32(key), uint32(key>>32)&0x7fffffff
	if int(i) >= len(t.slots) || t.slots[i].gen != gen {
		return nil
	}
	return t.slots[i].l
}

// release frees the slot of key.
func (t *slotTable) release(key uint64) {
	i := uint32(key)
	t.slots[i].l = nil
	t.free = append(t.free, i)
}
