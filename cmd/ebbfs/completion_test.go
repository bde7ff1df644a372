package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCompletionScripts(t *testing.T) {
	for shell, want := range map[string]string{"bash": "__start_ebbfs", "zsh": "#compdef ebbfs", "fish": "complete -c ebbfs"} {
		cmd := newRootCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"completion", shell})
		if err := cmd.Execute(); err != nil {
			t.Fatalf("completion %s: %v", shell, err)
		}
		if !strings.Contains(out.String(), want) {
			t.Errorf("completion %s lacks %q", shell, want)
		}
	}
}
