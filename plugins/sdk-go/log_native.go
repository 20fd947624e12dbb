//go:build !wasip1

package plugin

import (
	"fmt"
	"os"
)

// Outside a component (native tests) lines go to stderr.
func hostLog(level uint8, message string, fields []string) {
	fmt.Fprintf(os.Stderr, "[%d] %s %q\n", level, message, fields)
}
