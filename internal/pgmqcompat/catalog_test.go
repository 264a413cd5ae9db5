package pgmqcompat

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sluicemq/sluice/internal/pgtest"
)

// pgmq113 lists the public functions of PGMQ 1.13.0 as pg_get_function_arguments
// and pg_get_function_result show them for PGMQ's own pgmq.sql (the copy the
// pgmq package on PyPI ships): names, parameter names, types, defaults and
// result types are the contract clients rely on.
var pgmq113 = []string{
	"create(queue_name text) void",
	"create_non_partitioned(queue_name text) void",
	"create_unlogged(queue_name text) void",
	"create_partitioned(queue_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text, premake integer DEFAULT 4) void",
	"convert_archive_partitioned(table_name text, partition_interval text DEFAULT '10000'::text, retention_interval text DEFAULT '100000'::text, leading_partition integer DEFAULT 10) void",
	"validate_queue_name(queue_name text) void",
	"format_table_name(queue_name text, prefix text) text",
	"create_fifo_index(queue_name text) void",
	"create_fifo_indexes_all() void",
	"drop_queue(queue_name text) boolean",
	"drop_queue(queue_name text, partitioned boolean) boolean",
	"acquire_queue_lock(queue_name text) void",
	"purge_queue(queue_name text) bigint",
	"list_queues() SETOF pgmq.queue_record",
	"detach_archive(queue_name text) void",
	"send(queue_name text, msg jsonb) SETOF bigint",
	"send(queue_name text, msg jsonb, headers jsonb) SETOF bigint",
	"send(queue_name text, msg jsonb, delay integer) SETOF bigint",
	"send(queue_name text, msg jsonb, delay timestamp with time zone) SETOF bigint",
	"send(queue_name text, msg jsonb, headers jsonb, delay integer) SETOF bigint",
	"send(queue_name text, msg jsonb, headers jsonb, delay timestamp with time zone) SETOF bigint",
	"send_batch(queue_name text, msgs jsonb[]) SETOF bigint",
	"send_batch(queue_name text, msgs jsonb[], headers jsonb[]) SETOF bigint",
	"send_batch(queue_name text, msgs jsonb[], delay integer) SETOF bigint",
	"send_batch(queue_name text, msgs jsonb[], delay timestamp with time zone) SETOF bigint",
	"send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay integer) SETOF bigint",
	"send_batch(queue_name text, msgs jsonb[], headers jsonb[], delay timestamp with time zone) SETOF bigint",
	"read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}'::jsonb) SETOF pgmq.message_record",
	"read_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100, conditional jsonb DEFAULT '{}'::jsonb) SETOF pgmq.message_record",
	"read_grouped(queue_name text, vt integer, qty integer) SETOF pgmq.message_record",
	"read_grouped_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100) SETOF pgmq.message_record",
	"read_grouped_rr(queue_name text, vt integer, qty integer) SETOF pgmq.message_record",
	"read_grouped_rr_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100) SETOF pgmq.message_record",
	"read_grouped_head(queue_name text, vt integer, qty integer) SETOF pgmq.message_record",
	"read_grouped_head_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, poll_interval_ms integer DEFAULT 100) SETOF pgmq.message_record",
	"pop(queue_name text, qty integer DEFAULT 1) SETOF pgmq.message_record",
	"delete(queue_name text, msg_id bigint) boolean",
	"delete(queue_name text, msg_ids bigint[]) SETOF bigint",
	"archive(queue_name text, msg_id bigint) boolean",
	"archive(queue_name text, msg_ids bigint[]) SETOF bigint",
	"set_vt(queue_name text, msg_id bigint, vt integer) SETOF pgmq.message_record",
	"set_vt(queue_name text, msg_id bigint, vt timestamp with time zone) SETOF pgmq.message_record",
	"set_vt(queue_name text, msg_ids bigint[], vt integer) SETOF pgmq.message_record",
	"set_vt(queue_name text, msg_ids bigint[], vt timestamp with time zone) SETOF pgmq.message_record",
	"metrics(queue_name text) pgmq.metrics_result",
	"metrics_all() SETOF pgmq.metrics_result",
	"validate_routing_key(routing_key text) boolean",
	"validate_topic_pattern(pattern text) boolean",
	"bind_topic(pattern text, queue_name text) void",
	"unbind_topic(pattern text, queue_name text) boolean",
	"test_routing(routing_key text) TABLE(pattern text, queue_name text, compiled_regex text)",
	"list_topic_bindings() TABLE(pattern text, queue_name text, bound_at timestamp with time zone, compiled_regex text)",
	"list_topic_bindings(queue_name text) TABLE(pattern text, queue_name text, bound_at timestamp with time zone, compiled_regex text)",
	"send_topic(routing_key text, msg jsonb) integer",
	"send_topic(routing_key text, msg jsonb, delay integer) integer",
	"send_topic(routing_key text, msg jsonb, headers jsonb, delay integer) integer",
	"send_batch_topic(routing_key text, msgs jsonb[]) TABLE(queue_name text, msg_id bigint)",
	"send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[]) TABLE(queue_name text, msg_id bigint)",
	"send_batch_topic(routing_key text, msgs jsonb[], delay integer) TABLE(queue_name text, msg_id bigint)",
	"send_batch_topic(routing_key text, msgs jsonb[], delay timestamp with time zone) TABLE(queue_name text, msg_id bigint)",
	"send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[], delay integer) TABLE(queue_name text, msg_id bigint)",
	"send_batch_topic(routing_key text, msgs jsonb[], headers jsonb[], delay timestamp with time zone) TABLE(queue_name text, msg_id bigint)",
	"enable_notify_insert(queue_name text, throttle_interval_ms integer DEFAULT 250) void",
	"disable_notify_insert(queue_name text) void",
	"update_notify_insert(queue_name text, throttle_interval_ms integer) void",
	"list_notify_insert_throttles() TABLE(queue_name text, throttle_interval_ms integer, last_notified_at timestamp with time zone)",
}

// pgmq113Types lists the columns of PGMQ's result types, in order.
var pgmq113Types = map[string]string{
	"message_record": "msg_id bigint, read_ct integer, enqueued_at timestamp with time zone, last_read_at timestamp with time zone, vt timestamp with time zone, message jsonb, headers jsonb",
	"queue_record":   "queue_name character varying, is_partitioned boolean, is_unlogged boolean, created_at timestamp with time zone",
	"metrics_result": "queue_name text, queue_length bigint, newest_msg_age_sec integer, oldest_msg_age_sec integer, total_messages bigint, scrape_time timestamp with time zone, queue_visible_length bigint, default_partition_length bigint",
}

func TestCatalogMatchesPGMQ113(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	rows, err := db.Query(ctxT(t), `
		SELECT p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' || pg_get_function_result(p.oid)
		  FROM pg_proc p WHERE p.pronamespace = 'pgmq'::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	have, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	set := make(map[string]bool, len(have))
	for _, h := range have {
		set[h] = true
	}
	for _, want := range pgmq113 {
		if !set[want] {
			t.Errorf("missing pgmq.%s", want)
		}
	}
	for typ, want := range pgmq113Types {
		got := scalar[string](t, db, `
			SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
			  FROM pg_attribute a WHERE a.attrelid = ('pgmq.' || $1)::regclass AND a.attnum > 0 AND NOT a.attisdropped`, typ)
		if got != want {
			t.Errorf("pgmq.%s: %s\n want %s", typ, got, want)
		}
	}
	// the views and archive tables have PGMQ's columns
	exec(t, db, "SELECT pgmq.create('cols')")
	for rel, want := range map[string]string{
		"q_cols": "msg_id bigint, read_ct integer, enqueued_at timestamp with time zone, last_read_at timestamp with time zone, vt timestamp with time zone, message jsonb, headers jsonb",
		"a_cols": "msg_id bigint, read_ct integer, enqueued_at timestamp with time zone, last_read_at timestamp with time zone, archived_at timestamp with time zone, vt timestamp with time zone, message jsonb, headers jsonb",
	} {
		got := scalar[string](t, db, `
			SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
			  FROM pg_attribute a WHERE a.attrelid = ('pgmq.' || $1)::regclass AND a.attnum > 0 AND NOT a.attisdropped`, rel)
		if got != want {
			t.Errorf("pgmq.%s: %s\n want %s", rel, got, want)
		}
	}
	if e := pgErr(t, db, "INSERT INTO pgmq.q_cols (msg_id) VALUES (1)"); e.Code == "" {
		t.Fatal("q_cols accepted an insert")
	}
}

func TestInstallGuardsAndScript(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// idempotent
	url := server.NewDatabase(t)
	conn := pgtest.Connect(t, url)
	first, err := Install(ctx, conn)
	if err != nil || len(first.Applied) != 2 || first.Version != 2 {
		t.Fatalf("first install: %+v, %v", first, err)
	}
	again, err := Install(ctx, conn)
	if err != nil || len(again.Applied) != 0 {
		t.Fatalf("second install: %+v, %v", again, err)
	}

	// a schema pgmq that sluice did not make
	foreign := pgtest.Connect(t, server.NewDatabase(t))
	if _, err := foreign.Exec(ctx, "CREATE SCHEMA pgmq; CREATE TABLE pgmq.meta (queue_name text)"); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(ctx, foreign); err == nil || !strings.Contains(err.Error(), "not created by sluice") {
		t.Fatalf("install over a foreign pgmq schema: %v", err)
	}

	// no sluice schema
	bare := pgtest.Connect(t, server.NewDatabaseFrom(t, nil))
	if _, err := Install(ctx, bare); err == nil || !strings.Contains(err.Error(), "run sluice migrate first") {
		t.Fatalf("install without sluice: %v", err)
	}
	if n := 0; bare.QueryRow(ctx, "SELECT count(*) FROM pg_namespace WHERE nspname = 'pgmq'").Scan(&n) != nil || n != 0 {
		t.Fatal("a refused install left schema pgmq")
	}

	// the script does what Install does, twice without harm
	script, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	body := strings.TrimPrefix(script, `\set ON_ERROR_STOP on`+"\n")
	sconn := pgtest.Connect(t, server.NewDatabase(t))
	for i := 0; i < 2; i++ {
		if _, err := sconn.Exec(ctx, body); err != nil {
			t.Fatalf("script run %d: %v", i+1, err)
		}
	}
	var n int
	if err := sconn.QueryRow(ctx, "SELECT count(*) FROM pgmq.sluice_migration").Scan(&n); err != nil || n != 2 {
		t.Fatalf("script recorded %d migrations, %v", n, err)
	}
	if _, err := sconn.Exec(ctx, "SELECT pgmq.create('s'); SELECT pgmq.send('s', '{}')"); err != nil {
		t.Fatalf("using the scripted layer: %v", err)
	}
}
