// Command optvec writes the conformance vector of each queue option
// (test/conformance/option_<name>.json) from test/queue_options.json; run
// from the repository's root by `make generate`.
package main

import (
	"fmt"
	"os"

	"github.com/sluicemq/sluice/internal/optvec"
)

func main() {
	t, err := optvec.Load("test/queue_options.json")
	if err == nil {
		err = t.Write("test/conformance")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "optvec:", err)
		os.Exit(1)
	}
}
