package monitor

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

// valueIndent is the column where a panel row's value starts (the label
// column, 12 cells, and a space): continuation lines start there.
const valueIndent = 13

// fitBody makes every line of a panel body fit w cells, so that the
// panel's border never wraps a phrase: a longer line is broken at its
// " · " separators first, then at ", ", then between words (never inside
// one), continuation lines indented to the value column; a single word
// wider than the panel is cut with "…".
func fitBody(body string, w int) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		out = append(out, fitLine(line, w, valueIndent)...)
	}
	return strings.Join(out, "\n")
}

// fitLine breaks line into lines of at most w cells (see fitBody).
func fitLine(line string, w, indent int) []string {
	if ansi.StringWidth(line) <= w {
		return []string{line}
	}
	if indent > w/2 {
		indent = 0
	}
	pad := strings.Repeat(" ", indent)
	lines := []string{line}
	for _, sep := range []string{" · ", ", "} {
		var next []string
		for _, l := range lines {
			packed := packParts(l, sep, pad, w)
			if sep == ", " && !allFit(packed, w) {
				// A clause still too wide: break the whole line between
				// words rather than leave a clause in pieces.
				packed = []string{l}
			}
			next = append(next, packed...)
		}
		lines = next
	}
	var out []string
	for _, l := range lines {
		if ansi.StringWidth(l) <= w {
			out = append(out, l)
			continue
		}
		body := strings.TrimPrefix(l, pad)
		lead := l[:len(l)-len(body)]
		for i, wl := range strings.Split(ansi.Wordwrap(body, w-len(lead), ""), "\n") {
			if i > 0 {
				wl = pad + strings.TrimLeft(wl, " ")
			} else {
				wl = lead + wl
			}
			out = append(out, ansi.Truncate(wl, w, "…"))
		}
	}
	return out
}

// packParts splits l at sep and packs the parts into lines of at most w
// cells, each but the first starting with pad; a part that is too wide
// alone keeps a line of its own (the next pass breaks it further).
func packParts(l, sep, pad string, w int) []string {
	if ansi.StringWidth(l) <= w || !strings.Contains(l, sep) {
		return []string{l}
	}
	parts := strings.Split(l, sep)
	var out []string
	cur := parts[0]
	for _, p := range parts[1:] {
		if ansi.StringWidth(cur)+ansi.StringWidth(sep)+ansi.StringWidth(p) <= w {
			cur += sep + p
			continue
		}
		if sep == ", " {
			cur += strings.TrimRight(sep, " ")
		}
		out = append(out, cur)
		cur = pad + p
	}
	return append(out, cur)
}

// fitStyled joins styled parts with sep into lines of at most w cells,
// never splitting a part (one wider than w is cut with "…").
func fitStyled(parts []string, sep string, w int) []string {
	var out []string
	cur := ""
	for _, p := range parts {
		if ansi.StringWidth(p) > w {
			p = ansi.Truncate(p, w, "…")
		}
		switch {
		case cur == "":
			cur = p
		case ansi.StringWidth(cur)+ansi.StringWidth(sep)+ansi.StringWidth(p) <= w:
			cur += sep + p
		default:
			out = append(out, cur)
			cur = p
		}
	}
	if cur != "" {
		out = append(out, cur)
	}
	return out
}

func allFit(lines []string, w int) bool {
	for _, l := range lines {
		if ansi.StringWidth(l) > w {
			return false
		}
	}
	return true
}
