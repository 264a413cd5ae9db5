// npm test: runs the compiled tests (npm's pretest compiled them) against a
// fresh database with the sluice schema and its pgmq layer, as
// make test-typescript does. The database comes from the repository's test
// harness (go run ../../internal/pgmqcompat/cmd/pgmqcompat-run): on the
// server DATABASE_URL names when it is set (its user needs CREATEDB), else
// on a private PostgreSQL it fetches and starts. Without Go on the PATH, the
// tests run on DATABASE_URL as it is, which must then have the sluice schema
// (sluice migrate --pgmq).

import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tests = readdirSync(join(root, "build", "test"))
  .filter((f) => f.endsWith(".test.js"))
  .map((f) => join("build", "test", f));
const node = [process.execPath, "--test", "--test-concurrency=1", ...tests];

const hasGo = spawnSync("go", ["version"], { stdio: "ignore" }).status === 0;
let cmd;
if (hasGo) {
  cmd = ["go", "run", "../../internal/pgmqcompat/cmd/pgmqcompat-run", ...node];
} else if (process.env.DATABASE_URL) {
  cmd = node;
} else {
  console.error(
    "npm test needs a database: Go on the PATH (the repository's harness starts a PostgreSQL), " +
      "or DATABASE_URL naming a database with the sluice schema (sluice migrate --pgmq).",
  );
  process.exit(2);
}
const r = spawnSync(cmd[0], cmd.slice(1), { cwd: root, stdio: "inherit" });
process.exit(r.status ?? 1);
