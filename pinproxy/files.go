package pinproxy

// MaxConnsForFiles returns a MaxConns that fits an open-file limit of
// nofile: each client takes two file descriptors (its own and its
// upstream's), and a reserve of a twentieth of the limit, at least 32, is
// left for listeners, the admin server, health checks, test-connects and
// logs. It returns at least 1.
func MaxConnsForFiles(nofile uint64) int {
	reserve := max(nofile/20, 32)
	if nofile <= reserve+2 {
		return 1
	}
	return int(min((nofile-reserve)/2, 1<<30))
}
