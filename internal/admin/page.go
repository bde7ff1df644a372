package admin

import (
	"html/template"
	"net/http"
	"time"
)

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
<meta http-equiv="refresh" content="5">
<style>
body{font-family:system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse}td,th{padding:.25em 1em .25em 0;text-align:left;vertical-align:top}
th{color:#666;font-weight:normal}.err{color:#b00}code{font-size:95%}
</style></head><body>
<h1>ebbfs</h1>
<table>
<tr><th>mountpoint</th><td><code>{{.Mountpoint}}</code>{{if .ReadOnly}} (read-only){{end}}</td></tr>
<tr><th>store</th><td><code>{{.Store}}</code></td></tr>
{{if .FSUUID}}<tr><th>filesystem</th><td><code>{{.FSUUID}}</code></td></tr>{{end}}
<tr><th>version</th><td>{{.Version}} (pid {{.PID}})</td></tr>
<tr><th>up</th><td>{{dur .UptimeSec}}</td></tr>
<tr><th>barriers</th><td>{{.Barriers}}, last {{ago .LastBarrier}}</td></tr>
{{if .LastError}}<tr><th>last barrier error</th><td class="err">{{.LastError}}</td></tr>{{end}}
{{range .NBD}}<tr><th>NBD</th><td><code>{{.}}</code></td></tr>{{end}}
{{range $k, $v := .Extra}}<tr><th>{{$k}}</th><td>{{$v}}</td></tr>{{end}}
</table>
<p><a href="/metrics">metrics</a> · <a href="/v1/status">status JSON</a></p>
</body></html>
`))

func (s *Server) handlePage(w http.ResponseWriter, r *http.Request) {
	st := s.b.Status(r.Context())
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'")
	w.Header().Set("X-Frame-Options", "DENY")
	if err := pageTmpl.Execute(w, st); err != nil {
		s.log.Warn("admin: status page", "err", err)
	}
}
