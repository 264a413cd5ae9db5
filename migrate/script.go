package migrate

import (
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// Script renders the schema in fsys as one SQL script that does what Apply
// does, for psql (psql -f) or another migration tool. Like Apply it takes the
// advisory lock LockKey, creates schema sluice and sluice.schema_migration,
// refuses a database migrated by a newer sluice, then, in one transaction
// that starts with the fence (sluice.queue in ACCESS EXCLUSIVE mode, see
// Apply), runs each migration not yet recorded together with the row that
// records it and reloads the functions; running it twice is harmless.
//
// Each migration runs inside a DO block that checks sluice.schema_migration
// and EXECUTEs the file, so the script needs nothing from psql but its first
// line, \set ON_ERROR_STOP on, which makes psql stop at the first error; a
// tool that is not psql must drop that line and stop at the first error
// itself.
func Script(fsys fs.FS) (string, error) {
	src, err := load(fsys)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(`\set ON_ERROR_STOP on` + "\n")
	b.WriteString("-- The sluice schema, as rendered by `sluice migrate --print`.\n")
	b.WriteString("-- Idempotent: migrations recorded in sluice.schema_migration are skipped and\n")
	b.WriteString("-- functions are reloaded. Run it with: psql -f FILE\n\n")
	b.WriteString("SET client_min_messages = warning;\n")
	fmt.Fprintf(&b, "DO $sluice_lock$ BEGIN PERFORM pg_advisory_lock(%d); END $sluice_lock$;\n\n", LockKey)
	b.WriteString(bootstrapSQL)

	versions := make([]string, len(src.migrations))
	for i, m := range src.migrations {
		versions[i] = strconv.Itoa(m.Version)
	}
	fmt.Fprintf(&b, `
DO $sluice_check$
DECLARE
    unknown int;
BEGIN
    SELECT min(version) INTO unknown FROM sluice.schema_migration
     WHERE version <> ALL ('{%s}'::int[]);
    IF unknown IS NOT NULL THEN
        RAISE EXCEPTION 'database records migration %%, which this schema does not have: it was migrated by a newer sluice; nothing was changed', unknown;
    END IF;
END
$sluice_check$;
`, strings.Join(versions, ","))

	b.WriteString("\n-- One transaction, behind the fence: calls running meanwhile see the old\n")
	b.WriteString("-- schema or the new one.\nBEGIN;\n")
	b.WriteString(fenceSQL)
	for _, m := range src.migrations {
		body := src.migrSQL[m.Path]
		outer := dollarTag("sluice_migrate", body)
		inner := dollarTag("sluice_sql", body)
		fmt.Fprintf(&b, "\n-- %s\n", m.Path)
		fmt.Fprintf(&b, "DO %s\nBEGIN\n", outer)
		fmt.Fprintf(&b, "    IF EXISTS (SELECT 1 FROM sluice.schema_migration WHERE version = %d) THEN\n        RETURN;\n    END IF;\n", m.Version)
		fmt.Fprintf(&b, "    EXECUTE %s\n%s%s%s;\n", inner, body, newlineIfMissing(body), inner)
		fmt.Fprintf(&b, "    INSERT INTO sluice.schema_migration (version, name) VALUES (%d, %s);\n", m.Version, quoteLiteral(m.Name))
		fmt.Fprintf(&b, "END\n%s;\n", outer)
	}

	if len(src.functions) > 0 {
		fmt.Fprintf(&b, "\n-- Functions, in the order of %s.\n", manifestPath)
		for _, p := range src.functions {
			body := src.funcSQL[p]
			fmt.Fprintf(&b, "\n-- %s\n%s%s", p, body, newlineIfMissing(body))
		}
	}
	b.WriteString("COMMIT;\n")

	fmt.Fprintf(&b, "\nDO $sluice_unlock$ BEGIN PERFORM pg_advisory_unlock(%d); END $sluice_unlock$;\n", LockKey)
	return b.String(), nil
}

// dollarTag returns a dollar-quote tag based on name that does not occur in
// body.
func dollarTag(name, body string) string {
	tag := "$" + name + "$"
	for i := 1; strings.Contains(body, tag); i++ {
		tag = fmt.Sprintf("$%s_%d$", name, i)
	}
	return tag
}

func newlineIfMissing(s string) string {
	if strings.HasSuffix(s, "\n") {
		return ""
	}
	return "\n"
}

func quoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}
