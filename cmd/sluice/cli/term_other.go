//go:build !linux

package cli

import "os"

// isTerminalFile reports whether f is a character device: a terminal, or
// something like /dev/null (a notice on standard error is the only harm).
func isTerminalFile(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
