// Package api is the platform's HTTP API over the use cases of package
// fleet: one mux (Handler) with the bearer-token check (an admin's,
// operators' and nodes' tokens, read by ReadTokens), the refusals'
// statuses and reasons, paging (?limit=, ?after= and Link rel="next"),
// /metrics, and the operators' dashboard with its sessions. Beside it,
// the server it runs in (NewServer) and the connection cap it runs
// under (NewCapListener).
//
// A reading's way through the platform starts here: POST /report is
// reportHandler, which checks the token and the body and calls
// fleet.Fleet.Report.
//
//	srv := api.NewServer(api.Handler(fleet.New(st, n), toks), maxConns, log)
//	srv.Serve(api.NewCapListener(ln, maxConns, log))
package api
