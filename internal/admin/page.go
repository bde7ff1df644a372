package admin

import (
	"embed"
	"html/template"
	"net/http"
	"time"
)

// The status page: server-rendered basics (readable without script), then
// web/page.js fills in and keeps updating every section from the JSON
// routes /v1/monitor and /v1/history (a backend that lacks them leaves
// the page static). Everything it loads comes from this server; the
// Content-Security-Policy forbids anything else.

//go:embed web/page.js web/page.css
var webFS embed.FS

// pageCSP allows only this server's own script, style and JSON.
const pageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

var pageTmpl = template.Must(template.New("page").Funcs(template.FuncMap{
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return "never"
		}
		return time.Since(t).Truncate(time.Millisecond).String() + " ago"
	},
	"dur": func(sec float64) string {
		return (time.Duration(sec * float64(time.Second))).Truncate(time.Second).String()
	},
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ebbfs {{.Mountpoint}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="stylesheet" href="/static/page.css">
<script src="/static/page.js" defer></script>
</head><body>
<header>
<h1>ebbfs</h1>
<span id="role" class="badge{{if .ReadOnly}} ro{{end}}">{{if .ReadOnly}}reader{{else}}writer{{end}}</span>
<span><code id="mountpoint">{{.Mountpoint}}</code></span>
<span class="muted">store <code id="store">{{.Store}}</code></span>
<span class="muted">version <span id="version">{{.Version}}</span> · pid {{.PID}} · up <span id="uptime">{{dur .UptimeSec}}</span></span>
<span class="muted" id="lag-row" hidden>replica lag <span id="lag"></span></span>
</header>
<div class="alarm" id="damage" role="alert" hidden></div>
<main>
<section id="sec-footprint">
<h2>Segment footprint</h2>
<div class="bar" id="fp-bar"></div>
<table id="footprint">
<tr><th><span class="sw c-live"></span>live</th><td class="num" id="fp-live"></td><td></td></tr>
<tr><th><span class="sw c-frag"></span>fragmented</th><td class="num" id="fp-fragmented"></td><td class="muted">repack's work</td></tr>
<tr><th><span class="sw c-dead"></span>dead</th><td class="num" id="fp-dead"></td><td class="muted" id="fp-deadcount"></td></tr>
<tr><th><span class="sw c-await"></span>awaiting deadline</th><td class="num" id="fp-awaiting"></td><td class="muted">first due <span id="fp-deadline"></span></td></tr>
<tr><th><span class="sw c-pinned"></span>pinned</th><td class="num" id="fp-pinned"></td><td class="muted" id="fp-pinnedby"></td></tr>
<tr><th><span class="sw c-over"></span>frame overhead</th><td class="num" id="fp-overhead"></td><td class="muted">directories, footers</td></tr>
<tr><th>segments stored</th><td class="num" id="fp-segments"></td><td class="muted" id="fp-segcount"></td></tr>
<tr><th><span class="sw c-meta"></span>metadata</th><td class="num" id="fp-meta"></td><td class="muted" id="fp-metacount"></td></tr>
</table>
<p class="muted" id="fp-note"></p>
</section>
<section id="sec-exec">
<h2>Reclamation, now</h2>
<table>
<tr><th>tombstone cleaner</th><td>pending <span id="cl-pending"></span><br><span id="cl-rate"></span> · done <span id="cl-done"></span><br>last batch <span id="cl-last"></span></td></tr>
<tr><th>cycle</th><td><span class="phase" id="cy-phase"></span><br>last: <span id="cy-last"></span><br>next: <span id="cy-next"></span><br><span class="muted" id="cy-totals"></span></td></tr>
<tr><th>repack jobs</th><td><ul class="jobs" id="jobs"></ul></td></tr>
<tr><th>orphan sweep</th><td><span id="sw-state"></span><br>last: <span id="sw-last"></span></td></tr>
<tr><th>metadata GC</th><td id="gc-state"></td></tr>
</table>
<h2>Checkpoints</h2>
<table><tbody id="ckpts"></tbody></table>
<p class="err" id="ck-error"></p>
</section>
<section id="sec-io">
<h2>Throughput and durability</h2>
<table>
<tr><th>read</th><td class="num" id="io-read"></td><td class="num" id="io-rops"></td></tr>
<tr><th>write</th><td class="num" id="io-write"></td><td class="num" id="io-wops"></td></tr>
<tr><th>store</th><td class="num" id="st-req"></td><td class="num">up <span id="st-up"></span> · down <span id="st-down"></span></td></tr>
<tr><th>barriers</th><td class="num" id="bar-rate"></td><td class="num" id="bar-lat"></td></tr>
<tr><th>dirty</th><td class="num" id="dirty"></td><td></td></tr>
<tr><th>cache</th><td colspan="2" id="cache"></td></tr>
<tr><th>memory</th><td colspan="2" id="mem"></td></tr>
<tr><th>corrupt frames</th><td class="num" id="corrupt"></td><td></td></tr>
{{if .LastError}}<tr><th>last flush error</th><td colspan="2" class="err">{{.LastError}}</td></tr>{{end}}
{{range .NBD}}<tr><th>NBD</th><td colspan="2"><code>{{.}}</code></td></tr>{{end}}
</table>
</section>
<section class="wide">
<h2>Tombstone cleanup, per 10 s, last hour</h2>
<svg class="chart" id="chart-tombstones" role="img" aria-label="extents deleted and tombstones processed per 10 seconds"></svg>
<p class="legend"><span class="sw c-meta"></span>extents deleted <span class="sw c-live"></span>tombstones processed · <span id="tomb-sum"></span></p>
</section>
<section class="wide">
<h2>Reclamation cycles: bytes freed</h2>
<svg class="chart" id="chart-cycles" role="img" aria-label="bytes freed per reclamation cycle"></svg>
</section>
</main>
<footer class="muted"><span id="updated"></span> <span class="err" id="fetch-error"></span> · <a href="/metrics">metrics</a> · <a href="/v1/monitor">state JSON</a> · <a href="/v1/status">status JSON</a></footer>
</body></html>
`))

func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) {
	st := s.b.Status(r.Context())
	setPageHeaders(w, "text/html; charset=utf-8")
	if err := pageTmpl.Execute(w, st); err != nil {
		s.log.Warn("admin: status page", "err", err)
	}
}

func setPageHeaders(w http.ResponseWriter, ctype string) {
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Security-Policy", pageCSP)
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
}

// handleStatic serves the page's script and style sheet.
func (s *Server) handleStatic(w http.ResponseWriter, r *http.Request) {
	name, ctype := "", ""
	switch r.PathValue("file") {
	case "page.js":
		name, ctype = "web/page.js", "text/javascript; charset=utf-8"
	case "page.css":
		name, ctype = "web/page.css", "text/css; charset=utf-8"
	default:
		http.NotFound(w, r)
		return
	}
	b, err := webFS.ReadFile(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	setPageHeaders(w, ctype)
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
