//go:build !unix

package agent

// oNoFollow is 0 where open has no such flag: the queue's Lstat check
// at start is what refuses a link there.
const oNoFollow = 0
