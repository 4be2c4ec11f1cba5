package store

import (
	"cmp"
	"slices"
)

// IndexAfter returns the index of the first of the sorted ids after after.
func IndexAfter(ids []string, after string) int {
	i, found := slices.BinarySearch(ids, after)
	if found {
		i++
	}
	return i
}

// EventList is n's event list, oldest first: the tracker's overload
// starts and ends and the platform's own events (marks), each numbered
// by its place among every event the node had, so a page's cursor stays
// valid as old ones fall off. A mark carries its number; the tracker's
// events take the numbers up to EventsSeen that the marks left, newest
// last.
func EventList(n *Node) []NumberedEvent {
	evs := n.Tracker.Events()
	out := make([]NumberedEvent, 0, len(evs)+len(n.Marks))
	taken := make(map[int64]bool, len(n.Marks))
	for _, m := range n.Marks {
		taken[m.ID] = true
	}
	num := n.EventsSeen
	for i := len(evs) - 1; i >= 0; i-- {
		for taken[num] {
			num--
		}
		out = append(out, NumberedEvent{ID: num, Event: evs[i]})
		num--
	}
	out = append(out, n.Marks...)
	slices.SortFunc(out, func(a, b NumberedEvent) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
