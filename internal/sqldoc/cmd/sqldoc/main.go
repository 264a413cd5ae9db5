// Command sqldoc writes docs/sql.md, the reference of sluice's SQL API, from
// the SQL sources ("make generate" runs it).
//
// Usage:
//
//	sqldoc [-sql dir] [-o file]
//
// By default it reads the SQL sources embedded in package
// github.com/sluicemq/sluice/sql (current as of the build: "go run" rebuilds)
// and writes to standard output.
package main

import (
	"flag"
	"fmt"
	"io/fs"
	"os"

	"github.com/sluicemq/sluice/internal/sqldoc"
	sqlsrc "github.com/sluicemq/sluice/sql"
)

func main() {
	dir := flag.String("sql", "", "read the SQL sources from `dir` (laid out as sql/) instead of the embedded ones")
	out := flag.String("o", "", "write to `file` instead of standard output")
	flag.Parse()
	if flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	var fsys fs.FS = sqlsrc.FS
	if *dir != "" {
		fsys = os.DirFS(*dir)
	}
	doc, err := sqldoc.Generate(fsys)
	if err == nil {
		if *out == "" {
			_, err = os.Stdout.Write(doc)
		} else {
			err = os.WriteFile(*out, doc, 0o644)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sqldoc:", err)
		os.Exit(1)
	}
}
