// Command platform is a small example of the platform's side of nodekit:
// an HTTP service that takes the agents' readings, keeps one
// overload.Tracker per node, answers whether a node takes new connections,
// runs routing plan rounds over an in-memory route table, and prices each
// route's session with the pricing package.
//
// Its embedded store is one process, one lock and one JSON file per node in
// -state-dir (written atomically after each change, read back at start, so
// a restart loses nothing). With -db postgres://… the state lives in
// PostgreSQL instead, and several replicas may serve one fleet (see
// docs/platform.md, "Running at fleet scale"). The route table is
// seeded from a JSON file, and "carrying out" a plan means closing the
// route in that table and logging it.
//
//	go run ./examples/platform -token-file token -routes examples/platform/routes.json
//
// API (everything but /healthz and /readyz needs "Authorization: Bearer <token>": the
// admin's token may do anything; an operator's reads and sets their own
// nodes only; a node's agent's may only report for that node; see
// docs/platform.md for the table):
//
//	POST /report          an overload.Reading, as the agent sends it
//	GET  /admit?node=X    {"admit":false,"reason":"overloaded",…}
//	POST /routes          {"node","user","key"} opens a route if admitted (409 if not)
//	POST /traffic         {"route","bytes"} charges traffic at the session's price
//	POST /price           {"node","price"} changes a node's price from now on
//	POST /max-users       {"node","max_users"} sets a node's cap of live users
//	POST /nodes/X/pause   pauses routing to a node; /nodes/X/approve gives it back
//	GET  /nodes, /nodes/X per node: overload, admission, routes, last plan, events
//	GET  /nodes/X/events  the node's events, oldest first
//	GET  /notices         every notice, by id (the order sent)
//	GET  /plans           each node's latest plan that closed something
//	PUT  /receiver        {"url"} sets an operator's own receiver (its whsec_ secret answered once)
//	POST /receiver/rotate a new secret; the old one signs beside it for a day
//	POST /receiver/test   a test message to the operator's receiver, now
//	POST /receiver/enable enables it again after it failed for 5 days
//	GET  /metrics         notice deliveries, Prometheus text format
//	GET  /healthz         {"ok":true}, no token
//	GET  /readyz          {"ready":true}, or 503 while the store cannot serve, no token
//
// Every list pages one way: ?limit=N (1 to 1000, by default 1000), and a
// page that may be followed by more has "Link: <…?after=…&limit=N>;
// rel="next"", to be followed as it is.
//
// -max-conns caps the connections served at once (by default from the
// open-file limit); over it /healthz is still answered and the rest 503.
// Secrets in -db (a URL's password; password, sslpassword and sslkey in
// a URL's query or in key=value form) never reach a log line or an error.
//
// The garbage collector runs at GOGC=300, under a memory limit of half
// the memory the process may use (gc.go says why); GOGC and GOMEMLIMIT
// in the environment set either as for any Go program.
//
// With -notify-file, each notice is delivered to the node's operator as
// a Standard Webhooks message (internal/notify), through an outbox written
// with the notice; SIGHUP reloads the file.
package main
