package sqlsrc_test

import (
	"fmt"
	"testing"
	"time"
)

// nextDue is the newest cut row's next_due of queue qid, as text
// ('infinity', '-infinity' or a time), and how many cut rows it has.
func (b *bundle) nextDue(qid int64) (string, int64) {
	b.t.Helper()
	var due string
	var cuts int64
	if err := b.pool.QueryRow(b.ctx, fmt.Sprintf(`SELECT c.next_due::text, (SELECT count(*) FROM sluice_q%[1]d.cut)
		FROM sluice_q%[1]d.cut c ORDER BY c.cut_no DESC LIMIT 1`, qid)).Scan(&due, &cuts); err != nil {
		b.t.Fatal(err)
	}
	return due, cuts
}

// receiveNothingNewCut receives three times from queue qid (name queue)
// before its delayed message is due: nothing, and no cut row written.
func (b *bundle) receiveNothingNewCut(queue string, qid int64) {
	b.t.Helper()
	_, cuts := b.nextDue(qid)
	for i := 0; i < 3; i++ {
		if got := b.v2receive(queue, "default", 10, ""); len(got) != 0 {
			b.t.Fatalf("receive before the due time: %+v", got)
		}
	}
	if _, after := b.nextDue(qid); after != cuts {
		b.t.Errorf("receives before the due time wrote %d cut rows, want none", after-cuts)
	}
}

// The newest cut row carries the first due time of the messages waiting in
// pending, which the probe and the short cut read instead of pending: a cut
// that puts a delayed message aside writes its due time there, receives
// before it write no cut, and the cut that numbers it writes 'infinity'
// (nothing waits). A nack's retry with a backoff waits there too.
func TestV2NextDueFollowsPending(t *testing.T) {
	b := setup(t)
	b.createV2("ndue", "")
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'ndue'")
	if due, _ := b.nextDue(qid); due != "infinity" {
		t.Fatalf("a new queue's next_due: %s, want infinity", due)
	}
	delayed := b.int64(`SELECT sluice.send('ndue', '{"d": 1}', delay => '1500 milliseconds')`)
	b.exec(`SELECT sluice.send('ndue', '{"d": 0}')`)
	if got := b.v2receive("ndue", "default", 10, ""); len(got) != 1 || got[0].ID == delayed {
		t.Fatalf("first receive: %+v, want the message not delayed", got)
	}
	want := b.int64(fmt.Sprintf(`SELECT count(*) FROM sluice_q%d.msg m
		WHERE m.id = %d AND m.due = (SELECT c.next_due FROM sluice_q%[1]d.cut c ORDER BY c.cut_no DESC LIMIT 1)`, qid, delayed))
	if want != 1 {
		due, _ := b.nextDue(qid)
		t.Fatalf("next_due after the delayed message was put aside: %s, want its due time", due)
	}
	b.receiveNothingNewCut("ndue", qid)
	time.Sleep(1600 * time.Millisecond)
	got := b.v2receive("ndue", "default", 10, "")
	if len(got) != 1 || got[0].ID != delayed {
		t.Fatalf("receive after the due time: %+v, want message %d", got, delayed)
	}
	if due, _ := b.nextDue(qid); due != "infinity" {
		t.Errorf("next_due once the delayed message is numbered: %s, want infinity", due)
	}
	if !b.nack("ndue", "default", got[0].Receipt, "1 second", "again") {
		t.Fatal("nack failed")
	}
	if got := b.v2receive("ndue", "default", 10, ""); len(got) != 0 {
		t.Fatalf("receive right after the nack: %+v", got)
	}
	if due, _ := b.nextDue(qid); due == "infinity" {
		t.Errorf("next_due with a retry waiting: infinity, want its due time")
	}
	time.Sleep(1100 * time.Millisecond)
	if got := b.v2receive("ndue", "default", 10, ""); len(got) != 1 || got[0].Attempt != 2 {
		t.Fatalf("receive after the backoff: %+v, want the retry (attempt 2)", got)
	}
}

// A queue made before cut rows carried next_due gets the column from the
// migration ('-infinity' in its rows: not known). Its next cut reads
// pending and writes the due time of the message waiting there, though it
// numbers nothing; the receives after it write no cut (the probe does not
// find the same "due" message at every receive), and the message is
// delivered when due.
func TestV2NextDueNotKnownIsReadFromPending(t *testing.T) {
	b := setup(t)
	b.createV2("ndold", "")
	qid := b.int64("SELECT id FROM sluice.queue WHERE name = 'ndold'")
	delayed := b.int64(`SELECT sluice.send('ndold', '{"d": 1}', delay => '1500 milliseconds')`)
	if got := b.v2receive("ndold", "default", 10, ""); len(got) != 0 {
		t.Fatalf("receive before the due time: %+v", got)
	}
	// the layout before: no column (then the migration's hook)
	b.exec(fmt.Sprintf(`ALTER TABLE sluice_q%d.cut DROP COLUMN next_due`, qid))
	b.exec(`SELECT sluice._instantiate_v2($1::int)`, qid)
	due, cuts := b.nextDue(qid)
	if due != "-infinity" {
		t.Fatalf("next_due after the migration: %s, want -infinity", due)
	}
	if got := b.v2receive("ndold", "default", 10, ""); len(got) != 0 {
		t.Fatalf("first receive after the migration: %+v", got)
	}
	due, after := b.nextDue(qid)
	if after != cuts+1 || due == "-infinity" || due == "infinity" {
		t.Fatalf("after the first receive: next_due %s, %d cut rows written; want the due time, 1", due, after-cuts)
	}
	b.receiveNothingNewCut("ndold", qid)
	time.Sleep(1600 * time.Millisecond)
	if got := b.v2receive("ndold", "default", 10, ""); len(got) != 1 || got[0].ID != delayed {
		t.Fatalf("receive after the due time: %+v, want message %d", got, delayed)
	}
}
