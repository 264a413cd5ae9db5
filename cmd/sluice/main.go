// Command sluice manages sluice, the message queue that lives inside
// PostgreSQL. Run "sluice help" for its commands.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicemq/sluice/cmd/sluice/cli"
)

// main ends the commands' context on Ctrl-C, SIGTERM and SIGHUP (a closed
// terminal), so that they clean up, such as tail --no-ack's temporary group.
func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := cli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
