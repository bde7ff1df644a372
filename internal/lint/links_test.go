package lint

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// mdLink matches the target of a Markdown link or image: ](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// docPath matches a path to a Markdown file of the repository named in
// prose or a code comment: docs/FORMAT.md, bench/README.md.
var docPath = regexp.MustCompile(`\b((?:docs|bench)/[A-Za-z0-9_./-]*\.md)\b`)

// TestDocLinksResolve checks that every relative link in the repository's
// Markdown files, and every docs/*.md or bench/*.md path named in a
// Markdown or Go file, names a file or directory that exists: a document
// moved or never written shows up here rather than as a dead link.
func TestDocLinksResolve(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "run" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		md, goFile := strings.HasSuffix(path, ".md"), strings.HasSuffix(path, ".go")
		if !md && !goFile {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if md {
			for _, m := range mdLink.FindAllStringSubmatch(string(b), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				target, anchor, _ := strings.Cut(target, "#")
				if target == "" {
					target = filepath.Base(path)
				}
				checked++
				file := filepath.Join(filepath.Dir(path), target)
				if _, err := os.Stat(file); err != nil {
					t.Errorf("%s: link to %s: no such file", rel, m[1])
				} else if anchor != "" && strings.HasSuffix(file, ".md") && !hasAnchor(t, file, anchor) {
					t.Errorf("%s: link to %s: no such heading", rel, m[1])
				}
			}
		}
		for _, m := range docPath.FindAllStringSubmatch(string(b), -1) {
			checked++
			if _, err := os.Stat(filepath.Join(root, m[1])); err != nil {
				t.Errorf("%s: names %s: no such file", rel, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("no links found: is the repository root ../..?")
	}
}

// hasAnchor reports whether the Markdown file has a heading whose GitHub
// anchor is anchor: lower case, spaces as hyphens, other punctuation but
// hyphens and underscores dropped.
func hasAnchor(t *testing.T, file, anchor string) bool {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		title := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		var slug strings.Builder
		for _, r := range title {
			switch {
			case r == ' ':
				slug.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				slug.WriteRune(r)
			}
		}
		if slug.String() == anchor {
			return true
		}
	}
	return false
}
