package pgtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// StartStandby makes a streaming-replication standby of c, named name
// (its application_name, which c's synchronous_standby_names may list),
// from a base backup of c, and starts it on a port of its own. The
// standby is a Cluster of its own: Promote makes it a primary; Stop
// stops it and removes it.
func (c *Cluster) StartStandby(name string) (*Cluster, error) {
	if name == "" || strings.ContainsAny(name, " '\"\\=") {
		return nil, fmt.Errorf("pgtest: standby name %q: want a word", name)
	}
	s := &Cluster{bin: c.bin, as: c.as, settings: c.settings}
	if err := s.makeDirs("nk-pg-standby-"); err != nil {
		return nil, err
	}
	conn := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres application_name=%s", c.Port, name)
	if err := s.run("pg_basebackup", "-d", conn, "-D", s.data, "-X", "stream", "-R", "--no-sync"); err != nil {
		s.remove()
		return nil, err
	}
	// -R writes primary_conninfo; a later line in the same file wins,
	// and this one names the standby for synchronous_standby_names.
	auto, err := os.OpenFile(filepath.Join(s.data, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		s.remove()
		return nil, err
	}
	_, err = fmt.Fprintf(auto, "primary_conninfo = '%s'\n", conn)
	if cerr := auto.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		s.remove()
		return nil, err
	}
	if err := s.startOnFreePort(); err != nil {
		return nil, err
	}
	return s, nil
}

// Promote makes a standby a primary (pg_ctl promote), and returns once
// it takes writes.
func (c *Cluster) Promote() error {
	return c.run("pg_ctl", "-D", c.data, "-w", "-t", "60", "promote")
}

// Kill sends SIGKILL to the server (its postmaster), as a crash would:
// nothing is flushed or shut down; the backends exit once they see it
// gone.
func (c *Cluster) Kill() error {
	pid, err := c.ServerPID()
	if err != nil {
		return err
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}
