#!/usr/bin/env bash
# Instructions per receive-and-ack round, counted by callgrind in a
# single-user PostgreSQL backend: repeatable on a noisy machine, where
# wall-clock A/B runs of an engine change are not (docs/design.md, "Costs
# and limits"). One line per sluice binary given (each migrates its own
# embedded SQL, so binaries built at two commits compare the two engines),
# and a DIY SKIP LOCKED dequeue as the reference.
#
# usage: bench/instructions/run.sh SLUICE_BINARY[@OPTIONS]...
#   e.g. go build -o /tmp/sluice-a ./cmd/sluice; git checkout X; go build -o /tmp/sluice-b ./cmd/sluice
#        bench/instructions/run.sh /tmp/sluice-a /tmp/sluice-b
#   OPTIONS: create_queue options merged over the defaults below, e.g. the
#   same binary's two engines: bench/instructions/run.sh bin/sluice 'bin/sluice@{"engine": 2}'
# env:   PGBIN    PostgreSQL server binaries (default: pg_config --bindir)
#        RUN_AS   the user that runs the server when this runs as root
#                 (default postgres: PostgreSQL refuses to run as root)
#        BATCHES  receive sizes (default "1 100"); 0 is an empty receive
#                 (max 1) of a group that has nothing, without an ack, after
#                 a statement that clears the session's idle note of the
#                 group, so that it looks at every lane (the reference: the
#                 same DELETE on an empty table, after the same statement on
#                 a setting of its own; each round counts that statement,
#                 0.06M); s is the
#                 steady state: a round is a send of one message, then a
#                 receive of 1 and its ack, on a queue of its own with
#                 nothing else in it, so that each receive numbers the
#                 message just sent (the reference: an INSERT, then the
#                 DELETE of 1); i is an empty receive of that group while
#                 its idle note holds (as most receives of a consumer that
#                 polls an idle queue are: within 25 ms of one that found
#                 every lane idle; under callgrind 25 ms pass within a few
#                 receives, so the script extends the note); u is s on a queue whose current slot holds
#                 20,000 messages received and acked before the run (as a
#                 slot does under steady traffic before it rotates: what a
#                 round costs must not grow with them; the same reference);
#                 b is s at batch 100: a send_batch of 100, then a receive
#                 of 100 and its ack, so that each receive numbers (a cut of
#                 100) what was just sent, which the batch-100 rounds, taking
#                 from a preload numbered before they are counted, leave out
#                 (the reference: an INSERT of 100 rows, then the DELETE of 100);
#                 a is batch 1 with the ack carried: a round is one receive of
#                 1 that acks the previous round's message (receive's ack
#                 argument), one transaction, as a worker that acks with its
#                 next receive runs (the reference: the same DELETE of 1);
#                 n is a send alone: a round is one sluice.send of one
#                 message to the steady rounds' queue (the reference: the
#                 INSERT of one row), what a producer of one message per
#                 transaction costs;
#                 p is batch 1 through the PGMQ layer (migrated with
#                 --pgmq): a round is pgmq.read of 1 (vt 1 hour), then
#                 pgmq.delete of its msg_ids, on a pgmq queue preloaded by
#                 pgmq.send_batch (the reference: the same DELETE of 1)
#        SEED     the seed of random() in each backend (default 0.5): a
#                 receive starts at a random lane, and the lanes it passes
#                 change its cost, so that counts repeat only with one seed;
#                 compare binaries with the same seed, and several seeds for
#                 a change that moves how lanes are picked
#        PROFILE  a directory: keep each count's callgrind file there
#                 (DB-BATCH-few.out, DB-BATCH-many.out) and write
#                 DB-BATCH.txt, the instructions per round of each function,
#                 inclusive (with what it calls) and exclusive, many less few
#                 over the rounds between: where a round goes
#        SETUP    SQL statements run on each sluice database (each its own
#                 transaction) after the queue 'ic' is made and before the
#                 preload, e.g. a prioritized message sent and consumed: SETUP="SELECT sluice.send('ic', '{}', priority => 5);
#                 SELECT sluice.ack('ic', 'default', array_agg(receipt))
#                 FROM sluice.receive('ic', 'default', 1)"
#
# A round is one sluice.receive of the batch size then one sluice.ack of its
# receipts, each its own transaction (a statement per transaction in
# single-user mode), on a queue preloaded with as many messages as the
# rounds take (lanes 8, lease 1 hour, no rotation during the run). Instructions per round are the
# difference between a run of few and of many rounds, over their difference,
# each run starting from the same copy of the databases, so start-up, the
# first calls' compilation and the cut that numbers the preload (the first
# receive's: a round's figure leaves numbering out) cancel out. Under callgrind a
# backend runs ~50x slower, so what the engine does once a second (the
# low-water mark, maintenance) comes ~50x as often per round: compare
# engines with this, do not read it as a production profile.
set -euo pipefail

shopt -s inherit_errexit
[ $# -ge 1 ] || { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 2; }
for tool in valgrind callgrind_annotate; do
	command -v "$tool" >/dev/null || { echo "run.sh: $tool is needed (apt-get install valgrind)" >&2; exit 1; }
done
PGBIN=${PGBIN:-$(pg_config --bindir 2>/dev/null || true)}
[ -x "$PGBIN/postgres" ] || { echo "run.sh: no PostgreSQL server in PGBIN='$PGBIN' (set PGBIN)" >&2; exit 1; }
BATCHES=${BATCHES:-1 100}
# few and many rounds of a batch size: 50 and 250 of small batches, 20 and
# 30 of large ones. (3 and 13 before: a path that a receive of 100 takes
# every few rounds, the ack of a batch that took two lanes, was first run,
# compiled and planned (its first five runs, custom plans) in the rounds
# counted, ~0.3M a round that a connection pays once; the few rounds run
# every path five times. The preload is what the many rounds of each size
# take (each count starts from the same copy), fewer than the 4,096 messages
# that the first receive's cut numbers: with more, the later cuts fell in
# the counts, ~8M a round at 40 and 50, and an empty receive cut each time.)
steady() { [ "$1" = s ] || [ "$1" = u ] || [ "$1" = b ] || [ "$1" = n ]; }
empty() { [ "$1" = 0 ] || [ "$1" = i ]; }
# (a and p: one message a round)
large() { [ "$1" = b ] || { ! steady "$1" && ! empty "$1" && [ "$1" != a ] && [ "$1" != p ] && [ "$1" -ge 50 ]; }; }
few() { if large "$1"; then echo 20; else echo 50; fi; }
many() { if large "$1"; then echo 30; else echo 250; fi; }
# messages a round of a batch size takes (an empty receive takes nothing:
# batch 0 preloads nothing)
takes() { if [ "$1" = a ] || [ "$1" = p ]; then echo 1; else echo "$1"; fi; }
preload=0
for b in $BATCHES; do steady "$b" || empty "$b" || [ "$b" = p ] || preload=$((preload + $(takes "$b") * $(many "$b"))); done
# (the PGMQ layer's rounds read their own queue, the reference's share q:
# ic's preload stays as without them, where the other rounds' lanes fall)
ppreload=0
case " $BATCHES " in *" p "*) ppreload=$(($(few p) + $(many p))) ;; esac
as_user() { if [ "$(id -u)" = 0 ]; then su "${RUN_AS:-postgres}" -s /bin/bash -c "$1"; else bash -c "$1"; fi; }

work=$(mktemp -d)
cleanup() {
	# (a single-user backend left by an interrupt first: pg_ctl does not stop it)
	pkill -f "postgres --single -D $work/data" 2>/dev/null || true
	as_user "'$PGBIN/pg_ctl' -D '$work/data' -m immediate stop" >/dev/null 2>&1 || true
	rm -rf "$work"
}
trap cleanup EXIT
chmod 755 "$work"
if [ "$(id -u)" = 0 ]; then chown "${RUN_AS:-postgres}" "$work"; fi
port=54999
url() { echo "postgres://postgres@/$1?host=$work&port=$port"; }

as_user "'$PGBIN/initdb' -D '$work/data' -U postgres --auth=trust" >/dev/null
start() { as_user "'$PGBIN/pg_ctl' -D '$work/data' -o \"-p $port -k '$work' -c listen_addresses=''\" -l '$work/log' -w start" >/dev/null; }
stop() { as_user "'$PGBIN/pg_ctl' -D '$work/data' -w stop" >/dev/null; }
psql_() { "$PGBIN/psql" -X -q -v ON_ERROR_STOP=1 "$@"; }

start
i=0
for arg in "$@"; do
	i=$((i + 1))
	bin=${arg%%@*}
	opts='{}'
	[ "$bin" = "$arg" ] || opts=${arg#*@}
	psql_ "$(url postgres)" -c "CREATE DATABASE s$i"
	pgmq=; [ "$ppreload" = 0 ] || pgmq=--pgmq
	"$bin" migrate $pgmq --database-url "$(url s$i)" >/dev/null 2>&1 || { echo "run.sh: $bin migrate failed" >&2; exit 1; }
	# (no rotation of the queue or of the layer's side tables during the run)
	[ "$ppreload" = 0 ] || psql_ "$(url s$i)" -c "SELECT pgmq.create('pq')" \
		-c "SELECT sluice.alter_queue('pq', '{\"rotate_interval\": \"1 day\"}')" \
		-c "SELECT count(*) FROM pgmq.send_batch('pq', ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat('x', 64)) FROM generate_series(1, $ppreload) g))" \
		>/dev/null
	psql_ "$(url s$i)" \
		-c "SELECT sluice.create_queue('ic', '{\"lease\": \"1 hour\", \"rotate_interval\": \"1 day\"}'::jsonb || '${opts//\'/\'\'}'::jsonb)" >/dev/null
	# (from standard input: each statement of SETUP its own transaction)
	[ -z "${SETUP:-}" ] || printf '%s\n' "$SETUP" | psql_ "$(url s$i)" >/dev/null
	psql_ "$(url s$i)" \
		-c "SELECT count(*) FROM sluice.send_batch('ic', ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat('x', 64)) FROM generate_series(1, $preload) g))" \
		>/dev/null
	# (the empty receives' group, after the preload: only when measured, as
	# a second group costs the others' rounds too)
	case " $BATCHES " in *" 0 "* | *" i "*) psql_ "$(url s$i)" -c "SELECT sluice.create_group('ic', 'idle', 'latest')" >/dev/null
		psql_ "$(url s$i)" -Atc "SELECT sluice._idle_note_name(q.id, g.id) FROM sluice.queue q
		                         JOIN sluice.consumer_group g ON g.queue_id = q.id WHERE q.name = 'ic' AND g.name = 'idle'" \
			>"$work/note-s$i" ;; esac
	# (the steady rounds' queue, empty)
	case " $BATCHES " in *" s "* | *" n "*) psql_ "$(url s$i)" \
		-c "SELECT sluice.create_queue('st', '{\"lease\": \"1 hour\", \"rotate_interval\": \"1 day\"}'::jsonb || '${opts//\'/\'\'}'::jsonb)" >/dev/null ;; esac
	case " $BATCHES " in *" b "*) psql_ "$(url s$i)" \
		-c "SELECT sluice.create_queue('sb', '{\"lease\": \"1 hour\", \"rotate_interval\": \"1 day\"}'::jsonb || '${opts//\'/\'\'}'::jsonb)" >/dev/null ;; esac
	case " $BATCHES " in *" u "*) psql_ "$(url s$i)" \
		-c "SELECT sluice.create_queue('su', '{\"lease\": \"1 hour\", \"rotate_interval\": \"1 day\"}'::jsonb || '${opts//\'/\'\'}'::jsonb)" \
		-c "SELECT count(*) FROM sluice.send_batch('su', ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat('x', 64)) FROM generate_series(1, 20000) g))" \
		-c "DO \$\$ DECLARE r text[]; BEGIN LOOP
		        SELECT array_agg(m.receipt) INTO r FROM sluice.receive('su', 'default', 1000) m;
		        EXIT WHEN r IS NULL; PERFORM sluice.ack('su', 'default', r); END LOOP; END \$\$" >/dev/null ;; esac
done
psql_ "$(url postgres)" -c "CREATE DATABASE sl"
psql_ "$(url sl)" -c "CREATE TABLE q (id bigserial PRIMARY KEY, body jsonb NOT NULL)" \
	-c "CREATE TABLE q0 (id bigserial PRIMARY KEY, body jsonb NOT NULL)" \
	-c "CREATE TABLE qs (id bigserial PRIMARY KEY, body jsonb NOT NULL)" \
	-c "INSERT INTO q (body) SELECT jsonb_build_object('n', g, 'pad', repeat('x', 64)) FROM generate_series(1, $((preload + ppreload))) g" \
	-c "VACUUM ANALYZE q" -c "VACUUM ANALYZE q0" -c "VACUUM ANALYZE qs" >/dev/null
stop
# (each count starts from this state: a run left what it did behind, so the
# one-time work of the first run of a database, such as the cut that numbers
# the preload, was subtracted from its rounds: batch 1 read 0.2M to 0.4M a
# round too few, and a cheaper cut made it look dearer)
cp -a "$work/data" "$work/data0"

# rounds DB BATCH N: a script of N rounds. Both kinds read every body they
# get (its length, as text) and print one row; sluice keeps the receipts in
# a session setting for the ack (a scratch table would be scanned with its
# dead rows: no vacuum runs in single-user mode).
rounds() {
	local n
	# (receives start at a random lane: a fixed seed makes a run's paths,
	# and so its counts, repeat; at batch 100 two seeds differ by ~0.6M)
	echo "SELECT setseed(${SEED:-0.5})"
	for ((n = 0; n < $3; n++)); do
		if [ "$1" = sl ] && [ "$2" = b ]; then
			echo "INSERT INTO qs (body) SELECT jsonb_build_object('n', g, 'pad', repeat('x', 64)) FROM generate_series(1, 100) g"
			echo "WITH d AS (DELETE FROM qs WHERE id = ANY (ARRAY(SELECT id FROM qs ORDER BY id LIMIT 100 FOR UPDATE SKIP LOCKED)) RETURNING id, body) SELECT count(*), sum(length(d.body::text)) FROM d"
		elif [ "$2" = b ]; then
			echo "SELECT count(*) FROM sluice.send_batch('sb', ARRAY(SELECT jsonb_build_object('n', g, 'pad', repeat('x', 64)) FROM generate_series(1, 100) g))"
			echo "SELECT set_config('bench.receipts', coalesce(array_agg(m.receipt), '{}')::text, false), sum(length(m.body::text)) FROM sluice.receive('sb', 'default', 100) m"
			echo "SELECT sluice.ack('sb', 'default', current_setting('bench.receipts')::text[])"
		elif [ "$1" = sl ] && [ "$2" = n ]; then
			echo "INSERT INTO qs (body) VALUES (jsonb_build_object('n', $n, 'pad', repeat('x', 64)))"
		elif [ "$2" = n ]; then
			echo "SELECT sluice.send('st', jsonb_build_object('n', $n, 'pad', repeat('x', 64)))"
		elif [ "$1" = sl ] && { [ "$2" = s ] || [ "$2" = u ]; }; then
			echo "INSERT INTO qs (body) VALUES (jsonb_build_object('n', $n, 'pad', repeat('x', 64)))"
			echo "WITH d AS (DELETE FROM qs WHERE id = ANY (ARRAY(SELECT id FROM qs ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)) RETURNING id, body) SELECT count(*), sum(length(d.body::text)) FROM d"
		elif [ "$2" = s ] || [ "$2" = u ]; then
			local sq=st; [ "$2" = s ] || sq=su
			echo "SELECT sluice.send('$sq', jsonb_build_object('n', $n, 'pad', repeat('x', 64)))"
			echo "SELECT set_config('bench.receipts', coalesce(array_agg(m.receipt), '{}')::text, false), sum(length(m.body::text)) FROM sluice.receive('$sq', 'default', 1) m"
			echo "SELECT sluice.ack('$sq', 'default', current_setting('bench.receipts')::text[])"
		elif [ "$1" = sl ] && empty "$2"; then
			# (0: a statement like the one that clears sluice's note first)
			[ "$2" != 0 ] || echo "SELECT set_config('bench.note', '', false)"
			echo "WITH d AS (DELETE FROM q0 WHERE id = ANY (ARRAY(SELECT id FROM q0 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED)) RETURNING id, body) SELECT count(*), sum(length(d.body::text)) FROM d"
		elif [ "$1" = sl ]; then
			echo "WITH d AS (DELETE FROM q WHERE id = ANY (ARRAY(SELECT id FROM q ORDER BY id LIMIT $(takes "$2") FOR UPDATE SKIP LOCKED)) RETURNING id, body) SELECT count(*), sum(length(d.body::text)) FROM d"
		elif [ "$2" = 0 ]; then
			# (the session's idle note of the group cleared first: else
			# most rounds, 25 ms apart under callgrind's slowdown, would be
			# polls while the note holds)
			echo "SELECT set_config('$(cat "$work/note-$1")', '', false)"
			echo "SELECT count(*) FROM sluice.receive('ic', 'idle', 1) m"
		elif [ "$2" = i ]; then
			# (the first receive notes the group idle; its note's end is
			# then moved an hour on)
			[ "$n" -gt 0 ] || echo "SELECT count(*) FROM sluice.receive('ic', 'idle', 1) m; SELECT set_config(x.n, split_part(current_setting(x.n), ':', 1) || ':' || ((extract(epoch FROM now()) + 3600) * 1000000)::bigint, false) FROM (SELECT sluice._idle_note_name(q.id, g.id) AS n FROM sluice.queue q JOIN sluice.consumer_group g ON g.queue_id = q.id WHERE q.name = 'ic' AND g.name = 'idle') x"
			echo "SELECT count(*) FROM sluice.receive('ic', 'idle', 1) m"
		elif [ "$2" = p ]; then
			echo "SELECT set_config('bench.ids', coalesce(array_agg(r.msg_id), '{}')::text, false), sum(length(r.message::text)) FROM pgmq.read('pq', 3600, 1) r"
			echo "SELECT count(*) FROM pgmq.delete('pq', current_setting('bench.ids')::bigint[])"
		elif [ "$2" = a ]; then
			# (the first round's setting is unset: no ack)
			echo "SELECT set_config('bench.receipts', coalesce(array_agg(m.receipt), '{}')::text, false), sum(length(m.body::text)) FROM sluice.receive('ic', 'default', 1, ack => nullif(current_setting('bench.receipts', true), '')::text[]) m"
		else
			echo "SELECT set_config('bench.receipts', coalesce(array_agg(m.receipt), '{}')::text, false), sum(length(m.body::text)) FROM sluice.receive('ic', 'default', $2) m"
			echo "SELECT sluice.ack('ic', 'default', current_setting('bench.receipts')::text[])"
		fi
	done
}

# count DB SCRIPT [KEEP]: the instructions of a single-user backend running
# SCRIPT; fails when a statement of it failed (a single-user backend goes on
# after an error) or callgrind gave no total
count() {
	local out="$work/cg.out" log="$work/backend.log" n
	rm -rf "$work/data" && cp -a "$work/data0" "$work/data"
	as_user "valgrind --tool=callgrind --callgrind-out-file='$out' '$PGBIN/postgres' --single -D '$work/data' $1 < '$2' > '$log' 2>&1"
	if grep -q 'ERROR:' "$log"; then
		echo "run.sh: a statement failed in database $1:" >&2
		grep -m3 -A1 'ERROR:' "$log" >&2
		exit 1
	fi
	# (awk reads to the end: an early exit would kill callgrind_annotate with
	# SIGPIPE, which pipefail turns into a failure)
	n=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ && !done { gsub(",", "", $1); print $1; done = 1 }')
	[ -n "$n" ] || { echo "run.sh: callgrind gave no total for database $1 (see $log)" >&2; exit 1; }
	if [ -n "${3:-}" ]; then mv "$out" "$3"; else rm -f "$out"; fi
	echo "$n"
}

# fns KIND: callgrind_annotate's lines as KIND COUNT FUNCTION (the name
# without its file and object; a static function is its address, unless
# PGBIN is a build with symbols: bench/instructions/postgres-symbols.sh).
# (--auto=no: with a build's sources at hand, callgrind_annotate would
# append them annotated, their call lines counted as functions here)
fns() {
	awk -v k="$1" '$1 ~ /^[0-9,]+$/ && match($0, /%\) +/) {
		n = $1; gsub(",", "", n); f = substr($0, RSTART + RLENGTH)
		sub(/ \[.*$/, "", f); sub(/^[^:]*:/, "", f); print k, n, f }'
}

# profile FEW MANY ROUNDS OUT: per function, the inclusive and exclusive
# instructions of MANY less FEW over ROUNDS, the largest inclusive first
profile() {
	local f
	for f in "$1" "$2"; do
		callgrind_annotate --auto=no --inclusive=yes --threshold=100 "$f" 2>/dev/null | fns i
		callgrind_annotate --auto=no --threshold=100 "$f" 2>/dev/null | fns e
		echo "--"
	done | awk -v n="$3" '
		$1 == "--" { file++; next }
		{ f = $0; sub(/^[^ ]+ [^ ]+ /, "", f); v[$1, f] += (file ? 1 : -1) * $2; fn[f] = 1 }
		END {
			for (f in fn) if (v["i", f] / n >= 1000) printf "%12.0f %12.0f  %s\n", v["i", f] / n, v["e", f] / n, f
		}' | sort -rn > "$4"
	sed -i '1i\ inclusive    exclusive  function (instructions per round)' "$4"
}

printf '| engine | %s |\n|---|%s\n' "$(for b in $BATCHES; do case $b in 0) printf 'empty receive: instructions | ' ;; i) printf 'empty receive, idle note holding: instructions | ' ;; a) printf 'batch 1, ack carried by the next receive: instructions per round | ' ;; p) printf 'PGMQ layer, batch 1 (read, delete): instructions per round | ' ;; s) printf 'steady (send 1, receive 1, ack): instructions per round | ' ;; n) printf 'send of 1: instructions | ' ;; u) printf 'steady, slot of 20,000 used: instructions per round | ' ;; b) printf 'steady at batch 100 (send 100, receive 100, ack): instructions per round | ' ;; *) printf 'batch %s: instructions per round | ' "$b" ;; esac; done | sed 's/ | $//')" \
	"$(for b in $BATCHES; do printf -- '--:|'; done)"
dbs=(); labels=()
i=0
for arg in "$@"; do i=$((i + 1)); dbs+=("s$i"); labels+=("sluice ($arg)"); done
dbs+=(sl); labels+=("SKIP LOCKED DELETE (reference)")
for k in "${!dbs[@]}"; do
	db=${dbs[$k]}
	line="| ${labels[$k]} |"
	for b in $BATCHES; do
		few=$(few "$b"); many=$(many "$b")
		rounds "$db" "$b" "$few" > "$work/few.sql"
		rounds "$db" "$b" "$many" > "$work/many.sql"
		chmod 644 "$work"/*.sql
		if [ -n "${PROFILE:-}" ]; then
			mkdir -p "$PROFILE"
			a=$(count "$db" "$work/few.sql" "$PROFILE/$db-$b-few.out")
			c=$(count "$db" "$work/many.sql" "$PROFILE/$db-$b-many.out")
			profile "$PROFILE/$db-$b-few.out" "$PROFILE/$db-$b-many.out" $((many - few)) "$PROFILE/$db-$b.txt"
		else
			a=$(count "$db" "$work/few.sql")
			c=$(count "$db" "$work/many.sql")
		fi
		line="$line $(awk -v a="$a" -v c="$c" -v n=$((many - few)) 'BEGIN { printf "%.2fM", (c - a) / n / 1e6 }') |"
	done
	echo "$line"
done
