package tests

import (
	"fmt"
	"html"
	"strconv"
	"strings"
)

// ansiToHTML renders a terminal capture (tmux capture-pane -e) as a
// self-contained HTML page, for the monitor's screenshot: the SGR colours
// and bold of the capture, on a dark background, in a monospace font.
func ansiToHTML(capture string) string {
	capture = strings.TrimRight(capture, "\n ")
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><style>
body{margin:0;background:#1b1e24}
pre{margin:0;padding:12px;color:#d8dde6;font:13px/1.17 "DejaVu Sans Mono",monospace}
</style></head><body><pre>`)
	fg, bg, bold, faint := "", "", false, false
	open := false
	flush := func() {
		if open {
			b.WriteString("</span>")
			open = false
		}
		var st []string
		if fg != "" {
			st = append(st, "color:"+fg)
		}
		if bg != "" {
			st = append(st, "background:"+bg)
		}
		if bold {
			st = append(st, "font-weight:bold")
		}
		if faint {
			st = append(st, "opacity:.7")
		}
		if len(st) > 0 {
			b.WriteString(`<span style="` + strings.Join(st, ";") + `">`)
			open = true
		}
	}
	for i := 0; i < len(capture); i++ {
		if capture[i] != 0x1b || i+1 >= len(capture) || capture[i+1] != '[' {
			// Text up to the next escape, whole (UTF-8 stays intact).
			j := strings.IndexByte(capture[i:], 0x1b)
			if j < 0 {
				j = len(capture) - i
			} else if j == 0 {
				j = 1
			}
			b.WriteString(html.EscapeString(capture[i : i+j]))
			i += j - 1
			continue
		}
		j := i + 2
		for j < len(capture) && (capture[j] >= '0' && capture[j] <= '9' || capture[j] == ';') {
			j++
		}
		if j >= len(capture) {
			break
		}
		if capture[j] == 'm' {
			params := strings.Split(capture[i+2:j], ";")
			for k := 0; k < len(params); k++ {
				n, _ := strconv.Atoi(params[k])
				switch {
				case n == 0:
					fg, bg, bold, faint = "", "", false, false
				case n == 1:
					bold = true
				case n == 2:
					faint = true
				case n == 22:
					bold, faint = false, false
				case n == 39:
					fg = ""
				case n == 49:
					bg = ""
				case n >= 30 && n <= 37:
					fg = xterm256(n - 30)
				case n >= 90 && n <= 97:
					fg = xterm256(n - 90 + 8)
				case n >= 40 && n <= 47:
					bg = xterm256(n - 40)
				case (n == 38 || n == 48) && k+1 < len(params):
					col := ""
					if params[k+1] == "5" && k+2 < len(params) {
						v, _ := strconv.Atoi(params[k+2])
						col = xterm256(v)
						k += 2
					} else if params[k+1] == "2" && k+4 < len(params) {
						r, _ := strconv.Atoi(params[k+2])
						g, _ := strconv.Atoi(params[k+3])
						bl, _ := strconv.Atoi(params[k+4])
						col = fmt.Sprintf("#%02x%02x%02x", r, g, bl)
						k += 4
					}
					if n == 38 {
						fg = col
					} else {
						bg = col
					}
				}
			}
			flush()
		}
		i = j
	}
	if open {
		b.WriteString("</span>")
	}
	b.WriteString("</pre></body></html>")
	return b.String()
}

// xterm256 is the colour of an xterm 256-colour index.
func xterm256(n int) string {
	base := []string{"#000000", "#cd3131", "#0dbc79", "#e5e510", "#2472c8", "#bc3fbc", "#11a8cd", "#e5e5e5",
		"#666666", "#f14c4c", "#23d18b", "#f5f543", "#3b8eea", "#d670d6", "#29b8db", "#ffffff"}
	switch {
	case n < 0:
		return ""
	case n < 16:
		return base[n]
	case n < 232:
		n -= 16
		lv := []int{0, 95, 135, 175, 215, 255}
		return fmt.Sprintf("#%02x%02x%02x", lv[n/36], lv[(n/6)%6], lv[n%6])
	case n < 256:
		v := 8 + (n-232)*10
		return fmt.Sprintf("#%02x%02x%02x", v, v, v)
	}
	return ""
}
