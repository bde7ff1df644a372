package main

import (
	"encoding/json"
	"fmt"
	"io"

	"ebbfs.dev/ebbfs/fs"
	"ebbfs.dev/ebbfs/internal/admin"
	"ebbfs.dev/ebbfs/internal/telemetry"
)

// printDamage prints status's damage alarm: the files reads found
// damaged, each with its byte ranges, and what to run next.
func printDamage(out io.Writer, st admin.Status) {
	frames, _ := st.Extra[telemetry.ExtraCorruptFrames].(float64)
	var files []fs.DamagedFile
	if raw, ok := st.Extra[telemetry.ExtraDamage]; ok {
		// The reply went through JSON once; read it back as its type.
		if b, err := json.Marshal(raw); err == nil {
			_ = json.Unmarshal(b, &files)
		}
	}
	if frames == 0 && len(files) == 0 {
		return
	}
	fmt.Fprintf(out, "DAMAGE: %d file(s) with data that fails authentication (%.0f frame(s)); reads of it fail with EIO; list all with 'ebbfs fsck --verify-data --list-damaged'\n", len(files), frames)
	for _, d := range files {
		fmt.Fprintf(out, "  damaged: %s bytes", d.Name())
		for _, r := range d.Ranges {
			fmt.Fprintf(out, " %s", r)
		}
		fmt.Fprintln(out)
	}
}
