// Package agent is the node agent's logic, so that cmd/proofkit-agent
// stays a thin binary and other services can embed the agent.
//
// An Agent takes a reading of its node every interval (30 s by default)
// from a Source (a *probe.Probe on Linux), evaluates it with an
// overload.Tracker ("3 of 5 readings"), logs each overload start and end
// and each notice, and keeps the tracker's state in a state directory, so
// that a restart neither forgets an overload nor sends a second notice
// within the hour. It locks that directory from New to Close: a second
// agent on it fails at New (ErrLocked) instead of keeping a tracker of its
// own and sending its own notices.
//
// With a report URL, every reading is POSTed to the platform as the
// overload.Reading JSON, version 2, "Authorization: Bearer <token>": each
// carries the agent's run id and a seq, saved in the state directory, so
// the platform orders readings and recognises a retry by them, not by the
// node's clock (see overload.ReadingVersion). Reports go through a bounded
// on-disk queue (reports.jsonl in the state directory, one reading a line,
// fsync'd appends cut back to the last whole line when one fails, atomic
// rewrites): while the platform does not answer they wait, in order, and
// are sent oldest first when it answers again, with a back-off from 1 s
// doubling to the interval, each wait spread over 0.8–1.2 times itself (a
// Retry-After in seconds or as an HTTP date is honoured, up to 10
// minutes). Nothing is lost within the bound (120 readings,
// one hour, by default); beyond it the oldest are dropped, counted and
// logged, since the platform needs the node's latest state most. A
// report the platform may have counted is never among them: the oldest
// report, once sent with no answer that settles it (the connection reset
// or timed out, a 5xx), or queued by the process before, which may have
// sent it, stays until the platform answers for it, and the oldest after
// it go instead. So a report logged as dropped never reached the platform.
//
// The platform's answer decides a report's fate. A 2xx removes it (one
// that says {"duplicate": true} was counted before, and is counted as
// such). A 409, 400, 413, 422 or other 4xx means the platform refuses the
// report itself: it is dropped, logged with its run and seq, and counted
// by the reason the answer gives (proofkit_agent_reports_refused_total),
// never as sent. A redirect is never followed: the report stays, and a
// warning names the Location. 401, 403, 404, 405, 408, 429, 5xx and
// network errors keep it for a retry, except a 401 or 403 for a report
// queued under the node's old name (Config.Node changed since): the token
// may not report for that name, so the report is dropped at once, logged
// and counted (reason "renamed") and the new name's readings go on; with a
// token that may (an operator's), it is sent under its old name. A sent
// report's line is blanked in place while others wait (draining a backlog
// writes each report once more, not the whole file once a report), so a
// crash sends none of them again. A reading's report is
// queued before its seq is saved and sent only after, so a crash between
// the two leaves no gap in the seqs. One line says when delivery recovers
// after failures.
//
// Every reading taken is therefore counted once by the platform, or still
// queued on disk, or logged and counted as dropped with its reason; the
// package's fault-injection test checks exactly that against the built
// proofkit-agent, with SIGKILLs, clock steps and every class of answer.
//
// The token is either fixed (Config.Token) or read from a file
// (Config.TokenFile), so that operators can rotate it without a restart.
// The agent reads the file again when the platform answers 401 or 403 (at
// most once an interval) and when ReloadToken is called (proofkit-agent
// does on SIGHUP); a report refused with the old token stays queued and
// goes again, at once, with the new one. The file is read as /proc files
// are (a regular file of at most 64 KiB: a FIFO or a device is an error at
// once, never a hang). A read that fails (the file missing, not a regular
// file, empty, or of more than one line) keeps the token the agent has
// and is logged, naming the file and the reason; the token itself is
// never logged.
//
// Handler serves a page at / (HTML, no script), /metrics (Prometheus
// text format, every series proofkit_agent_*), /status, /events, /healthz
// and /readyz.
//
//	p, err := probe.New(probe.Config{})
//	if err != nil { … }
//	a, err := agent.New(agent.Config{
//		Source:    p,
//		StateDir:  "/var/lib/proofkit-agent",
//		ReportURL: "https://platform.example/api/v1/readings",
//		TokenFile: "/etc/proofkit-agent/token",
//		Logger:    logger,
//	})
//	if err != nil { … } // errors.Is(err, agent.ErrLocked): another agent runs there
//	defer a.Close()
//	go http.ListenAndServe("127.0.0.1:9464", a.Handler())
//	// on SIGHUP: if _, err := a.ReloadToken(); err != nil { log it; the old token stays }
//	err = a.Run(ctx) // until ctx ends; saves state on the way out
package agent
