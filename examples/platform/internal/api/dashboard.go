package api

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/proofkit/nodekit/examples/platform/internal/fleet"
	"github.com/proofkit/nodekit/examples/platform/internal/store"
	"github.com/proofkit/nodekit/pricing"
	"github.com/proofkit/nodekit/routing"
)

// The operators' dashboard: server-rendered pages, no script, over the
// same use cases as the JSON API.
//
//	GET  /                                       the login form, or the operator's nodes
//	POST /login                                  token=… : a session cookie
//	POST /logout                                 ends the session
//	POST /dashboard/price                        node, price
//	POST /dashboard/max-users                    node, max_users
//	POST /dashboard/notices/{id}/redeliver
//
// Only an operator's token logs in. The admin's is refused: it can do
// everything, and a browser session is one more place for it to be taken
// from; the admin works with the API. A node's agent token only reports.
//
// A session is a random 256-bit id in an HttpOnly, SameSite=Strict
// cookie (Secure, and named __Host-session, when the request came over
// TLS, or through a proxy that says so with X-Forwarded-Proto), held in the process for SessionLifetime; the token is never in
// the cookie nor kept. Every POST is checked twice against cross-site
// requests: net/http's CrossOriginProtection (Sec-Fetch-Site, or Origin
// against Host), then, but for the login, the session's own CSRF token
// in a hidden field.

//go:embed dashboard/*.html
var dashboardFiles embed.FS

var dashboardPages = template.Must(template.New("").Funcs(template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
}).ParseFS(dashboardFiles, "dashboard/*.html"))

const (
	// SessionLifetime is how long a session lasts from its login.
	SessionLifetime = 8 * time.Hour
	// maxSessions bounds the sessions held: past it a login ends the
	// session that would expire first.
	maxSessions = 10_000
	// maxForm bounds a form's body: a token or a few numbers.
	maxForm = 16 << 10
	// dashboardNotices is how many of the newest notices the page shows.
	dashboardNotices = 50
	// dashboardScan is how far back from the last notice, in ids, the
	// page looks for the operator's.
	dashboardScan = 100 * fleet.MaxPage
)

// dashboardSession is one operator's login.
type dashboardSession struct {
	operator string
	token    [sha256.Size]byte // the SHA-256 of the token it logged in with
	csrf     string            // the hidden field every form of the session carries
	expires  time.Time
	flash    string // what the last form did, shown once
}

// dashboard serves the pages; its sessions are keyed by the SHA-256 of
// the cookie's value.
type dashboard struct {
	f     *fleet.Fleet
	keys  *keys
	cross *http.CrossOriginProtection

	mu       sync.Mutex
	sessions map[[sha256.Size]byte]*dashboardSession
}

// serveDashboard registers the dashboard's pages on mux.
func serveDashboard(mux *http.ServeMux, f *fleet.Fleet, ks *keys) {
	d := &dashboard{f: f, keys: ks, cross: http.NewCrossOriginProtection(),
		sessions: map[[sha256.Size]byte]*dashboardSession{}}
	mux.HandleFunc("GET /{$}", d.home)
	mux.HandleFunc("POST /login", d.login)
	mux.HandleFunc("POST /logout", d.form(func(w http.ResponseWriter, r *http.Request, s *dashboardSession) {
		d.logout(w, r)
	}))
	mux.HandleFunc("POST /dashboard/price", d.form(func(w http.ResponseWriter, r *http.Request, s *dashboardSession) {
		node := r.PostForm.Get("node")
		p, err := strconv.ParseInt(strings.TrimSpace(r.PostForm.Get("price")), 10, 64)
		if err != nil {
			d.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("price %.40q: want a whole number of minor units per GB, 0 or more", r.PostForm.Get("price")))
			return
		}
		d.done(w, r, s, d.mine(r, s, node, func(ctx context.Context) error {
			return d.f.SetPrice(ctx, fleet.PriceRequest{Node: node, Price: pricing.Price(p)})
		}), fmt.Sprintf("The price of %s is %d from now on.", node, p))
	}))
	mux.HandleFunc("POST /dashboard/max-users", d.form(func(w http.ResponseWriter, r *http.Request, s *dashboardSession) {
		node := r.PostForm.Get("node")
		n, err := strconv.Atoi(strings.TrimSpace(r.PostForm.Get("max_users")))
		if err != nil {
			d.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("max_users %.40q: want a whole number, 0 (no cap) or more", r.PostForm.Get("max_users")))
			return
		}
		d.done(w, r, s, d.mine(r, s, node, func(ctx context.Context) error {
			return d.f.SetMaxUsers(ctx, fleet.MaxUsersRequest{Node: node, MaxUsers: n})
		}), fmt.Sprintf("The max_users of %s is %d.", node, n))
	}))
	// The operator's own receiver. A secret is shown once, in the page
	// the form leads back to.
	receiver := func(do func(ctx context.Context, r *http.Request, s *dashboardSession) (string, error)) http.HandlerFunc {
		return d.form(func(w http.ResponseWriter, r *http.Request, s *dashboardSession) {
			ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
			defer cancel()
			ok, err := do(ctx, r, s)
			d.done(w, r, s, err, ok)
		})
	}
	mux.HandleFunc("POST /dashboard/receiver", receiver(func(ctx context.Context, r *http.Request, s *dashboardSession) (string, error) {
		v, created, err := d.f.SetReceiver(ctx, s.operator, fleet.ReceiverRequest{URL: strings.TrimSpace(r.PostForm.Get("url"))})
		if created {
			return "Your receiver is set. Its secret, shown this once (keep it where your receiver checks signatures): " + v.Secret, err
		}
		return "Your receiver's URL is changed; its secret is the same.", err
	}))
	mux.HandleFunc("POST /dashboard/receiver/rotate", receiver(func(ctx context.Context, _ *http.Request, s *dashboardSession) (string, error) {
		v, err := d.f.RotateReceiver(ctx, s.operator)
		return fmt.Sprintf("Your receiver's new secret, shown this once: %s. The old one signs beside it until %s.",
			v.Secret, v.Rotating.UTC().Format("2006-01-02 15:04:05 UTC")), err
	}))
	mux.HandleFunc("POST /dashboard/receiver/test", receiver(func(ctx context.Context, _ *http.Request, s *dashboardSession) (string, error) {
		a, err := d.f.TestReceiver(ctx, s.operator)
		if a.Delivered {
			return fmt.Sprintf("Test message %s: your receiver took it (HTTP %d).", a.ID, a.Status), err
		}
		return fmt.Sprintf("Test message %s: not taken: %s.", a.ID, a.Error), err
	}))
	mux.HandleFunc("POST /dashboard/receiver/enable", receiver(func(ctx context.Context, _ *http.Request, s *dashboardSession) (string, error) {
		_, err := d.f.EnableReceiver(ctx, s.operator)
		return "Your receiver is enabled again: your nodes' notices go to it from now on.", err
	}))
	mux.HandleFunc("POST /dashboard/notices/{id}/redeliver", d.form(func(w http.ResponseWriter, r *http.Request, s *dashboardSession) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id < 1 {
			d.refuse(w, r, http.StatusBadRequest, fmt.Sprintf("notice %.40q: want a notice's id, 1 or more", r.PathValue("id")))
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		err = d.f.Redeliver(ctx, id, func(node string) bool { return d.f.OwnersNow()[node] == s.operator })
		d.done(w, r, s, err, fmt.Sprintf("Notice %d is to be delivered again, with its first webhook-id.", id))
	}))
}

// mine runs do on node if it is s's operator's, within requestTimeout;
// another's node is refused as one that does not exist.
func (d *dashboard) mine(r *http.Request, s *dashboardSession, node string, do func(ctx context.Context) error) error {
	if d.f.OwnersNow()[node] != s.operator {
		return notYours(node)
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	return do(ctx)
}

// done answers a form: back to the page with what it did, or the
// refusal in the API's status.
func (d *dashboard) done(w http.ResponseWriter, r *http.Request, s *dashboardSession, err error, ok string) {
	if err != nil {
		status, _, err := failureOf(err)
		d.refuse(w, r, status, err.Error())
		return
	}
	d.mu.Lock()
	s.flash = ok
	d.mu.Unlock()
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// overTLS reports whether r came over TLS: to this server, or to a
// proxy in front of it that says so with X-Forwarded-Proto: https. A
// client that sends that header itself over plain HTTP only gets a
// cookie its browser will not send back.
func overTLS(r *http.Request) bool {
	return r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")
}

// cookieName is the session cookie's name: over TLS, __Host-, which a
// browser keeps only when Secure, for this host and path /.
func cookieName(r *http.Request) string {
	if overTLS(r) {
		return "__Host-session"
	}
	return "session"
}

// sessionFrom is r's session, or why there is none: "" (no cookie),
// "unknown", "expired" or "revoked" (its token taken out of the token
// file since).
func (d *dashboard) sessionFrom(r *http.Request) (*dashboardSession, string) {
	c, err := r.Cookie(cookieName(r))
	if err != nil || c.Value == "" {
		return nil, ""
	}
	key := sha256.Sum256([]byte(c.Value))
	now := d.f.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.sessions[key]
	switch {
	case s == nil:
		return nil, "unknown"
	case !now.Before(s.expires):
		delete(d.sessions, key)
		return nil, "expired"
	}
	if id, ok := d.keys.load()[s.token]; !ok || id != (identity{operator: s.operator}) {
		delete(d.sessions, key)
		return nil, "revoked"
	}
	return s, ""
}

// sessionRefusal is the page's words for a cookie without a session.
var sessionRefusal = map[string]string{
	"unknown": "This session is not known (logged out, or the platform restarted): log in again.",
	"expired": "Your session has expired: log in again.",
	"revoked": "The token this session logged in with is no longer accepted: log in with your current one.",
}

// home shows the operator's nodes, or the login form.
func (d *dashboard) home(w http.ResponseWriter, r *http.Request) {
	s, why := d.sessionFrom(r)
	if s == nil {
		status := http.StatusOK
		if why != "" {
			status = http.StatusUnauthorized
			d.f.Log.Warn("dashboard: session refused", "reason", why, "remote", r.RemoteAddr)
			clearCookie(w, r)
		}
		d.render(w, status, "login", loginPage{Message: sessionRefusal[why]})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	page, err := d.page(ctx, s)
	if err != nil {
		status, _, err := failureOf(err)
		d.refuse(w, r, status, err.Error())
		return
	}
	d.render(w, http.StatusOK, "nodes", page)
}

// loginPage is the login form's data.
type loginPage struct{ Message string }

// nodesPage is the dashboard's data.
type nodesPage struct {
	Operator string
	CSRF     string
	Flash    string
	Nodes    []dashboardNode
	Notices  []store.NumberedNotice
	At       time.Time
	// Receiver is the operator's own receiver; nil when not set.
	// ReceiverHost is its scheme and host (the rest of a URL may hold a
	// credential).
	Receiver     *store.ReceiverView
	ReceiverHost string
}

// dashboardNode is an operator's node as the page shows it: the
// operator's view, its admission (for the cool-down's end) and where its
// notices go.
type dashboardNode struct {
	fleet.OperatorView
	Admit fleet.AdmitAnswer
	// Receiver is the scheme and host its notices go to (the rest of a
	// URL may hold a credential); "" when none. ReceiverAll: by the
	// platform's line for every node.
	Receiver    string
	ReceiverAll bool
	ReceiverOwn bool // the operator's own
	// Class is the state's class on the page: ok, overloaded, paused,
	// full, cooldown or unknown.
	Class string
}

// stateClass is v's state as a class of the page.
func stateClass(v fleet.OperatorView) string {
	switch {
	case !v.Registered:
		return "unknown"
	case v.Reason == routing.ReasonPaused:
		return "paused"
	case v.Reason == routing.ReasonOverloaded:
		return "overloaded"
	case v.Reason == routing.ReasonFull:
		return "full"
	case v.Reason == routing.ReasonCoolDown:
		return "cooldown"
	case v.Admitted:
		return "ok"
	}
	return "unknown"
}

// page reads what the dashboard shows s's operator.
func (d *dashboard) page(ctx context.Context, s *dashboardSession) (nodesPage, error) {
	d.mu.Lock()
	p := nodesPage{Operator: s.operator, CSRF: s.csrf, Flash: s.flash, At: d.f.Now()}
	s.flash = ""
	d.mu.Unlock()
	vs, _, err := d.f.OperatorViews(ctx, fleet.NodesOf(d.f.OwnersNow(), s.operator), "", fleet.MaxPage)
	if err != nil {
		return p, err
	}
	rs := d.f.Dispatch.Receivers()
	for _, v := range vs {
		n := dashboardNode{OperatorView: v, Class: stateClass(v)}
		if n.Admit, err = d.f.Admit(ctx, v.ID); err != nil {
			return p, err
		}
		if rc := rs.ForNode(v.ID); rc != nil {
			n.Receiver = (&url.URL{Scheme: rc.URL.Scheme, Host: rc.URL.Host}).String()
			n.ReceiverAll, n.ReceiverOwn = rc.Node == "*", rc.Operator != ""
		}
		p.Nodes = append(p.Nodes, n)
	}
	switch rv, err := d.f.ReceiverOf(ctx, s.operator); {
	case err == nil:
		p.Receiver = &rv
		if u, perr := url.Parse(rv.URL); perr == nil {
			p.ReceiverHost = (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
		}
	case !errors.Is(err, store.ErrUnknown):
		return p, err
	}
	p.Notices, err = d.newestNotices(ctx, func(node string) bool { return d.f.OwnersNow()[node] == s.operator })
	return p, err
}

// newestNotices is the newest dashboardNotices of the notices keep
// keeps, newest first, with their deliveries. It reads back from the
// last notice a window of MaxPage ids at a time, and no further than
// dashboardScan ids: a page costs what the operator's newest notices
// are spread over, never every notice the platform holds.
func (d *dashboard) newestNotices(ctx context.Context, keep func(node string) bool) ([]store.NumberedNotice, error) {
	last, err := d.lastNotice(ctx)
	if err != nil {
		return nil, err
	}
	out := []store.NumberedNotice{}
	for hi := last; hi > 0 && last-hi < dashboardScan && len(out) < dashboardNotices; {
		lo := max(hi-fleet.MaxPage, 0)
		ns, _, err := d.f.Store.Notices(ctx, lo, fleet.MaxPage)
		if err != nil {
			return nil, err
		}
		for i := len(ns) - 1; i >= 0 && len(out) < dashboardNotices; i-- {
			if ns[i].ID <= hi && keep(ns[i].Node) {
				out = append(out, ns[i])
			}
		}
		hi = lo
	}
	if d.f.Notify.Outbox() != nil {
		if err := fleet.AddDeliveries(ctx, d.f.Notify.Outbox(), out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// lastNotice is the id of the newest notice (0: none), found in
// O(log n) reads of one notice each: the store lists notices only
// forward from an id.
func (d *dashboard) lastNotice(ctx context.Context) (int64, error) {
	// after is the first notice's id after id, 0 when there is none.
	after := func(id int64) (int64, error) {
		ns, _, err := d.f.Store.Notices(ctx, id, 1)
		if err != nil || len(ns) == 0 {
			return 0, err
		}
		return ns[0].ID, nil
	}
	// lo is a notice's id; no notice's id is above hi.
	lo, err := after(0)
	if err != nil || lo == 0 {
		return 0, err
	}
	hi := lo
	for step := int64(fleet.MaxPage); ; step *= 2 {
		hi = lo + step
		n, err := after(hi)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			break
		}
		lo = n
	}
	for lo < hi {
		mid := lo + (hi-lo)/2
		n, err := after(mid)
		if err != nil {
			return 0, err
		}
		if n == 0 {
			hi = mid
		} else {
			lo = n
		}
	}
	return lo, nil
}

// login takes an operator's token from the form and starts a session.
func (d *dashboard) login(w http.ResponseWriter, r *http.Request) {
	if !d.sameOrigin(w, r) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxForm)
	if err := r.ParseForm(); err != nil {
		d.f.Log.Warn("dashboard: login refused", "reason", "unreadable form", "remote", r.RemoteAddr)
		d.render(w, http.StatusBadRequest, "login", loginPage{Message: "The form could not be read: log in again."})
		return
	}
	// A token holds no white space (the token file splits its lines
	// at it): what a paste brings around it is not the token's.
	tok := strings.TrimSpace(r.PostForm.Get("token"))
	key := sha256.Sum256([]byte(tok))
	id, known := d.keys.load()[key]
	var msg string
	status := http.StatusForbidden
	switch {
	case tok == "" || !known:
		status, msg = http.StatusUnauthorized, "This token is not known: check it and log in again."
		d.f.Log.Warn("dashboard: login refused", "reason", "unknown token", "remote", r.RemoteAddr)
	case id.admin():
		msg = "The admin's token does not log in here: this dashboard is a node operator's. The admin works with the API."
		d.f.Log.Warn("dashboard: login refused", "reason", "the admin's token", "remote", r.RemoteAddr)
	case id.node != "":
		msg = "A node's agent token only reports its node's load: log in with your operator's token."
		d.f.Log.Warn("dashboard: login refused", "reason", "a node's agent token", "node", id.node, "remote", r.RemoteAddr)
	}
	if msg != "" {
		d.render(w, status, "login", loginPage{Message: msg})
		return
	}
	sid, csrf := random256(), random256()
	now := d.f.Now()
	s := &dashboardSession{operator: id.operator, token: key, csrf: csrf, expires: now.Add(SessionLifetime)}
	d.mu.Lock()
	if len(d.sessions) >= maxSessions {
		d.evictLocked(now)
	}
	d.sessions[sha256.Sum256([]byte(sid))] = s
	d.mu.Unlock()
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: sid, Path: "/", MaxAge: int(SessionLifetime / time.Second),
		HttpOnly: true, Secure: overTLS(r), SameSite: http.SameSiteStrictMode})
	d.f.Log.Info("dashboard: logged in", "operator", id.operator, "remote", r.RemoteAddr)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

// evictLocked drops the expired sessions, or, if none is, the one that
// would expire first.
func (d *dashboard) evictLocked(now time.Time) {
	var first [sha256.Size]byte
	var at time.Time
	for k, s := range d.sessions {
		if !now.Before(s.expires) {
			delete(d.sessions, k)
			continue
		}
		if at.IsZero() || s.expires.Before(at) {
			first, at = k, s.expires
		}
	}
	if len(d.sessions) >= maxSessions {
		delete(d.sessions, first)
	}
}

// logout ends r's session.
func (d *dashboard) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(cookieName(r)); err == nil {
		d.mu.Lock()
		delete(d.sessions, sha256.Sum256([]byte(c.Value)))
		d.mu.Unlock()
	}
	clearCookie(w, r)
	http.Redirect(w, r, "/", http.StatusSeeOther)
}

func clearCookie(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, &http.Cookie{Name: cookieName(r), Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: overTLS(r), SameSite: http.SameSiteStrictMode})
}

// form serves a POST of a logged-in page: from this origin, in a
// session, with the session's CSRF token.
func (d *dashboard) form(h func(w http.ResponseWriter, r *http.Request, s *dashboardSession)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !d.sameOrigin(w, r) {
			return
		}
		s, why := d.sessionFrom(r)
		if s == nil {
			if why == "" {
				why = "none"
			}
			d.f.Log.Warn("dashboard: session refused", "reason", why, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
			clearCookie(w, r)
			msg := sessionRefusal[why]
			if msg == "" {
				msg = "You are not logged in: log in first."
			}
			d.render(w, http.StatusUnauthorized, "login", loginPage{Message: msg})
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, maxForm)
		if err := r.ParseForm(); err != nil {
			d.refuse(w, r, http.StatusBadRequest, "The form could not be read.")
			return
		}
		if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(s.csrf)) != 1 {
			d.f.Log.Warn("dashboard: form refused", "reason", "csrf token missing or wrong", "operator", s.operator, "path", r.URL.Path, "remote", r.RemoteAddr)
			d.refuse(w, r, http.StatusForbidden, "This form did not come from your dashboard page (its check field is missing or wrong): nothing was done. Reload the page and try again.")
			return
		}
		h(w, r, s)
	}
}

// sameOrigin refuses, with 403, a POST a browser sent from another site.
func (d *dashboard) sameOrigin(w http.ResponseWriter, r *http.Request) bool {
	if err := d.cross.Check(r); err != nil {
		d.f.Log.Warn("dashboard: cross-site request refused", "method", r.Method, "path", r.URL.Path,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"), "remote", r.RemoteAddr)
		d.refuse(w, r, http.StatusForbidden, "This request came from another site: nothing was done.")
		return false
	}
	return true
}

// refusedPage is a refusal's data.
type refusedPage struct {
	Status  int
	Title   string
	Message string
}

func (d *dashboard) refuse(w http.ResponseWriter, _ *http.Request, status int, msg string) {
	d.render(w, status, "refused", refusedPage{Status: status, Title: http.StatusText(status), Message: msg})
}

// render writes page name with data: never cached, never framed, no
// script.
func (d *dashboard) render(w http.ResponseWriter, status int, name string, data any) {
	var b strings.Builder
	if err := dashboardPages.ExecuteTemplate(&b, name, data); err != nil {
		d.f.Log.Error("dashboard: page", "page", name, "err", err)
		status, b = http.StatusInternalServerError, strings.Builder{}
		b.WriteString("<!doctype html><title>Error</title><p>The page could not be shown.</p>\n")
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	w.Write([]byte(b.String()))
}

// random256 is 256 random bits in hex.
func random256() string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand's doc)
	return hex.EncodeToString(b[:])
}
