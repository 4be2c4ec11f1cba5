// Package api is the platform's HTTP API over the use cases of package
// fleet: one mux (Handler) with the bearer-token check (an admin's,
// operators' and nodes' tokens, read by ReadTokens), the refusals'
// statuses and reasons, paging (?limit=, ?after= and Link rel="next"),
// /metrics, and the operators' dashboard with its sessions. Beside it,
// the connection cap the server runs under (NewCapListener, AtCap,
// ConnContext).
//
// A reading's way through the platform starts here: POST /report is
// reportHandler, which checks the token and the body and calls
// fleet.Fleet.Report.
//
//	h := api.AtCap(api.Handler(fleet.New(st, n), toks), maxConns)
package api
