package cli_test

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/sluicemq/sluice/cmd/sluice/cli"
	"github.com/sluicemq/sluice/internal/optvec"
)

// optionText renders a value of the table as the commands take it and as
// "queue config" shows it.
func optionText(kind string, v any) string {
	switch kind {
	case "duration":
		return cli.FormatDuration(time.Duration(math.Round(v.(float64) * float64(time.Second))))
	case "integer":
		return strconv.Itoa(int(v.(float64)))
	}
	return fmt.Sprint(v)
}

// Every queue option of the engine (test/queue_options.json) is a flag of
// "queue create" and a name of "queue config --set", of its kind: a queue
// created with each option's value shows it in "queue config", and --set
// changes each option the engine lets alter.
func TestQueueOptionFlags(t *testing.T) {
	t.Parallel()
	tab, err := optvec.Load("../../../test/queue_options.json")
	if err != nil {
		t.Fatal(err)
	}
	names, flags, kinds := cli.QueueOptionNames()
	for _, o := range tab.Options {
		i := slices.Index(names, o.Name)
		if i < 0 || kinds[i] != o.Kind {
			t.Errorf("the commands have no %s option %s (cliOptions)", o.Kind, o.Name)
		}
	}
	if len(names) != len(tab.Options) {
		t.Errorf("the commands have %d queue options, the engine %d: %v", len(names), len(tab.Options), names)
	}
	if t.Failed() {
		return
	}

	b := setupCmd(t)
	args := []string{"queue", "create", "every"}
	for _, o := range tab.Options {
		flag := flags[slices.Index(names, o.Name)]
		if o.Kind == "boolean" {
			if o.Value != false {
				t.Fatalf("option %s: the table's value must be false (the flag is --%s)", o.Name, flag)
			}
			args = append(args, "--"+flag)
			continue
		}
		args = append(args, "--"+flag, optionText(o.Kind, o.Value))
	}
	b.ok(args...)
	shows := func(out, name, text string) {
		t.Helper()
		if !regexp.MustCompile(`(?m)^` + name + ` +` + regexp.QuoteMeta(text) + `$`).MatchString(out) {
			t.Errorf("queue config shows no %s %s:\n%s", name, text, out)
		}
	}
	out := b.ok("queue", "config", "every")
	for _, o := range tab.Options {
		shows(out, o.Name, optionText(o.Kind, o.Value))
	}
	for _, o := range tab.Options {
		set := []string{"queue", "config", "every", "--set", o.Name + "=" + optionText(o.Kind, o.Altered)}
		switch o.Alter {
		case "yes":
			shows(b.ok(set...), o.Name, optionText(o.Kind, o.Altered))
		case "fixed":
			b.fails(1, "fixed", set...)
		case "create_only":
			set[len(set)-1] = o.Name + "=" + optionText(o.Kind, o.Value)
			b.fails(1, "create_queue only", set...)
		}
	}
}
