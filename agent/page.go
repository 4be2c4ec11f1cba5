package agent

import (
	"fmt"
	"html/template"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/proofkit/nodekit/internal/buildinfo"
	"github.com/proofkit/nodekit/overload"
	"github.com/proofkit/nodekit/sysctl"
)

// historySpan is how far back the page's plots reach.
const historySpan = time.Hour

// maxPoints bounds the history whatever the interval (an hour at 1 s).
const maxPoints = 3600

// point is one evaluated reading as the page shows it.
type point struct {
	at     time.Time // the reading's time
	taken  time.Time // when the agent evaluated it (this process's clock)
	passed map[overload.Check]bool
	// Figures in percent of what the check compares, NaN when unknown.
	memory, fill, bandwidth float64
	link                    string // the link of bandwidth
	reading                 overload.Reading
}

// history keeps the last hour of points, oldest first.
type history struct {
	mu  sync.Mutex
	pts []point
}

func (h *history) add(r overload.Reading, res overload.Result, taken time.Time) {
	p := point{at: r.At, taken: taken, passed: map[overload.Check]bool{}, reading: r,
		memory: math.NaN(), fill: math.NaN(), bandwidth: math.NaN()}
	for _, f := range res.Passed {
		p.passed[f.Check] = true
	}
	missing := map[overload.Input]bool{}
	for _, in := range r.Missing {
		missing[in] = true
	}
	if !missing[overload.InputMemory] {
		p.memory = r.MemoryUsedPercent
	}
	if !missing[overload.InputConntrack] && r.ConntrackMax > 0 {
		p.fill = 100 * float64(r.ConntrackEntries) / float64(r.ConntrackMax)
	}
	if !missing[overload.InputBandwidth] {
		if u, link, ok := overload.BusiestLink(r.Links); ok {
			p.bandwidth, p.link = u, link
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pts = append(h.pts, p)
	cut := 0
	for cut < len(h.pts)-1 && (r.At.Sub(h.pts[cut].at) > historySpan || len(h.pts)-cut > maxPoints) {
		cut++
	}
	h.pts = append(h.pts[:0], h.pts[cut:]...)
}

func (h *history) latest() *point {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.pts) == 0 {
		return nil
	}
	p := h.pts[len(h.pts)-1]
	return &p
}

func (h *history) points() []point {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]point(nil), h.pts...)
}

// SetSysctl gives the agent the outcome of sizing the kernel at start,
// which the page at / lists key by key.
func (a *Agent) SetSysctl(rep sysctl.Report) {
	a.hmu.Lock()
	defer a.hmu.Unlock()
	a.sysctl = &rep
}

// checkLabels are the checks as the page names them: the help page's
// words, not the ids of /metrics and the JSON.
var checkLabels = map[overload.Check]string{
	overload.CheckMemory:         "Memory used",
	overload.CheckLoad:           "Load (15 min) per CPU",
	overload.CheckConntrackFill:  "Connection table fill",
	overload.CheckConntrackDrops: "Connections dropped by a full connection table",
	overload.CheckListenQueue:    "Connections dropped by full listen queues",
	overload.CheckBandwidth:      "Bandwidth of the busiest link",
}

// checkLabel is c's label, or its id for a check the page does not know.
func checkLabel(c overload.Check) string {
	if l, ok := checkLabels[c]; ok {
		return l
	}
	return string(c)
}

// Words of the page for a check's state in one reading.
const (
	statePassed  = "passed"
	stateWithin  = "within limits"
	stateMissing = "missing"
)

// pageCheck is one row of the page's table.
type pageCheck struct {
	Check   overload.Check
	Label   string
	Figure  string
	Limit   string
	Passed  bool
	Holds   bool
	Missing bool
	Last    []string // "passed", "within limits" or "missing", oldest first
}

type pagePlot struct {
	Title string
	SVG   template.HTML
}

type pageData struct {
	Node, Version   string
	Now             time.Time
	Status          Status
	For             string
	Checks          []pageCheck
	Window          int
	Events          []overload.Event
	LastNotice      *overload.Notice
	LastNoticeAt    time.Time
	Sysctl          *sysctl.Report
	Plots           []pagePlot
	ReadingAt       time.Time
	Notes, Missing  []string
	LinkOfBandwidth string
	// ReportURL is where the readings go (redacted); empty when the
	// agent reports to nobody.
	ReportURL string
	// Refresh is the page's reload period in seconds: the interval.
	Refresh int
}

func (a *Agent) pageData(now time.Time) pageData {
	st := a.Status()
	l := a.limits.WithDefaults()
	pts := a.hist.points()
	d := pageData{
		Node: a.node, Version: buildinfo.Read().String(), Now: now, Status: st,
		Window: l.Window, LastNoticeAt: st.LastNotice,
		Refresh: max(1, int(a.interval.Round(time.Second)/time.Second)),
	}
	if a.rep != nil {
		d.ReportURL = RedactURL(a.rep.url)
	}
	if st.Overloaded {
		d.For = now.Sub(st.Since).Round(time.Second).String()
	}
	ev := a.Events()
	for i := len(ev) - 1; i >= 0; i-- { // newest first
		d.Events = append(d.Events, ev[i])
	}
	a.hmu.Lock()
	d.LastNotice, d.Sysctl = a.lastNotice, a.sysctl
	a.hmu.Unlock()

	holds := map[overload.Check]bool{}
	for _, f := range st.Findings {
		holds[f.Check] = true
	}
	var last *point
	if len(pts) > 0 {
		last = &pts[len(pts)-1]
		d.ReadingAt = last.at
		d.Notes = append(d.Notes, last.reading.Notes...) // Step named the flags in them
		for _, m := range last.reading.Missing {
			d.Missing = append(d.Missing, string(m))
		}
		d.LinkOfBandwidth = last.link
	}
	window := pts[max(0, len(pts)-l.Window):]
	for _, c := range overload.Checks() {
		row := pageCheck{Check: c, Label: checkLabel(c), Holds: holds[c]}
		row.Figure, row.Limit, row.Missing = figure(c, last, l)
		if last != nil {
			row.Passed = last.passed[c]
		}
		for _, p := range window {
			switch {
			case p.passed[c]:
				row.Last = append(row.Last, statePassed)
			case isMissing(c, p.reading):
				row.Last = append(row.Last, stateMissing)
			default:
				row.Last = append(row.Last, stateWithin)
			}
		}
		d.Checks = append(d.Checks, row)
	}
	end := now
	if last != nil {
		end = last.at
	}
	d.Plots = []pagePlot{
		{"Memory used, % of MemTotal", plotSVG(pts, end, l.MemoryPercent, func(p point) float64 { return p.memory })},
		{"Connection table fill, % of its max", plotSVG(pts, end, l.ConntrackFillPercent, func(p point) float64 { return p.fill })},
		{"Bandwidth, % of the link speed (busiest link)", plotSVG(pts, end, l.BandwidthPercent, func(p point) float64 { return p.bandwidth })},
	}
	return d
}

// isMissing reports whether r lists c's input as missing.
func isMissing(c overload.Check, r overload.Reading) bool {
	return slices.Contains(r.Missing, c.Input())
}

// figure returns the latest reading's figure for c and the limit it is
// compared with, in words.
func figure(c overload.Check, p *point, l overload.Limits) (fig, limit string, missing bool) {
	if p == nil {
		_, limit = c.Describe(nil, l)
		return "no reading yet", limit, false
	}
	fig, limit = c.Describe(&p.reading, l)
	if isMissing(c, p.reading) {
		_, limit = c.Describe(nil, l)
		return "unknown (input missing)", limit, true
	}
	return fig, limit, false
}

// plotSVG draws the last hour of one figure (percent) as a line against
// its limit (a dashed line), as inline SVG. Readings where the figure was
// unknown break the line.
func plotSVG(pts []point, end time.Time, limit float64, val func(point) float64) template.HTML {
	const w, h, left, bottom = 600.0, 140.0, 36.0, 18.0
	start := end.Add(-historySpan)
	x := func(t time.Time) float64 {
		return left + (w-left-4)*float64(t.Sub(start))/float64(historySpan)
	}
	y := func(v float64) float64 {
		return 4 + (h-bottom-4)*(1-math.Min(math.Max(v, 0), 100)/100)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" role="img">`, w, h, w, h)
	fmt.Fprintf(&b, `<rect x="%g" y="4" width="%g" height="%g" fill="#fafafa" stroke="#ccc"/>`, left, w-left-4, h-bottom-4)
	for _, v := range []float64{0, 50, 100} {
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="10" text-anchor="end" fill="#666">%g%%</text>`, left-3, y(v)+3, v)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" fill="#666">%s</text>`, left, h-4, start.UTC().Format("15:04"))
	fmt.Fprintf(&b, `<text x="%g" y="%g" font-size="10" text-anchor="end" fill="#666">%s UTC</text>`, w-4, h-4, end.UTC().Format("15:04"))
	fmt.Fprintf(&b, `<line class="limit" x1="%g" x2="%g" y1="%.1f" y2="%.1f" stroke="#c00" stroke-dasharray="4 3"/>`, left, w-4, y(limit), y(limit))
	fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="10" text-anchor="end" fill="#c00">limit %g%%</text>`, w-6, y(limit)-3, limit)
	var line []string
	flush := func() {
		if len(line) > 0 {
			fmt.Fprintf(&b, `<polyline class="figure" fill="none" stroke="#06c" stroke-width="1.5" points="%s"/>`, strings.Join(line, " "))
			line = line[:0]
		}
	}
	for _, p := range pts {
		v := val(p)
		if p.at.Before(start) || math.IsNaN(v) {
			flush()
			continue
		}
		line = append(line, fmt.Sprintf("%.1f,%.1f", x(p.at), y(v)))
	}
	flush()
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // built from numbers and fixed text only
}

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"t": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>{{.Node}}: {{if .Status.Overloaded}}overloaded{{else}}not overloaded{{end}}</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;max-width:60em;color:#222}
h1{font-size:1.4em}h2{font-size:1.1em;margin-top:1.5em}
table{border-collapse:collapse}td,th{border:1px solid #ddd;padding:.25em .5em;text-align:left;vertical-align:top}
.state{font-size:1.2em;padding:.4em .6em;display:inline-block}
.overloaded{background:#fdd;color:#900}.ok{background:#dfd;color:#060}
.passed{color:#900;font-weight:bold}.missing{color:#888}
.w span{display:inline-block;width:.9em;height:.9em;margin-right:2px;border:1px solid #999}
.w .passed{background:#c33}.w .within{background:#cfc}.w .missing{background:#eee}
</style></head><body>
<h1>{{.Node}}</h1>
<p id="state" class="state {{if .Status.Overloaded}}overloaded{{else}}ok{{end}}">{{if .Status.Overloaded}}overloaded since {{t .Status.Since}} ({{.For}}){{else}}not overloaded{{end}}</p>
<p>Latest reading: {{t .ReadingAt}}{{if .Missing}}; inputs missing: {{range $i, $m := .Missing}}{{if $i}}, {{end}}{{$m}}{{end}}{{end}}. Agent {{.Version}}.</p>
<p id="reports">{{if .ReportURL}}Reports go to {{.ReportURL}}; queued: {{.Status.ReportsQueued}}.{{else}}Reports go to nobody: no report URL is set (-report-url), so the agent only probes, evaluates, logs and serves this page.{{if .Status.ReportsQueued}} Reports queued by an earlier run: {{.Status.ReportsQueued}}.{{end}}{{end}}</p>
{{if .Notes}}<ul>{{range .Notes}}<li>{{.}}</li>{{end}}</ul>{{end}}

<h2>Latest reading against each limit</h2>
<table id="checks"><tr><th>check</th><th>latest</th><th>limit</th><th>this reading</th><th>last {{.Window}} readings (oldest first)</th><th>holds</th></tr>
{{range .Checks}}<tr><td title="{{.Check}}">{{.Label}}</td><td>{{.Figure}}</td><td>{{.Limit}}</td>
<td class="{{if .Passed}}passed{{else if .Missing}}missing{{end}}">{{if .Passed}}passed{{else if .Missing}}missing{{else}}within limits{{end}}</td>
<td class="w">{{range .Last}}<span class="{{if eq . "passed"}}passed{{else if eq . "missing"}}missing{{else}}within{{end}}" title="{{.}}"></span>{{end}} {{range $i, $v := .Last}}{{if $i}}, {{end}}{{$v}}{{end}}</td>
<td>{{if .Holds}}<b>holds</b>{{else}}no{{end}}</td></tr>
{{end}}</table>

<h2>The last hour</h2>
{{range .Plots}}<figure><figcaption>{{.Title}}</figcaption>{{.SVG}}</figure>
{{end}}

<h2>Last notice</h2>
<p id="notice">{{with .LastNotice}}{{t .At}}: {{.Text}}{{else}}{{if .LastNoticeAt.IsZero}}none{{else}}{{t .LastNoticeAt}} (its text is kept only while the agent runs){{end}}{{end}}</p>

<h2>Events</h2>
{{if .Events}}<table id="events"><tr><th>at</th><th>event</th><th>detail</th></tr>
{{range .Events}}<tr><td>{{t .At}}</td><td>{{.Kind}}</td><td>{{if eq (print .Kind) "start"}}{{range $i, $f := .Findings}}{{if $i}}; {{end}}{{$f.Text}}{{end}}{{else}}lasted {{.Lasted}}{{end}}</td></tr>
{{end}}</table>{{else}}<p>No overload started or ended yet.</p>{{end}}

<h2>Kernel sizing at start (sysctl)</h2>
{{with .Sysctl}}<table id="sysctl"><tr><th>key</th><th>found</th><th>target</th><th>done</th></tr>
{{range .Keys}}<tr><td>{{.Key}}</td><td>{{.Found}}</td><td>{{.Target}}</td><td>{{.Action}}{{if .Reason}} ({{.Reason}}){{end}}</td></tr>
{{end}}</table>{{if .File}}<p>Left in {{.File}}: copy it to /etc/sysctl.d/, run sudo sysctl --system, restart the agent.</p>{{end}}{{else}}<p>Not run (-sysctl off) or not reported.</p>{{end}}
<p><small>Page generated {{t .Now}}; it reloads every {{.Refresh}} s, the agent's interval. JSON: <a href="status">/status</a>, <a href="events">/events</a>; <a href="metrics">/metrics</a>.</small></p>
</body></html>
`))

// servePage serves the page at /.
func (a *Agent) servePage(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	var b strings.Builder
	if err := pageTmpl.Execute(&b, a.pageData(time.Now())); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write([]byte(b.String()))
}
